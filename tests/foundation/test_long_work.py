"""A long computation under way is said in the progress line once it has lasted a few seconds, and
a command that abandoned one on a worker thread leaves without waiting for it."""

from __future__ import annotations

import io
import subprocess
import sys
import time

import pytest
import torch
from support import ROOT

from tosca_cli.progress import Board
from tosca_foundation import long_work
from tosca_heads.method import linalg


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_longest_running_computation_is_said_after_two_seconds_and_never_after_it_ends() -> None:
    clock = Clock()
    assert long_work.said(clock) == ""
    with long_work.during("a 10,000 x 10,000 ridge solve", clock):
        clock.now += 1.5
        assert long_work.said(clock) == ""  # under SAID_AFTER: not worth a word
        with long_work.during("an LU solve of a ridge system", clock):
            clock.now += 61.0
            assert long_work.said(clock) == "in a 10,000 x 10,000 ridge solve for 1:02"
        assert long_work.said(clock) == "in a 10,000 x 10,000 ridge solve for 1:02"
    assert long_work.said(clock) == ""


def test_the_progress_line_says_the_call_under_way_until_its_work_ends() -> None:
    stream = io.StringIO()
    with Board("lines", interval=0, stream=stream) as board:
        task = board.task("baseline ranpac", 5, "tasks")
        board.update(task, completed=4)
        with long_work.during("the eigendecomposition of RanPAC's ridge path (3,000 x 3,000)"):
            started = time.monotonic()
            while time.monotonic() - started < long_work.SAID_AFTER + 0.05:
                time.sleep(0.05)
            board.update(task, completed=4)
        board.update(task, completed=5)
    lines = stream.getvalue().splitlines()
    said = [
        line
        for line in lines
        if "in the eigendecomposition of RanPAC's ridge path (3,000 x 3,000) for 0:02" in line
    ]
    assert said and said[0].startswith("baseline ranpac: 4/5 (80%) tasks")
    assert "eigendecomposition" not in lines[-1]  # the work's last line: done


def test_an_interruptible_call_is_under_way_while_it_runs() -> None:
    seen: list[str] = []

    def five_seconds_on() -> float:
        return time.monotonic() + 5.0

    def operation() -> int:
        seen.append(long_work.said(five_seconds_on))
        return 7

    assert linalg.interruptible(operation, "a 3 x 3 solve") == 7
    assert seen == ["in a 3 x 3 solve for 0:05"] and long_work.said(five_seconds_on) == ""


def test_leave_is_sys_exit_while_nothing_was_abandoned() -> None:
    with pytest.raises(SystemExit) as exited:
        long_work.leave(130)
    assert exited.value.code == 130


ABANDONED = """
import atexit, sys, threading, time
from tosca_foundation import long_work
atexit.register(lambda: print("exit handlers ran", flush=True))
threading.Thread(target=time.sleep, args=(30,)).start()  # not a daemon: finalisation would wait 30 s
long_work.abandon()
print("leaving", flush=True)
long_work.leave(143)
"""


def test_after_an_abandoned_call_the_exit_handlers_run_and_the_process_ends_without_waiting() -> None:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", ABANDONED], cwd=ROOT, capture_output=True, text=True, timeout=25
    )
    assert done.returncode == 143 and done.stdout.split("\n")[:2] == ["leaving", "exit handlers ran"]
    assert time.monotonic() - started < 10


def test_a_failure_inside_an_interruptible_call_reaches_the_caller_and_ends_what_is_said() -> None:
    with pytest.raises(RuntimeError):
        linalg.interruptible(lambda: torch.linalg.cholesky(-torch.eye(3)), "a failing Cholesky")
    assert long_work.said() == ""
