"""The stage-2 benchmarks still run and print their figures (on tiny shapes): a renamed key or a
moved function must not wait for the next person who measures to be found."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tosca_heads.engine import native

ROOT = Path(__file__).resolve().parents[1]


def _run(script: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.slow
def test_fit_speed_prints_its_timing_and_accuracies() -> None:
    out = _run("fit_speed.py", "--train", "1200", "--test", "300", "--dim", "32", "--classes", "10")
    assert "2 tasks" in out and "ms per SGD step" in out
    assert "A_last oracle" in out and "entropy" in out


@pytest.mark.slow
def test_step_speed_prints_one_row_per_step_kind() -> None:
    out = _run(
        "step_speed.py",
        "--groups",
        "1,2",
        "--dim",
        "32",
        "--r",
        "4",
        "--classes",
        "6",
        "--steps",
        "5",
        "--repeats",
        "1",
    )
    kinds = ("autograd", "torch-step", "compiled-step")
    rows = [line.split() for line in out.splitlines() if line.strip().startswith(kinds)]
    expected = [("autograd", "1"), ("torch-step", "1"), ("torch-step", "2")]
    if native.load()[0] is not None:
        expected += [("compiled-step", "1"), ("compiled-step", "2")]
    assert [(r[0], r[1]) for r in rows] == expected
    assert all(float(r[-1].replace(",", "")) > 0 for r in rows)  # configuration-steps per second
