"""Make the files that tosca wrote in format 2 (commit ec92508, the last one before the validation
split and format 3): a run, a sweep, a baselines folder and a small suite (`suite.toml`, kept), on
the tosca 0.1 fixture's store (`../tosca-0.1/store.zarr`, copied here while they are made; the
tests copy it in again). Later versions must still open them
(`tests/tosca_heads/records/test_formats.py`).

Run with that version's `tosca` on the PATH, from this folder:

    git worktree add /tmp/tosca-ec9 ec92508 && (cd /tmp/tosca-ec9 && make install)
    PATH=/tmp/tosca-ec9/.venv/bin:$PATH python make.py

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
SUITE = """name = "tiny"
seeds = [0]
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


def tosca(*args: object, here: Path = HERE) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    subprocess.run(["tosca", *map(str, args)], cwd=here, env=env, check=True)


def main(here: Path = HERE, extra: tuple[str, ...] = (), suite: str = SUITE) -> None:
    """The files, made in `here` (format 3's make.py calls this with its folder, its validation
    flags as `extra` for fit, sweep and baselines, and its suite file)."""
    split = [*SPLIT, *extra]

    def run(*args: object) -> None:
        tosca(*args, here=here)

    for name in ("store.zarr", "run", "sweep", "baselines", "suite", "store.zarr.lock", "suite.toml"):
        path = here / name
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
    shutil.copytree(HERE.parent / "tosca-0.1" / "store.zarr", here / "store.zarr")
    fit = ["--epochs", "1", "--r", "4", "--s", "4", *split]
    run("fit", "--store", "store.zarr", "--run", "run", *fit)
    run(
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
        *split,
    )
    run(
        "baselines", "--store", "store.zarr", "--run", "run", "--out", "baselines", "--ranpac-m", "64", *split
    )
    (here / "suite.toml").write_text(suite)
    run("suite", "suite.toml", "--out", "suite", "--jobs", "1", "--device", "cpu")
    for path in here.rglob("*"):
        if path.suffix in (".json", ".csv", ".md", ".tex") and path.is_file():
            text = path.read_text()
            if str(here) in text:
                path.write_text(text.replace(str(here), "@FIXTURE@"))
    shutil.rmtree(here / "store.zarr")
    for junk in [*here.rglob("*.png"), *here.rglob("*.parquet"), *here.rglob("*.lock")]:
        junk.unlink()
    print(json.dumps(sorted(str(p.relative_to(here)) for p in here.rglob("*") if p.is_file())))


if __name__ == "__main__":
    main()
