"""How stage 2 uses the machine: the step settings users can set, and the thread policy for
thousands of tiny steps on a CPU (the figures behind these choices: docs/benchmarks.md).

Settings, checked by `check_settings` before a command writes anything:
- `TOSCA_STEP`: `auto` (the compiled step on a CPU when it builds, else the PyTorch step),
  `native` (insist on the compiled step) or `torch` (always the PyTorch step).
- `TOSCA_STEP_THREADS`: the most threads a compiled step takes, 1 or 2 (default: 2 for a run
  that has a CPU of two or more cores to itself, else 1); two give one thread's numbers bit for
  bit (the same BLAS calls, threads only choose who runs which).
- `TOSCA_OVERLAP_EVAL`: 1 or 0, evaluate task t on a second thread while task t+1 trains
  (default: on a CPU with two or more usable cores).
Each is read through tosca_foundation.settings, which refuses any other value in one line.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from tosca_foundation.limits import usable_cores
from tosca_foundation.settings import check_settings as check_every_setting
from tosca_foundation.settings import setting
from tosca_heads.method.linalg import mkl_thread_setter

STEP_CHOICES = ("auto", "native", "torch")


def step_choice() -> str:
    return setting("TOSCA_STEP") or "auto"


def configured_step_threads() -> int | None:
    """TOSCA_STEP_THREADS (None when unset); a value other than 1 or 2 is refused in one line."""
    value = setting("TOSCA_STEP_THREADS")
    return None if value is None else int(value)


def check_settings() -> None:
    """Refuse a bad setting (TOSCA_STEP, TOSCA_STEP_THREADS, TOSCA_OVERLAP_EVAL and every other one
    tosca_foundation.settings knows) in one line, before a command writes anything."""
    check_every_setting()


def overlap_evaluation(device: torch.device) -> bool:
    """Evaluate task t on a second thread while task t+1 trains: on a CPU with cores to spare."""
    chosen = setting("TOSCA_OVERLAP_EVAL")
    if chosen is not None:
        return chosen == "1"
    return device.type == "cpu" and usable_cores() >= 2


@dataclass(frozen=True)
class ThreadPlan:
    """How one engine run uses a CPU: evaluation overlapped or not, the compiled step's threads, and
    the matmul threads of the training thread (None: every core)."""

    overlap: bool
    step_threads: int
    matmul_threads: int | None


def plan_threads(device: torch.device, overlap: bool | None, compiled: bool) -> ThreadPlan:
    """The thread policy of an engine run on `device`: the same numbers on any machine's thread
    count and in any process (a suite's worker, a sweep's, the single command).

    - Evaluation overlaps training where `overlap_evaluation` says so (unless told): it moves work
      to another core, never changes a number.
    - The compiled step may take two threads (the same numbers bit for bit: csrc/luca_step.c):
      by default when the run has a CPU of two or more cores to itself. A caller that decides
      `overlap` itself is one of several workers that fill the cores (a sweep's: overlap=False),
      and its steps take one. Each epoch then takes one or two (`cores.ThreadChooser`: one while
      the evaluation thread works, else the faster lately). TOSCA_STEP_THREADS=1|2 sets the most.
    - Matmuls run on one thread, always: a multithreaded BLAS splits sums by its thread count, and
      MKL's fork-join makes these tiny matmuls slower anyway.
    """
    alone = overlap is None
    overlap = overlap_evaluation(device) if overlap is None else overlap
    chosen = configured_step_threads()
    spare = compiled and alone and device.type == "cpu" and usable_cores() >= 2
    return ThreadPlan(overlap, chosen if chosen is not None else (2 if spare else 1), 1)


@contextlib.contextmanager
def step_mode(device: torch.device, matmul_threads: int | None = None) -> Iterator[None]:
    """CPU settings for thousands of tiny steps, restored afterwards; nothing to set on CUDA.

    - Denormals flushed: L1 drives many weights towards zero, and denormal floats make steps several
      times slower.
    - One thread for element-wise ops: a 48 x 768 tensor is too small to share (PyTorch splits
      anything over 32,768 elements, and the fork-join costs more than it saves).
    - Matmuls on `matmul_threads` cores (MKL's thread-local setting, where torch links MKL; None:
      every core).
    """
    if device.type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    threads = matmul_threads or before
    torch.set_flush_denormal(True)
    torch.set_num_threads(1)
    mkl, _ = mkl_thread_setter() if threads > 1 else (None, None)
    previous = mkl(threads) if mkl else 0
    try:
        yield
    finally:
        if mkl:
            mkl(previous)
        torch.set_num_threads(before)
        torch.set_flush_denormal(False)
