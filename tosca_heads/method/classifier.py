"""The shared cosine classifier: logit_c = sigma * cos(out, w_c), one learnable sigma (init 1,
carried across tasks) and rows appended per task (method.md §4)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def new_rows(
    n_new: int, dim: int, first_task: bool, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Rows appended for a task's classes: uniform(-1/sqrt(d), 1/sqrt(d)) for the first task, zeros
    after (reference quirk: a zero row's first normalised gradient step is huge and fixes its
    direction)."""
    if first_task:
        bound = 1.0 / math.sqrt(dim)
        return torch.empty(n_new, dim).uniform_(-bound, bound, generator=generator)
    return torch.zeros(n_new, dim)


def cosine_logits(features: torch.Tensor, weight: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """The reference classifier: sigma * cos(features, w_c) per class row (the engine's step and
    evaluation compute this written out, for many configurations at once; tests hold them to it)."""
    return sigma * F.linear(F.normalize(features, dim=1), F.normalize(weight, dim=1))
