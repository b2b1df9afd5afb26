"""A cell reruns to the same number, bit for bit: every method's metrics.json figures are identical
under `--jobs 1` and `--jobs 2`, OMP_NUM_THREADS=1 and 2, and from the manifest's command.

The store is one on which RanPAC's figures followed the BLAS thread count before every baseline
ran on one thread (its ridge choice and Cholesky on a 4,000-wide projection of 300 rows)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import ROOT
from support.stores import synthetic_store

from tosca_heads.records.suite import read_manifest

pytestmark = pytest.mark.slow

PLUGIN = '''
import numpy as np
import torch
from tosca_heads import register_baseline


@register_baseline("least_squares")
class LeastSquares:
    """A plug-in baseline whose float sums a multithreaded BLAS would split by its thread count."""

    incremental = False

    def __init__(self, device="cpu"):
        self.device = device

    def fit(self, features, labels):
        x = torch.as_tensor(features, dtype=torch.float32)
        y = torch.nn.functional.one_hot(torch.as_tensor(np.asarray(labels)).long()).float()
        self.weight_ = torch.linalg.lstsq(x.T @ x + 1e-3 * torch.eye(x.shape[1]), x.T @ y).solution
        return self

    def predict(self, features):
        return (torch.as_tensor(features, dtype=torch.float32) @ self.weight_).argmax(1).numpy()

    def num_parameters(self):
        return int(self.weight_.numel())
'''


def _suite(tmp_path: Path, step: str) -> Path:
    store = synthetic_store(
        tmp_path / "s.zarr", classes=10, per_class=30, test_per_class=10, dim=128, spread=3.0, seed=2
    )
    methods = '["simplecil", "ranpac", "joint_probe", "least_squares"]' if step == "native" else "[]"
    text = f"""name = "reruns"
seeds = [0]
val_fraction = 0.2
[tosca]
flags = {{ epochs = 2, batch_size = 16 }}
[baselines]
methods = {methods}
ranpac_projection_dim = 4000
[[stores]]
name = "s"
path = "{store.path}"
init_cls = 2
increment = 2
"""
    (tmp_path / "reruns.toml").write_text(text)
    (tmp_path / "plugins").mkdir(exist_ok=True)
    (tmp_path / "plugins" / "rerun_plugins.py").write_text(PLUGIN)
    return tmp_path / "reruns.toml"


def _env(tmp_path: Path, threads: int, step: str) -> dict[str, str]:
    return {
        **os.environ,
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
        "TOSCA_STEP": step,
        "TOSCA_PLUGINS": "rerun_plugins",
        "PYTHONPATH": os.pathsep.join([str(tmp_path / "plugins"), str(ROOT)]),
        "HF_HUB_OFFLINE": "1",
    }


def _tosca(args: list[str], env: dict[str, str], cwd: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from tosca_cli.app import main; main()", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def _figures(metrics: Path) -> dict[str, Any]:
    """What a cell's metrics.json holds of its results (every router's and split's blocks)."""
    data = json.loads(metrics.read_text())
    return {"routers": data["routers"], "validation": data.get("validation")}


@pytest.mark.parametrize("step", ["native", "torch"])
@pytest.mark.heavy
def test_every_cell_reruns_to_the_same_figures_on_any_thread_and_worker_count(
    tmp_path: Path, step: str
) -> None:
    suite = _suite(tmp_path, step)
    runs = {}
    for threads, jobs in ((1, 1), (2, 2)):
        out = tmp_path / f"threads{threads}-jobs{jobs}"
        _tosca(
            ["suite", str(suite), "--out", str(out), "--jobs", str(jobs), "--device", "cpu"],
            _env(tmp_path, threads, step),
            tmp_path,
        )
        runs[(threads, jobs)] = out
    manifest = read_manifest(runs[(1, 1)])
    kinds = {c["kind"] if c["kind"] == "tosca" else c["method"] for c in manifest["cells"]}
    expected = {"tosca"} | (
        {"simplecil", "ranpac", "joint_probe", "least_squares"} if step == "native" else set()
    )
    assert kinds == expected
    for cell in manifest["cells"]:
        relative = Path(cell["folder"]).relative_to(runs[(1, 1)])
        metrics = "metrics.json"
        first = _figures(runs[(1, 1)] / relative / metrics)
        assert first["validation"], cell["key"]  # every method is scored on the validation split too
        assert _figures(runs[(2, 2)] / relative / metrics) == first, cell["key"]
        # the manifest's command, alone, on two threads, into a folder of its own
        command = shlex.split(cell["command"])
        folder = tmp_path / "alone" / cell["key"].replace("/", "_")
        flag = "--run" if cell["kind"] == "tosca" else "--out"
        command[command.index(flag) + 1] = str(folder)
        _tosca(command[1:], _env(tmp_path, 2, step), tmp_path)
        made = folder / metrics if cell["kind"] == "tosca" else folder / cell["method"] / metrics
        assert _figures(made) == first, cell["key"]
