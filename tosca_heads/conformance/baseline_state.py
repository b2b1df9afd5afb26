"""A baseline keeps statistics, never samples (docs/baselines.md): `num_parameters()` is a count,
at least 1 once it has learned, and the same whether each class was seen in 20 rows or 40.
`state_bytes()`, where declared, is a count too (at least 0), held to nothing more: LoRanPAC's
truncated SVD keeps E x r factors whose rank r grows with the rows up to E, as its paper does."""

from __future__ import annotations

from typing import Any

from tosca_heads.conformance.baseline_learning import learned
from tosca_heads.conformance.shared import ToyStream, calling, is_count, refuse

SIZES = ("num_parameters", "state_bytes")


def check_state(cls: type, params: dict[str, Any]) -> None:
    name = cls.__name__
    found: dict[str, list[Any]] = {}
    for per_class in (20, 40):
        estimator, _ = learned(cls, params, ToyStream.draw(per_class=per_class))
        for size in SIZES:
            if callable(getattr(estimator, size, None)):
                value = calling("baseline", name, f"{size}()", getattr(estimator, size))
                if not is_count(value) or value < (1 if size == "num_parameters" else 0):
                    least = 1 if size == "num_parameters" else 0
                    raise refuse(
                        "baseline",
                        name,
                        f"{size}() returned {value!r}, not a count (an int, at least {least})",
                    )
                found.setdefault(size, []).append(int(value))
    few, many = found["num_parameters"]
    if few != many:
        raise refuse(
            "baseline",
            name,
            f"num_parameters() grows with the rows seen ({few:,} with 20 per class, {many:,} with 40): "
            "a baseline keeps statistics, never samples",
        )
