"""SIGTERM ends a command as an interrupt does (tosca_cli.commands.Terminated): the command
unwinds, so a sweep's Dask cluster closes and releases the semaphores of its nannies' queues (they
were left to the resource tracker, which warned "There appear to be 12 leaked semaphore objects"),
it says one line and exits 143, and the same command resumes."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pandas as pd
import pytest
from support.crash_harness import PauseAt, start
from support.stores import synthetic_store


@pytest.mark.heavy
def test_sigterm_mid_sweep_releases_its_workers_semaphores_and_resumes(tmp_path: Path) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=4, per_class=20)
    out = tmp_path / "sweep"
    cmd = ["sweep", "--store", str(store.path), "--r", "4,8,16", "--epochs", "1", "--init-cls", "2"]
    cmd += ["--increment", "2", "--jobs", "2", "--device", "cpu", "--out", str(out)]
    pause = PauseAt(function="tosca_heads.records.cell:write_cell", occurrence=2)
    child = start(cmd, tmp_path / "child", pause, daemon=False)  # its cluster's workers: alive
    child.wait_paused()
    os.kill(child.process.pid, signal.SIGTERM)
    assert child.finish() == 128 + signal.SIGTERM
    said = [line for line in child.text("stderr").splitlines() if line.strip()]
    assert said[-1] == "terminated (SIGTERM): what was finished is kept; the same command resumes", said
    assert json.loads(child.text("semaphores.json")) == 0  # every queue of the cluster released
    assert "leaked" not in child.text("stderr")
    done = start(cmd, tmp_path / "again", daemon=False)
    assert done.finish() == 0, done.text("stderr")[-800:]
    assert pd.read_csv(out / "results.csv")["key"].nunique() == 3  # every point once
