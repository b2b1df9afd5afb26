"""SIGINT and SIGTERM stop a command within seconds, with one line and exit 130 or 143, also inside
a long linear-algebra call (issue 55 point 2, issue 57 point 7): `tosca baselines` while RanPAC
eigendecomposes a 3,000 x 3,000 Gram matrix (a single LAPACK call of about 20 s here), which its
progress line says; `tosca fit` and `tosca sweep` between two of their steps."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from support import ROOT
from support.crash_harness import PauseAt, start
from support.stores import synthetic_store

SAID = {
    signal.SIGINT: "interrupted (SIGINT): what was finished is kept; the same command resumes",
    signal.SIGTERM: "terminated (SIGTERM): what was finished is kept; the same command resumes",
}
SIGNALS = [(signal.SIGINT, 130), (signal.SIGTERM, 143)]
LONG_CALL = "in the eigendecomposition of RanPAC's ridge path (3,000 x 3,000)"


@pytest.mark.heavy
@pytest.mark.parametrize(("sent", "code"), SIGNALS)
def test_baselines_stop_within_seconds_inside_a_long_solve_that_the_progress_line_names(
    tmp_path: Path, sent: signal.Signals, code: int
) -> None:
    # 4,000 rows a task: 3,200 fit rows, more than M = 3,000, so the ridge path eigendecomposes M x M
    store = synthetic_store(tmp_path / "s.zarr", classes=4, per_class=2000, test_per_class=10, dim=16)
    cmd = [
        sys.executable,
        str(ROOT / "cli.py"),
        "baselines",
        "--store",
        str(store.path),
        "--methods",
        "ranpac",
    ]
    cmd += ["--ranpac-projection-dim", "3000", "--no-tosca", "--init-cls", "2", "--increment", "2"]
    cmd += ["--device", "cpu", "--out", str(tmp_path / "out")]
    env = {**os.environ, "TOSCA_PROGRESS": "lines", "TOSCA_PROGRESS_EVERY": "0.5", "HF_HUB_OFFLINE": "1"}
    child = subprocess.Popen(
        cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    watchdog = threading.Timer(600, child.kill)
    watchdog.start()
    try:
        assert child.stderr is not None
        said = []
        for line in child.stderr:
            said.append(line.rstrip("\n"))
            if LONG_CALL in line:
                break
        assert said and LONG_CALL in said[-1], said[-5:]
        assert said[-1].startswith("baseline ranpac: ")  # told from the first task's end on
        child.send_signal(sent)
        sent_at = time.monotonic()
        rest = child.stderr.read()
        assert child.wait(timeout=60) == code
        assert time.monotonic() - sent_at < 5
    finally:
        watchdog.cancel()
        child.kill()
    assert [line for line in rest.splitlines() if line.strip()] == [SAID[sent]]


@pytest.mark.heavy
@pytest.mark.parametrize(("sent", "code"), SIGNALS)
def test_fit_stops_within_seconds_with_one_line(tmp_path: Path, sent: signal.Signals, code: int) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=6, per_class=20)
    cmd = ["fit", "--store", str(store.path), "--init-cls", "2", "--increment", "2", "--epochs", "2"]
    cmd += ["--device", "cpu", "--run", str(tmp_path / "run")]
    # on the main thread, where the signals are answered (an evaluation beside it would be waited for)
    pause = PauseAt(function="tosca_heads.engine.trainer:GroupTrainer.partial_fit", occurrence=2)
    child = start(cmd, tmp_path / "child", pause)
    child.wait_paused()
    os.kill(child.process.pid, sent)
    sent_at = time.monotonic()
    assert child.finish(60) == code
    assert time.monotonic() - sent_at < 5
    said = [line for line in child.text("stderr").splitlines() if line.strip()]
    assert said[-1] == SAID[sent], said[-5:]
    assert "Traceback" not in child.text("stderr")


@pytest.mark.heavy
def test_sweep_stops_within_seconds_on_sigint_with_one_line(tmp_path: Path) -> None:
    """SIGTERM mid-sweep: tests/cli/test_sigterm.py; SIGINT here, on the serial path."""
    store = synthetic_store(tmp_path / "s.zarr", classes=4, per_class=20)
    cmd = ["sweep", "--store", str(store.path), "--r", "4,8,16", "--epochs", "1", "--init-cls", "2"]
    cmd += ["--increment", "2", "--jobs", "1", "--device", "cpu", "--out", str(tmp_path / "sweep")]
    pause = PauseAt(function="tosca_heads.records.sweep_points:write_point", occurrence=2)
    child = start(cmd, tmp_path / "child", pause)
    child.wait_paused()
    os.kill(child.process.pid, signal.SIGINT)
    sent_at = time.monotonic()
    assert child.finish(60) == 130
    assert time.monotonic() - sent_at < 5
    said = [line for line in child.text("stderr").splitlines() if line.strip()]
    assert said[-1] == SAID[signal.SIGINT], said[-5:]
    assert "Traceback" not in child.text("stderr")
