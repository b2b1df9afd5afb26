"""The training recipe (method.md §4): every number of it, its presets, which recipes can share one
engine run, and the one table of its flags that `tosca fit` and `tosca sweep` both offer.

The training itself is `tosca_heads.engine` (G >= 1 recipes at once).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from featcache.foundation.errors import UserTypeError, UserValueError
from featcache.foundation.limits import require_at_most
from featcache.foundation.names import Spell, as_flag, did_you_mean

FLOWS = ("tosca", "tosca_r", "adapter", "calibrator")  # method.md §3: the method, then its ablations
MAX_EPOCHS = 10_000
# What the configurations of one engine run must share: they step together over the same batches.
SHARED_FIELDS = ("flow", "epochs", "batch_size")


@dataclass(frozen=True)
class Flag:
    """One recipe number as the command line offers it."""

    name: str
    kind: type  # int, float or str
    help: str

    @property
    def option(self) -> str:
        return "--" + self.name.replace("_", "-")


# Every recipe flag, in the order help and tables show them (seed is `--seeds` in a sweep).
RECIPE_FLAGS: tuple[Flag, ...] = (
    Flag("r", int, "Adapter bottleneck (default d/16)"),
    Flag("s", int, "Calibrator bottleneck (default d/16)"),
    Flag("l1", float, "L1 weight over the task's LuCA parameters (paper 5e-4)"),
    Flag("lr", float, "SGD learning rate (paper 0.025)"),
    Flag("epochs", int, "Epochs per task (paper 20)"),
    Flag("batch_size", int, "Batch size (paper 48)"),
    Flag("momentum", float, "SGD momentum (paper 0.9)"),
    Flag("weight_decay", float, "SGD weight decay (paper 0)"),
    Flag("flow", str, "tosca (the method), tosca_r, adapter or calibrator"),
    Flag("seed", int, "Training seed (module init, shuffling)"),
)


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

    def validate(self, spell: Spell = as_flag) -> None:
        """One line naming the first value out of range (a `UserValueError`) or of the wrong type
        (a `UserTypeError`, from a file or from Python), each value named by `spell` (the command
        line's flag, or Python's keyword)."""
        for field in fields(self):
            value = getattr(self, field.name)
            if value is None and field.name in ("r", "s"):
                continue
            kind = FIELD_TYPES[field.name]
            allowed = (int, float) if kind is float else kind
            if isinstance(value, bool) or not isinstance(value, allowed):
                said = {str: "a name", int: "an integer", float: "a number"}[kind]
                raise UserTypeError(f"{spell(field.name)} must be {said}, got {value!r}")
        if self.flow not in FLOWS:
            raise UserValueError(
                f"unknown {spell('flow')} {self.flow!r}{did_you_mean(self.flow, FLOWS)}: use one of {', '.join(FLOWS)}"
            )
        for name in ("epochs", "batch_size", "r", "s"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UserValueError(f"{spell(name)} must be at least 1, got {value}")
        finite = ("l1", "lr", "momentum", "weight_decay", "eta_min")
        if not all(math.isfinite(getattr(self, name)) for name in finite):
            l1, lr, momentum, decay = (spell(name) for name in finite[:4])
            raise UserValueError(f"{l1}, {lr}, {momentum} and {decay} must be finite numbers")
        if self.lr <= 0 or self.l1 < 0:
            raise UserValueError(
                f"{spell('lr')} must be > 0 and {spell('l1')} >= 0 (got {self.lr}, {self.l1})"
            )
        if not 0 <= self.momentum < 1:
            raise UserValueError(f"{spell('momentum')} must be in [0, 1), got {self.momentum}")
        if self.weight_decay < 0:
            raise UserValueError(f"{spell('weight_decay')} must be >= 0, got {self.weight_decay}")
        if not 0 <= self.seed < 2**32:
            raise UserValueError(f"{spell('seed')} must be in [0, 2**32), got {self.seed}")
        require_at_most(
            spell("epochs"), self.epochs, MAX_EPOCHS, "epochs per task", "each epoch is a pass over the task"
        )


FIELD_TYPES: dict[str, type] = {flag.name: flag.kind for flag in RECIPE_FLAGS} | {"eta_min": float}
PRESETS: dict[str, TrainConfig] = {"paper": TrainConfig()}


def recipe(preset: str, overrides: dict[str, Any] | None = None, spell: Spell = as_flag) -> TrainConfig:
    """A preset with the flags that were given (None: not given) over it, checked; each value named
    by `spell` in a refusal (the command line's flag, or Python's keyword). A key that is no recipe
    flag is refused too (Python's face says first which of its own keywords was meant:
    `featcache.foundation.names.check_keywords`)."""
    if not isinstance(preset, str) or preset not in PRESETS:
        raise UserValueError(
            f"unknown {spell('preset')} {preset!r}{did_you_mean(preset, PRESETS)}: use one of {', '.join(PRESETS)}"
        )
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    for key in given:
        if key not in FIELD_TYPES:
            raise UserTypeError(
                f"unknown recipe flag {spell(str(key))}{did_you_mean(key, FIELD_TYPES)}: use any of "
                f"{', '.join(spell(name) for name in FIELD_TYPES)}"
            )
    config = replace(PRESETS[preset], **given)
    config.validate(spell)
    return config


def group_key(config: TrainConfig) -> tuple:
    """Recipes with the same key can train in one engine run (they differ in r, s, l1, lr, momentum,
    weight decay, eta_min or seed only)."""
    return tuple(getattr(config, name) for name in SHARED_FIELDS)
