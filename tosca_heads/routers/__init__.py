"""Routers: which task module answers a test sample when the task id is not given.

`registry` holds them (`ROUTERS`, one short class per router, `register_router` for routers that
live outside the package); `scores` what routed evaluation computes from each module's logits;
`memo` the per-class statistics of frozen features that some routers keep
(`tosca_heads.method.class_statistics`, method code a baseline can use too), shared by the runs of
one process. Evaluation reports every router, in
the registry's order (`ROUTERS`), which is also their order in tables and files.
"""

from __future__ import annotations

from tosca_foundation.errors import UserTypeError, UserValueError
from tosca_heads.routers.learned import on_request  # registers fecam, klda, randumb after the others
from tosca_heads.routers.routing_rules import (
    ROUTERS,
    ReferenceView,
    Router,
    StageView,
    is_honest,
    reference_text,
    register_router,
    route,
    route_batches,
    router_label,
    task_log_posterior,
)

HEADLINE = ("entropy", "lda", "batch", "oracle")  # the routers compact tables and plots show


def resolve_routers(text: str | None, flag: str = "--router") -> list[str]:
    """'lda,entropy' -> ['lda', 'entropy'] (None: every router but the on-request ones, which cost a
    baseline's time; 'all': every router), unknown names refused, named `flag` (Python's: `router`)."""
    names_all = tuple(ROUTERS)
    if text is None:
        return [name for name in names_all if not ROUTERS[name].on_request]
    if not isinstance(text, str):
        raise UserTypeError(f"{flag} must be router names, comma-separated, got {text!r}")
    if text.strip() == "all":
        return list(names_all)
    names = [ROUTERS.pick(n.strip(), flag) for n in text.split(",") if n.strip()]
    if not names:
        raise UserValueError(f"{flag} {text!r} names no router: use any of {', '.join(names_all)}")
    return list(dict.fromkeys(names))


__all__ = [
    "HEADLINE",
    "ROUTERS",
    "ClassStatistics",
    "FrozenModel",
    "ReferenceView",
    "Router",
    "StageView",
    "is_honest",
    "on_request",
    "reference_text",
    "register_router",
    "resolve_routers",
    "route",
    "route_batches",
    "router_label",
    "task_log_posterior",
]
