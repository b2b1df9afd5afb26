"""`check_baseline(cls)`: every baseline check, in the order a run meets what they check."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tosca_foundation.arguments import check_types
from tosca_foundation.errors import UserTypeError
from tosca_heads.conformance.baseline_count import check_count
from tosca_heads.conformance.baseline_declarations import check_declarations
from tosca_heads.conformance.baseline_fits import check_fits_declared
from tosca_heads.conformance.baseline_learning import check_learning
from tosca_heads.conformance.baseline_order_free import check_order_free, unfixed_knobs
from tosca_heads.conformance.baseline_state import check_state
from tosca_heads.conformance.outcome import Conformance
from tosca_heads.method.baseline_registry import declared_params


def check_baseline(cls: type, params: Mapping[str, Any] | None = None) -> Conformance:
    """Run the contract the built-in baselines pass on `cls` (registered or not): its declarations,
    partial_fit per task with checked predictions, its state size, its `parameters_for` against
    the fitted `num_parameters()` where it declares one, order-freedom where it declares it, and one-line refusals from `check_fits`. `params` are keywords of its `__init__` (smaller
    sizes, a knob fixed for the order-free check), each checked by its `Param`; default: its
    defaults. A `NonConforming` error (one line) at the first check it fails, else its
    `Conformance`.

    >>> from tosca_heads.method.baseline_estimators import SimpleCIL
    >>> check_baseline(SimpleCIL).passed
    ('declarations', 'partial_fit per task', 'state size', 'parameter count', 'order-free')
    """
    check_types("check_baseline", check_baseline, {"params": params})
    if not isinstance(cls, type):
        raise UserTypeError(f"check_baseline takes a baseline class, got {type(cls).__name__}")
    check_declarations(cls)
    declared = {p.name: p for p in declared_params(cls)}
    given = dict(params or {})
    for key, value in given.items():
        if key in declared:
            declared[key].check(value, f"check_baseline's {key}")
    passed, skipped = ["declarations"], {}
    check_learning(cls, given)
    passed.append("partial_fit per task" if cls.incremental else "fit per task")
    check_state(cls, given)
    passed.append("state size")
    if callable(getattr(cls, "parameters_for", None)):
        check_count(cls, given, {p.name: p.default for p in declared.values()})
        passed.append("parameter count")
    else:  # accepted: its tables say "not declared" (docs/python-api.md)
        skipped["parameter count"] = "no parameters_for"
    if not getattr(cls, "order_free", False):
        skipped["order-free"] = "not declared"
    elif not cls.incremental:
        skipped["order-free"] = "not incremental"
    elif unfixed := unfixed_knobs(cls, given):
        skipped["order-free"] = f"{', '.join(unfixed)} chosen from the first task: fix it in params"
    else:
        check_order_free(cls, given)
        passed.append("order-free")
    if callable(getattr(cls, "check_fits", None)):
        check_fits_declared(cls, given, {p.name: p.default for p in declared.values()})
        passed.append("one-line refusals")
    else:
        skipped["one-line refusals"] = "no check_fits"
    return Conformance("baseline", cls.__name__, tuple(passed), skipped)
