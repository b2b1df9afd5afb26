"""Make the files that tosca wrote in format 3 (commit d73a8da, the last one before per-image
outcomes and intervals: format 4), each with a validation split of 0.34 (one training image per
class of the 0.1 store): a run, a sweep, a baselines folder and a small suite (`suite.toml`, kept), on
the tosca 0.1 fixture's store (`../tosca-0.1/store.zarr`, copied here while they are made; the
tests copy it in again), by format 2's make.py with the validation flags. Later versions must
still open them (`tests/tosca_heads/records/test_formats.py`).

Run with that version's `tosca` on the PATH, from this folder:

    git worktree add /tmp/tosca-d73 d73a8da && (cd /tmp/tosca-d73 && make install)
    PATH=/tmp/tosca-d73/.venv/bin:$PATH python make.py

Paths inside the files are written as `@FIXTURE@` placeholders, so the tests can put them anywhere.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

HERE = Path(__file__).resolve().parent
VAL = ("--val-fraction", "0.34")


def format_2() -> object:
    spec = importlib.util.spec_from_file_location("format_2_make", HERE.parent / "format-2" / "make.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    made = format_2()
    suite = made.SUITE.replace("seeds = [0]\n", "seeds = [0]\nval_fraction = 0.34\n")  # type: ignore[attr-defined]
    made.main(HERE, VAL, suite)  # type: ignore[attr-defined]
