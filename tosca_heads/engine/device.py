"""Which device stage 2 runs on, and the CPU settings for thousands of tiny steps."""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Callable, Iterator

import torch

from featcache.foundation.errors import UserError
from featcache.foundation.limits import usable_cores

DEVICES_HELP = "auto (CUDA when available), cpu, cuda or cuda:N"


def parse_device(name: str) -> torch.device | None:
    """The device a `--device` value names (None for `auto`), without asking whether it is here:
    a sweep on a remote cluster lets each worker decide."""
    if name == "auto":
        return None
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f"unknown --device {name!r}: use {DEVICES_HELP}") from None
    if device.type not in ("cpu", "cuda"):
        raise UserError(f"unknown --device {name!r}: use {DEVICES_HELP}")
    return device


def resolve_device(name: str) -> torch.device:
    """`auto` is CUDA when a GPU is visible, else the CPU; a named CUDA device must exist."""
    device = parse_device(name)
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"--device {name} asked for, but CUDA is not available here; use --device cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise UserError(
                f"--device {name}: only {torch.cuda.device_count()} CUDA device(s) here (cuda:0..)"
            )
    return device


def _mkl_local_threads() -> Callable[[int], int] | None:
    """MKL's per-thread thread count setter (C interface), when this torch build links MKL."""
    if not torch.backends.mkl.is_available():
        return None
    try:
        lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
        setter = lib.MKL_Set_Num_Threads_Local
    except (OSError, AttributeError):
        return None
    setter.argtypes, setter.restype = [ctypes.c_int], ctypes.c_int
    return setter


@contextlib.contextmanager
def step_mode(device: torch.device, matmul_threads: int | None = None) -> Iterator[None]:
    """CPU settings for thousands of tiny steps, restored afterwards; nothing to set on CUDA.

    - Denormals flushed: L1 drives many weights towards zero, and their denormal floats made steps
      up to 6x slower (EuroSAT task 1: 1.51 s -> 0.26 s, same accuracy).
    - One thread for element-wise ops: a 48 x 768 tensor is too small to share (PyTorch splits
      anything over 32,768 elements, and the fork-join costs more than it saves).
    - Matmuls on `matmul_threads` cores (MKL's thread-local setting, where torch links MKL; default
      every core). The PyTorch step once measured 1.3-1.6x faster that way on 2 cores; the
      compiled step, and training beside an evaluation thread, ask for 1 (see `runs.py`).
    """
    if device.type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    threads = matmul_threads or before
    torch.set_flush_denormal(True)
    torch.set_num_threads(1)
    mkl = _mkl_local_threads() if threads > 1 else None
    previous = mkl(threads) if mkl else 0
    try:
        yield
    finally:
        if mkl:
            mkl(previous)
        torch.set_num_threads(before)
        torch.set_flush_denormal(False)


def step_threads(device: torch.device, overlap: bool) -> int:
    """Threads of the compiled CPU step (TOSCA_STEP_THREADS=1|2 overrides).

    2 where the run has a core for each of them besides the evaluation thread (3 or more cores,
    evaluation overlapped), else 1. On the 2-core dev machine (CIFAR-100 shape) two step threads
    train in 15.5 s instead of 25.7 s when nothing else runs, but beside the evaluation thread
    the whole run took 35.9 s against 29.0 s with one, and 31.8 s with evaluation not overlapped.
    A sweep's workers (overlap off) already fill the cores."""
    chosen = configured_step_threads()
    if chosen is not None:
        return chosen
    return 2 if device.type == "cpu" and overlap and usable_cores() >= 3 else 1


def configured_step_threads() -> int | None:
    """TOSCA_STEP_THREADS (None when unset); a value other than 1 or 2 is refused in one line."""
    value = os.environ.get("TOSCA_STEP_THREADS")
    if value is None:
        return None
    if value not in ("1", "2"):
        raise UserError(f"TOSCA_STEP_THREADS={value!r}: use 1 or 2")
    return int(value)


def overlap_evaluation(device: torch.device) -> bool:
    """Evaluate task t on a second thread while task t+1 trains: on a CPU with cores to spare."""
    if os.environ.get("TOSCA_OVERLAP_EVAL") in ("0", "1"):
        return os.environ["TOSCA_OVERLAP_EVAL"] == "1"
    return device.type == "cpu" and usable_cores() >= 2
