"""The shared cosine classifier: logit_c = sigma * cos(out, w_c), rows appended per task (method.md §4)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


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


class CosineClassifier(nn.Module):
    """One learnable sigma (init 1, carried across tasks) and one row per seen class."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim
        self.weight = nn.Parameter(torch.empty(0, dim))
        self.sigma = nn.Parameter(torch.ones(1))

    @property
    def num_classes(self) -> int:
        return int(self.weight.shape[0])

    def grow(self, n_new: int, generator: torch.Generator | None = None) -> None:
        rows = new_rows(n_new, self.dim, self.num_classes == 0, generator)
        self.weight = nn.Parameter(torch.cat([self.weight.detach(), rows]))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.sigma * F.linear(F.normalize(features, dim=1), F.normalize(self.weight, dim=1))

    @torch.no_grad()
    def set_rows(self, classes: range, prototypes: torch.Tensor) -> None:
        self.weight[classes.start : classes.stop] = prototypes

    def state(self) -> dict[str, torch.Tensor]:
        return {"head.weight": self.weight.detach().clone(), "head.sigma": self.sigma.detach().clone()}

    def load(self, state: dict[str, torch.Tensor]) -> None:
        self.weight = nn.Parameter(state["head.weight"].clone())
        self.sigma = nn.Parameter(state["head.sigma"].clone())
