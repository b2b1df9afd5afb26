"""The training recipe (method.md §4): every number of it, its presets, which recipes can share one
engine run, and the one table of its flags that `tosca fit` and `tosca sweep` both offer.

The training itself is `tosca_heads.engine` (G >= 1 recipes at once).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from tosca_foundation.errors import UserTypeError, UserValueError
from tosca_foundation.names import Spell, as_flag, did_you_mean

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
        """One line naming every value out of range (a `UserValueError`) or of the wrong type (a
        `UserTypeError`, from a file or from Python), each by `spell` (the command line's flag, a
        sweep's `--seeds`, or Python's keyword), and only those: nothing else is named."""
        faults = self.faults(spell)
        if faults:
            typed = any(wrong_type(f.name, getattr(self, f.name)) for f in fields(self))
            raise (UserTypeError if typed else UserValueError)("; ".join(faults))

    def faults(self, spell: Spell = as_flag) -> list[str]:
        """What is wrong with each value on its own, one phrase each ("--r must be at least 1, got
        0"), in the order of the fields; empty when nothing is."""
        found = []
        for field in fields(self):
            fault = value_fault(field.name, getattr(self, field.name), spell(field.name))
            if fault:
                found.append(fault)
        return found


def wrong_type(name: str, value: Any) -> bool:
    """A recipe value of another type than its field's (None for r and s: d/16)."""
    if value is None and name in ("r", "s"):
        return False
    kind = FIELD_TYPES[name]
    return isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else kind)


def value_fault(name: str, value: Any, flag: str) -> str:
    """What is wrong with one recipe value on its own, naming its `flag` ("--r must be at least 1,
    got 0"); "" when nothing is (None for r and s: d/16)."""
    if value is None and name in ("r", "s"):
        return ""
    if wrong_type(name, value):
        said = {str: "a name", int: "an integer", float: "a number"}[FIELD_TYPES[name]]
        return f"{flag} must be {said}, got {value!r}"
    if name == "flow" and value not in FLOWS:
        return f"unknown {flag} {value!r}{did_you_mean(value, FLOWS)}: use one of {', '.join(FLOWS)}"
    if name == "epochs" and value > MAX_EPOCHS:
        return f"{flag} {value} is over the limit of {MAX_EPOCHS:,} epochs per task: each epoch is a pass over the task"
    wrong = _out_of_range(name, value)
    return f"{flag} must be {wrong}, got {value}" if wrong else ""


def _out_of_range(name: str, value: Any) -> str:
    """The range a number of the recipe is outside of ("at least 1"); "" when it is within."""
    if name in ("epochs", "batch_size", "r", "s") and value < 1:
        return "at least 1"
    if FIELD_TYPES[name] is float and not math.isfinite(value):
        return "a finite number"
    if name == "lr" and value <= 0:
        return "> 0"
    if name in ("l1", "weight_decay", "eta_min") and value < 0:
        return ">= 0"
    if name == "momentum" and not 0 <= value < 1:
        return "in [0, 1)"
    if name == "seed" and not 0 <= value < 2**32:
        return "in [0, 2**32)"
    return ""


FIELD_TYPES: dict[str, type] = {flag.name: flag.kind for flag in RECIPE_FLAGS} | {"eta_min": float}
PRESETS: dict[str, TrainConfig] = {"paper": TrainConfig()}


def recipe(preset: str, overrides: dict[str, Any] | None = None, spell: Spell = as_flag) -> TrainConfig:
    """A preset with the flags that were given (None: not given) over it, checked; each value named
    by `spell` in a refusal (the command line's flag, or Python's keyword). A key that is no recipe
    flag is refused too (Python's face says first which of its own keywords was meant:
    `tosca_foundation.names.check_keywords`)."""
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
