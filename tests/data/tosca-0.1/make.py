"""Make the files that tosca 0.1.0 (commit 243a87b, the last one before versioned files) wrote:
a store, a run, a sweep and a baselines folder, small enough to keep in the repository. Later
versions must still open them (`tests/tosca_heads/records/test_formats.py`).

Run with that version's `tosca` on the PATH, from this folder:

    git worktree add /tmp/tosca-0.1 243a87b && (cd /tmp/tosca-0.1 && make install)
    PATH=/tmp/tosca-0.1/.venv/bin:$PATH python make.py

The store is made from 2 classes of 3 + 1 generated 48 x 48 images (seeded) by timm's
`test_vit` with its fixed random init; the run, sweep and baselines use 1 epoch. Paths
inside the files are written relative to this folder's parent as `@FIXTURE@` placeholders, so
the tests can put them anywhere.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
from PIL import Image

HERE = Path(__file__).resolve().parent
SPLIT = ["--init-cls", "1", "--increment", "1", "--device", "cpu"]


def tosca(*args: object) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    subprocess.run(["tosca", *map(str, args)], cwd=HERE, env=env, check=True)


def images(root: Path) -> Path:
    rng = np.random.default_rng(1993)
    for split, n in (("train", 3), ("test", 1)):
        for c in range(2):
            folder = root / split / f"class_{c}"
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                pixels = np.clip(rng.normal(80 + 90 * c, 30, (48, 48, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(folder / f"img_{i}.png")
    return root


def main() -> None:
    for name in ("store.zarr", "run", "sweep", "baselines", "images", "store.zarr.lock"):
        shutil.rmtree(HERE / name, ignore_errors=True)
    tree = images(HERE / "images")
    tosca(
        *("extract", "--model", "test_vit", "--dataset", "imagefolder", "--data-root", tree),
        *("--store", "store.zarr", "--random-init", "--workers", "0", "--device", "cpu", "--chunk-size", "4"),
    )
    fit = ["--epochs", "1", "--r", "4", "--s", "4", *SPLIT]
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
    )
    tosca(
        "baselines", "--store", "store.zarr", "--run", "run", "--out", "baselines", "--ranpac-m", "64", *SPLIT
    )
    shutil.rmtree(tree)
    for path in HERE.rglob("*"):
        if path.suffix in (".json", ".csv", ".md") and path.is_file():
            text = path.read_text()
            if str(HERE) in text:
                path.write_text(text.replace(str(HERE), "@FIXTURE@"))
    for junk in [*HERE.rglob("*.png"), *HERE.rglob("*.parquet")]:
        junk.unlink()
    print(json.dumps(sorted(str(p.relative_to(HERE)) for p in HERE.rglob("*") if p.is_file())))


if __name__ == "__main__":
    main()
