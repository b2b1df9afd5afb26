"""Mapper: images -> the vector the method caches, `model(x)` of a num_classes=0 timm model.

Faithful by default: fp32 on every device, with TF32 off (cuBLAS matmuls and cuDNN convolutions
would otherwise round inputs to 10 mantissa bits on Ampere and later; cuDNN allows it by
default). bf16 autocast only when asked for; the precision is part of the store identity.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import numpy as np
import torch
from torch import nn

_TF32_LOCK = threading.Lock()
_TF32_USERS = 0
_TF32_SAVED: tuple[bool, bool] | None = None


@contextlib.contextmanager
def tf32_off() -> Iterator[None]:
    """TF32 off for cuBLAS and cuDNN while any forward runs in this process, restored after the last.

    Counted, not nested save/restore: Dask thread workers can run forwards concurrently.
    """
    global _TF32_USERS, _TF32_SAVED
    with _TF32_LOCK:
        if _TF32_USERS == 0:
            try:
                _TF32_SAVED = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
            except RuntimeError:  # flags last set through torch's newer fp32_precision API
                _TF32_SAVED = None
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        _TF32_USERS += 1
    try:
        yield
    finally:
        with _TF32_LOCK:
            _TF32_USERS -= 1
            if _TF32_USERS == 0 and _TF32_SAVED is not None:
                torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = _TF32_SAVED


def default_batch_size(device: torch.device) -> int:
    """Measured on a 2-core CPU: EfficientNet-Lite0 peaks at 8-12 images per pass (cache-bound)."""
    return 128 if device.type == "cuda" else 12


def prefers_channels_last(model: nn.Module) -> bool:
    """CNNs run faster channels-last on a CPU; ViTs (a patch-embed conv only) run slower."""
    return not hasattr(model, "patch_embed")


class FeatureMapper:
    """Batched, gradient-free forward passes in fixed micro-batches; returns float32 arrays."""

    def __init__(self, model: nn.Module, device: torch.device, precision: str, micro_batch: int):
        self.channels_last = prefers_channels_last(model)
        memory_format = torch.channels_last if self.channels_last else torch.contiguous_format
        self.model = model.to(device=device, memory_format=memory_format).eval()
        self.memory_format = memory_format
        self.device, self.precision, self.micro_batch = device, precision, micro_batch

    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.precision == "bf16":
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def __call__(self, images: torch.Tensor) -> np.ndarray:
        """Images on the CPU (pinned when the device is CUDA) or already on the device.

        Outputs stay on the device until the whole batch is done: one host sync per call, so the
        micro-batches of a batch of views are queued back to back on a GPU.
        """
        outputs = []
        with torch.inference_mode(), tf32_off(), self._autocast():
            for start in range(0, images.shape[0], self.micro_batch):
                part = images[start : start + self.micro_batch].to(self.device, non_blocking=True)
                part = part.contiguous(memory_format=self.memory_format)
                outputs.append(self.model(part).float())
        return torch.cat(outputs).cpu().numpy()
