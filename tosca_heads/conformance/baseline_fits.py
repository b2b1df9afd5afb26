"""A baseline's `check_fits(dim, classes=..., **params)`, where declared (what it needs of the
machine, asked before a run starts): it passes on a shape that fits, and it refuses one that
cannot (a billion features) in one line, a `UserError`, never a traceback."""

from __future__ import annotations

from typing import Any

from tosca_foundation.errors import UserError
from tosca_heads.conformance.shared import CLASSES, DIM, first_line, refuse

HUGE = 10**9  # features no machine holds the matrices of


def check_fits_declared(cls: type, params: dict[str, Any], defaults: dict[str, Any]) -> None:
    name = cls.__name__
    values = {**defaults, **params}
    try:
        cls.check_fits(DIM, classes=CLASSES, **values)
    except Exception as exc:
        raise refuse(
            "baseline",
            name,
            f"check_fits refused {DIM} features and {CLASSES} classes: {first_line(str(exc))}",
        ) from None
    try:
        cls.check_fits(HUGE, classes=CLASSES, **values)
    except UserError as exc:
        if "\n" in str(exc).strip() or not str(exc).strip():
            raise refuse("baseline", name, "check_fits refused in more (or less) than one line") from None
    except Exception as exc:
        raise refuse(
            "baseline",
            name,
            f"check_fits raised {type(exc).__name__}, not a one-line UserError: {first_line(str(exc))}",
        ) from None
