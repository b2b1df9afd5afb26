"""An extraction killed with SIGKILL resumes to exactly the arrays of an uninterrupted run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import zarr
from conftest import ROOT, TINY_VIT, make_image_tree

from featcache.store import FeatureStore


def _cmd(tree: Path, store: Path, cache: Path) -> list[str]:
    return [
        sys.executable,
        str(ROOT / "cli.py"),
        "extract",
        "--model",
        TINY_VIT,
        "--dataset",
        "imagefolder",
        "--data-root",
        str(tree),
        "--store",
        str(store),
        "--cache-dir",
        str(cache),
        "--random-init",
        "--views",
        "2",
        "--chunk-size",
        "4",
        "--batch-size",
        "2",
        "--workers",
        "0",
        "--seed",
        "5",
        "--device",
        "cpu",
    ]


def _arrays(path: Path) -> dict[str, np.ndarray]:
    group = zarr.open_group(str(path), mode="r")
    names = ["train/features", "train/views", "train/labels", "train/done", "test/features", "test/done"]
    return {name: np.asarray(group[name][:]) for name in names}


def test_sigkill_then_rerun_equals_uninterrupted(tmp_path: Path) -> None:
    tree = make_image_tree(tmp_path / "imgs", classes=3, train=12, test=4)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    killed = tmp_path / "killed.zarr"
    proc = subprocess.Popen(
        _cmd(tree, killed, tmp_path / "c"), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.time() + 120
    done = 0
    while time.time() < deadline and proc.poll() is None:
        if (killed / "zarr.json").exists():
            try:
                done = int(FeatureStore.open(killed).done("train").sum())
            except Exception:  # the store is being written; read again
                done = 0
            if done >= 2:
                break
        time.sleep(0.05)
    assert proc.poll() is None, "extraction finished before it could be killed; make the fixture larger"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    half = FeatureStore.open(killed)
    assert 2 <= int(half.done("train").sum()) < half.layout("train").n_chunks

    verify = subprocess.run(
        [sys.executable, str(ROOT / "cli.py"), "cache", "verify", str(killed)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert verify.returncode == 1
    assert "chunks not done" in verify.stderr

    rerun = subprocess.run(_cmd(tree, killed, tmp_path / "c"), env=env, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    assert "already done" in rerun.stdout
    again = subprocess.run(_cmd(tree, killed, tmp_path / "c"), env=env, capture_output=True, text=True)
    assert again.returncode == 0 and "nothing to do" in again.stdout

    clean = tmp_path / "clean.zarr"
    full = subprocess.run(_cmd(tree, clean, tmp_path / "c"), env=env, capture_output=True, text=True)
    assert full.returncode == 0, full.stderr
    resumed, uninterrupted = _arrays(killed), _arrays(clean)
    for name in uninterrupted:
        np.testing.assert_array_equal(resumed[name], uninterrupted[name], err_msg=name)
    assert (
        subprocess.run(
            [sys.executable, str(ROOT / "cli.py"), "cache", "verify", str(killed)], env=env
        ).returncode
        == 0
    )
