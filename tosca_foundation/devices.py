"""What `--device` names, for both stages: auto (CUDA when a GPU is visible, else the CPU), cpu, cuda
or cuda:N. One rule: a named CUDA device must exist here; anything else (mps, tpu, a typo) is
refused in one line. Import-light: torch is imported when a device is resolved."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tosca_foundation.errors import UserError, UserValueError

if TYPE_CHECKING:
    import torch

DEVICES_HELP = "auto (CUDA when available), cpu, cuda or cuda:N"


DEVICE_NAME = re.compile(r"auto|(cpu|cuda)(:[0-9]+)?")


def check_device_name(name: str, flag: str = "--device") -> None:
    """A `--device` value is one of the names (the flag alone, no torch: `parse_device` and
    `resolve_device` say whether the device is here); `flag` names it in the refusal (Python's
    face: `device`)."""
    if not isinstance(name, str) or not DEVICE_NAME.fullmatch(name):
        raise UserValueError(f"unknown {flag} {name!r}: use {DEVICES_HELP}")


def parse_device(name: str) -> torch.device | None:
    """The device a `--device` value names (None for `auto`), without asking whether it is here:
    work sent to a remote cluster lets each worker decide."""
    import torch

    check_device_name(name)
    return None if name == "auto" else torch.device(name)


def resolve_device(name: str) -> torch.device:
    """`auto` is CUDA when a GPU is visible, else the CPU; a named CUDA device must exist."""
    import torch

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


def worker_device(requested: str) -> str:
    """What a Dask worker is told: a client's `cuda:N` means nothing on another process's GPU list."""
    return "cuda" if requested.startswith("cuda") else requested
