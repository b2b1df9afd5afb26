"""Make the files that tosca wrote in format 3 (commit d73a8da, the last one before per-image
outcomes and intervals: format 4), each with a validation split of 0.34 (one training image per
class of the 0.1 store): a run, a sweep, a baselines folder and a small suite (`suite.toml`, kept), on
the tosca 0.1 fixture's store (`../tosca-0.1/store.zarr`, copied here while they are made; the
tests copy it in again). Later versions must still open them
(`tests/tosca_heads/experiments/test_formats.py`).

Run with that version's `tosca` on the PATH, from this folder:

    git worktree add /tmp/tosca-d73 d73a8da && (cd /tmp/tosca-d73 && make install)
    PATH=/tmp/tosca-d73/.venv/bin:$PATH python make.py

Paths inside the files are written as `@FIXTURE@` placeholders, so the tests can put them anywhere.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
SPLIT = ["--init-cls", "1", "--increment", "1", "--device", "cpu"]
VAL = ["--val-fraction", "0.34"]
SUITE = """name = "tiny"
seeds = [0]
val_fraction = 0.34
[tosca]
flags = { epochs = 1, r = 4, s = 4 }
[baselines]
methods = ["simplecil", "ranpac"]
ranpac_m = 64
[[stores]]
name = "tiny"
path = "store.zarr"
init_cls = 1
increment = 1
"""


def tosca(*args: object) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    subprocess.run(["tosca", *map(str, args)], cwd=HERE, env=env, check=True)


def main() -> None:
    for name in ("store.zarr", "run", "sweep", "baselines", "suite", "store.zarr.lock", "suite.toml"):
        path = HERE / name
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
    shutil.copytree(HERE.parent / "tosca-0.1" / "store.zarr", HERE / "store.zarr")
    fit = ["--epochs", "1", "--r", "4", "--s", "4", *SPLIT, *VAL]
    tosca("fit", "--store", "store.zarr", "--run", "run", *fit)
    tosca(
        "sweep",
        "--store",
        "store.zarr",
        "--r",
        "2,4",
        "--epochs",
        "1",
        "--jobs",
        "1",
        "--out",
        "sweep",
        *SPLIT,
        *VAL,
    )
    tosca(
        "baselines", "--store", "store.zarr", "--run", "run", "--out", "baselines", "--ranpac-m", "64", *SPLIT, *VAL
    )
    (HERE / "suite.toml").write_text(SUITE)
    tosca("suite", "suite.toml", "--out", "suite", "--jobs", "1", "--device", "cpu")
    for path in HERE.rglob("*"):
        if path.suffix in (".json", ".csv", ".md", ".tex") and path.is_file():
            text = path.read_text()
            if str(HERE) in text:
                path.write_text(text.replace(str(HERE), "@FIXTURE@"))
    shutil.rmtree(HERE / "store.zarr")
    for junk in [*HERE.rglob("*.png"), *HERE.rglob("*.parquet"), *HERE.rglob("*.lock")]:
        junk.unlink()
    print(json.dumps(sorted(str(p.relative_to(HERE)) for p in HERE.rglob("*") if p.is_file())))


if __name__ == "__main__":
    main()
