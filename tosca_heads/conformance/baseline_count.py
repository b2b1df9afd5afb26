"""A baseline's parameter count is a function of what was asked (issue 54 point 1): tables work it
out from a cell's asked.json through the class's `parameters_for(d, classes, **params)`, never from
a fitted estimator or a file. This check holds that formula to what the estimator learned: after
partial_fit (or fit) on the toy stream's 6 classes of d = 16, `parameters_for(16, 6, **params)`
must be the count `num_parameters()` gives, else a table would show a number the model does not
have."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tosca_heads.conformance.baseline_learning import learned
from tosca_heads.conformance.shared import CLASSES, DIM, ToyStream, calling, is_count, refuse


def check_count(cls: type, params: dict[str, Any], defaults: Mapping[str, Any]) -> None:
    """`defaults`: its declared parameters' defaults, under `params` as a run's asked.json holds
    every one of them (`baseline_registry.arguments`)."""
    name = cls.__name__
    formula: Callable[..., Any] = cls.parameters_for  # type: ignore[attr-defined]
    values = {**defaults, **params}
    said = f"parameters_for with d = {DIM} and {CLASSES} classes"
    counted = calling("baseline", name, said, lambda: formula(DIM, CLASSES, **values))
    if not is_count(counted) or counted < 1:
        raise refuse("baseline", name, f"{said} returned {counted!r}, not a count (an int, at least 1)")
    estimator, _ = learned(cls, params, ToyStream.draw())
    fitted = calling("baseline", name, "num_parameters()", estimator.num_parameters)
    if fitted != counted:
        learn = "partial_fit" if cls.incremental else "fit"
        raise refuse(
            "baseline",
            name,
            f"{said} gives {int(counted):,} parameters, but num_parameters() after {learn} counts "
            f"{fitted:,}: tables show the first, so it must be what the estimator learns",
        )
