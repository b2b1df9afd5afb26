"""A baseline's declarations, read before anything runs: what `register_baseline`, `tosca list`,
a suite and the runner read off the class, each of the kind they expect."""

from __future__ import annotations

import inspect

from tosca_heads.conformance.shared import refuse
from tosca_heads.method.baseline_registry import ESTIMATOR_METHODS, Param, declared_params

FLAGS = ("runs_by_default", "deterministic", "order_free")  # True or False where declared


def check_declarations(cls: type) -> None:
    """`incremental` True or False with its learning method (`partial_fit` or `fit`), `predict` and
    `num_parameters`; `__init__` takes `device` (a run passes it); a docstring whose first line says
    what it is (`tosca list`); `reference` True, False or words; `paper` and `label` texts; the
    flags True or False; each `Param` named after a keyword of `__init__` whose default keeps its
    rule, and the rule's words one line (they are a refusal's)."""
    name = cls.__name__
    incremental = getattr(cls, "incremental", None)
    if not isinstance(incremental, bool):
        raise refuse(
            "baseline", name, f"incremental must be True (partial_fit) or False (fit), got {incremental!r}"
        )
    learn = "partial_fit" if incremental else "fit"
    missing = [m for m in (learn, *ESTIMATOR_METHODS) if not callable(getattr(cls, m, None))]
    if missing:
        raise refuse("baseline", name, f"lacks {', '.join(missing)} (incremental = {incremental})")
    try:
        keywords = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        keywords = {}
    takes_any = any(k.kind is inspect.Parameter.VAR_KEYWORD for k in keywords.values())
    if "device" not in keywords and not takes_any:
        raise refuse(
            "baseline", name, "__init__ takes no device keyword (a run passes device='cpu' or 'cuda')"
        )
    if not (cls.__doc__ or "").strip():
        raise refuse("baseline", name, "has no docstring: its first line is what `tosca list` says of it")
    reference = getattr(cls, "reference", False)
    if not isinstance(reference, (bool, str)) or reference == "":
        raise refuse(
            "baseline", name, f"reference must be True, False or words saying why, got {reference!r}"
        )
    for text in ("paper", "label"):
        if not isinstance(getattr(cls, text, ""), str):
            raise refuse("baseline", name, f"{text} must be a text, got {getattr(cls, text)!r}")
    for flag in FLAGS:
        if not isinstance(getattr(cls, flag, False), bool):
            raise refuse("baseline", name, f"{flag} must be True or False, got {getattr(cls, flag)!r}")
    for param in getattr(cls, "params", ()):
        keyword = keywords.get(getattr(param, "name", ""))
        if not isinstance(param, Param) or keyword is None or keyword.default is inspect.Parameter.empty:
            said = param.name if isinstance(param, Param) else type(param).__name__
            raise refuse(
                "baseline",
                name,
                f"params holds {said}, not a Param named after a keyword of __init__ with a default",
            )
    try:
        params = declared_params(cls)
    except ValueError as exc:
        raise refuse("baseline", name, str(exc).removeprefix(f"baseline {name}'s ")) from None
    for param in params:
        words = str(param.valid) if param.valid is not None else "words"
        if not words.strip() or "\n" in words:
            raise refuse(
                "baseline",
                name,
                f"parameter {param.name}'s rule says {words!r}: a refusal needs one line of words",
            )
