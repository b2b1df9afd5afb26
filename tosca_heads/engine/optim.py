"""Momentum SGD for G stacked configurations in a few whole-tensor operations, and the cosine schedule.

Per tensor and step: the L1 sign term (LuCA parameters only), weight decay, the momentum buffer
and the parameter update; each a single op over every configuration at once, with lr, momentum,
weight decay and L1 as `[G]` values. The arithmetic is PyTorch SGD's (dampening 0, no Nesterov):
d = g + l1 sign(p) + wd p; buf = m buf + d (buf starts at 0, so the first step gives buf = d);
p -= lr buf.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch


def cosine_lrs(lr: float, eta_min: float, epochs: int) -> list[float]:
    """The learning rate of each epoch under CosineAnnealingLR(T_max=epochs) stepped once per epoch,
    computed by the scheduler's own recursive formula (so the floats are the scheduler's)."""
    lrs = [lr]
    for epoch in range(1, epochs):
        prev = lrs[-1]
        if (epoch - 1 - epochs) % (2 * epochs) == 0:
            lrs.append(prev + (lr - eta_min) * (1 - math.cos(math.pi / epochs)) / 2)
        else:
            lrs.append(
                (1 + math.cos(math.pi * epoch / epochs))
                / (1 + math.cos(math.pi * (epoch - 1) / epochs))
                * (prev - eta_min)
                + eta_min
            )
    return lrs


def _per_config(values: Sequence[float], like: torch.Tensor) -> torch.Tensor:
    """[G] values shaped to broadcast over a [G, ...] tensor."""
    return torch.tensor(list(values), dtype=like.dtype, device=like.device).view(
        -1, *([1] * (like.dim() - 1))
    )


class GroupSGD:
    """One optimiser over a group's tensors; `l1_params` marks the tensors under the L1 penalty."""

    def __init__(
        self,
        params: list[torch.Tensor],
        grads: list[torch.Tensor],
        l1_params: list[bool],
        momentum: Sequence[float],
        weight_decay: Sequence[float],
        l1: Sequence[float],
    ):
        self.params, self.grads, self.l1_params = params, grads, l1_params
        self.buffers = [torch.zeros_like(p) for p in params]
        self.momentum = [_per_config(momentum, p) for p in params]
        self.decay = [_per_config(weight_decay, p) for p in params] if any(weight_decay) else None
        self.l1 = [_per_config(l1, p) for p in params] if any(l1) else None

    def step(self, neg_lr: list[torch.Tensor]) -> None:
        """neg_lr: minus this epoch's learning rate, one [G, 1, ...] tensor per parameter tensor."""
        for i, (p, g, buf) in enumerate(zip(self.params, self.grads, self.buffers, strict=True)):
            if self.l1 is not None and self.l1_params[i]:
                g.addcmul_(torch.sign(p), self.l1[i])
            if self.decay is not None:
                g.addcmul_(p, self.decay[i])
            buf.mul_(self.momentum[i]).add_(g)
            p.addcmul_(buf, neg_lr[i])

    def learning_rates(self, lrs: Sequence[float]) -> list[torch.Tensor]:
        """-lr per configuration, shaped for each parameter tensor (made once per epoch)."""
        return [_per_config([-lr for lr in lrs], p) for p in self.params]
