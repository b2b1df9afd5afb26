"""The training recipe (method.md §4): every number of it, its presets, and which recipes can share
one engine run. The training itself is `tosca_heads.engine` (G >= 1 recipes at once)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch

from featcache.foundation.errors import UserError
from featcache.foundation.limits import require_at_most
from tosca_heads.engine.trainer import SHARED_FIELDS, GroupTrainer
from tosca_heads.method.luca import FLOWS


@dataclass(frozen=True)
class TrainConfig:
    """Every number of the recipe; the `paper` preset is the reference code's."""

    r: int | None = None  # None: d // 16
    s: int | None = None  # None: d // 16
    l1: float = 5e-4
    lr: float = 0.025
    momentum: float = 0.9
    weight_decay: float = 0.0
    epochs: int = 20
    batch_size: int = 48
    eta_min: float = 1e-8
    flow: str = "tosca"
    seed: int = 0

    def resolved(self, dim: int) -> TrainConfig:
        default = max(1, dim // 16)
        return TrainConfig(**{**asdict(self), "r": self.r or default, "s": self.s or default})

    def validate(self) -> None:
        """One line naming the first value out of range (or of the wrong type, from a file)."""
        for name, kinds in FIELD_TYPES.items():
            value = getattr(self, name)
            if value is None and name in ("r", "s"):
                continue
            if isinstance(value, bool) or not isinstance(value, kinds):
                kind = "a name" if kinds is str else "an integer" if kinds is int else "a number"
                raise UserError(f"--{name.replace('_', '-')} must be {kind}, got {value!r}")
        if self.flow not in FLOWS:
            raise UserError(f"unknown --flow {self.flow!r}: use one of {', '.join(FLOWS)}")
        for name in ("epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        for name in ("r", "s"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise UserError(f"--{name} must be at least 1, got {getattr(self, name)}")
        if self.lr <= 0 or self.l1 < 0:
            raise UserError(f"--lr must be > 0 and --l1 >= 0 (got {self.lr}, {self.l1})")
        if not 0 <= self.momentum < 1:
            raise UserError(f"--momentum must be in [0, 1), got {self.momentum}")
        if self.weight_decay < 0:
            raise UserError(f"--weight-decay must be >= 0, got {self.weight_decay}")
        if not 0 <= self.seed < 2**32:
            raise UserError(f"--seed must be in [0, 2**32), got {self.seed}")
        require_at_most(
            "--epochs", self.epochs, MAX_EPOCHS, "epochs per task", "each epoch is a pass over the task"
        )
        if not all(
            math.isfinite(v) for v in (self.l1, self.lr, self.momentum, self.weight_decay, self.eta_min)
        ):
            raise UserError("--l1, --lr, --momentum and --weight-decay must be finite numbers")


MAX_EPOCHS = 10_000
FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "r": int,
    "s": int,
    "l1": (int, float),
    "lr": (int, float),
    "momentum": (int, float),
    "weight_decay": (int, float),
    "epochs": int,
    "batch_size": int,
    "eta_min": (int, float),
    "flow": str,
    "seed": int,
}
PRESETS: dict[str, TrainConfig] = {"paper": TrainConfig()}


def group_key(config: TrainConfig) -> tuple:
    """Recipes with the same key can train in one engine run (they differ in r, s, l1, lr, momentum,
    weight decay, eta_min or seed only)."""
    return tuple(getattr(config, name) for name in SHARED_FIELDS)


def make_trainer(
    configs: Sequence[TrainConfig], dim: int, device: torch.device | str = "cpu", step_threads: int = 1
) -> GroupTrainer:
    """The engine for these recipes (resolved to numbers for feature dim `dim`): G = len(configs)."""
    for config in configs:
        config.validate()
    return GroupTrainer([c.resolved(dim) for c in configs], dim, device, step_threads)
