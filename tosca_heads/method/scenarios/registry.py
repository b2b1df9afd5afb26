"""The scenarios by name (`SCENARIOS`): each declared once, as a `Scenario` subclass with its
parameters (their defaults and rules), its paper and its figures, registered with
`@register_scenario`.

A scenario's values are checked once, at the edge (`Scenario.checked`): a wrong one is one line
naming what was wrong and what is valid, before any work. What a store cannot serve (a 5-shot
session where a class has 3 images, `dil` on a store with no domains) is refused by `plan`, also
in one line and before any method learns anything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from tosca_foundation.errors import UserTypeError, UserValueError
from tosca_foundation.registry import Registry
from tosca_heads.method.baseline_registry import Interval, Options
from tosca_heads.method.scenarios.plan import ScenarioPlan

SCENARIOS: Registry[type] = Registry("scenario", "tosca_heads.method.scenarios.registry:SCENARIOS")
DEFAULT_SCENARIO = "cil"


@dataclass(frozen=True)
class ScenarioParam:
    """One parameter of a scenario: its name (`--scenario-NAME`, the API's keyword), type, default,
    rule and what it means."""

    name: str
    kind: type
    default: Any
    rule: Interval | Options
    help: str

    def checked(self, scenario: str, value: Any) -> Any:
        """The value, or one line naming the parameter, what it got and what is valid."""
        if self.kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, self.kind) or (isinstance(value, bool) and self.kind is not bool):
            raise UserTypeError(f"{scenario} {self.name} must be {_kind(self.kind)}, got {value!r}")
        if not self.rule.holds(value):
            raise UserValueError(f"{scenario} {self.name} must be {self.rule}, got {value!r}")
        return value


def _kind(kind: type) -> str:
    return {int: "an integer", float: "a number", str: "a text", bool: "true or false"}.get(
        kind, kind.__name__
    )


@dataclass(frozen=True)
class StoreLabels:
    """What a scenario reads of a store: each split's labels and (where the dataset has them) each
    image's domain id, and the dataset's name (for a preset of its own)."""

    train_labels: np.ndarray
    test_labels: np.ndarray
    train_domains: np.ndarray | None = None
    test_domains: np.ndarray | None = None
    dataset: str = ""
    domain_names: tuple[str, ...] = ()


class Scenario:
    """A protocol of the store: its `name`, `summary` (one line), `paper`, `figures` (name -> what
    it means), `params`; `plan(store, **values)` reads the store's labels into a `ScenarioPlan`
    and `figures_of(plan, answers)` turns the class ids a method answered into the figures.
    `told_task` says the task id is given at test (task-incremental): a learner's answer is then
    restricted to its task's classes."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    figures: ClassVar[Mapping[str, str]] = {}
    params: ClassVar[tuple[ScenarioParam, ...]] = ()
    told_task: ClassVar[bool] = False
    presets: ClassVar[Mapping[str, Mapping[str, Any]]] = {}  # dataset -> its paper's values

    @classmethod
    def checked(cls, values: Mapping[str, Any], dataset: str = "") -> dict[str, Any]:
        """Every parameter's value: given, else the dataset's preset, else the default; one line
        for a name the scenario does not take or a value outside its rule."""
        known = {p.name: p for p in cls.params}
        unknown = [k for k in values if k not in known]
        if unknown:
            takes = ", ".join(known) or "none"
            raise UserTypeError(f"scenario {cls.name} takes no parameter {unknown[0]!r} (it takes: {takes})")
        preset = cls.presets.get(dataset, {})
        return {
            name: p.checked(cls.name, values.get(name, preset.get(name, p.default)))
            for name, p in known.items()
        }

    @classmethod
    def plan(cls, store: StoreLabels, **values: Any) -> ScenarioPlan:  # pragma: no cover - each defines it
        raise NotImplementedError

    @classmethod
    def figures_of(
        cls, plan: ScenarioPlan, answers: Sequence[np.ndarray]
    ) -> dict[str, float]:  # pragma: no cover
        raise NotImplementedError


def register_scenario(cls: type[Scenario]) -> type[Scenario]:
    """A class decorator adding a scenario under its `name` (one line if it lacks a name, summary
    or figures)."""
    for attribute in ("name", "summary", "figures"):
        if not getattr(cls, attribute):
            raise UserValueError(f"scenario class {cls.__name__} must declare {attribute}")
    SCENARIOS.add(cls.name, cls, cls.summary, module=cls.__module__)
    return cls


Check = Callable[[StoreLabels], None]
