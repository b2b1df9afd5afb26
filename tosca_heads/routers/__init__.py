"""Routers: which task module answers a test sample when the task id is not given (issue #10).

`library` holds the registry (`ROUTERS`, one short class per router); `stats` the per-class
statistics of frozen features that some routers keep, task by task. Evaluation reports every
router; `ROUTER_NAMES` is their order in tables and files.
"""

from __future__ import annotations

from featcache.foundation.errors import UserError
from tosca_heads.routers.registry import ROUTERS, Router, StageView, route_batches, task_log_posterior
from tosca_heads.routers.statistics import ClassStatistics, FrozenModel

ROUTER_NAMES: tuple[str, ...] = tuple(ROUTERS)
ALIASES = {"sample": "entropy"}  # the name `entropy` routing had before the registry
HEADLINE = ("entropy", "lda", "batch", "oracle")  # the routers compact tables and plots show


def resolve_routers(text: str | None) -> list[str]:
    """'lda,entropy' -> ['lda', 'entropy'] (None or 'all': every router), unknown names refused."""
    if text is None or text.strip() == "all":
        return list(ROUTER_NAMES)
    names = [ALIASES.get(n.strip(), n.strip()) for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in ROUTERS]
    if unknown or not names:
        raise UserError(
            f"unknown --router {','.join(unknown) or text!r}: use any of {', '.join(ROUTER_NAMES)}"
        )
    return list(dict.fromkeys(names))


__all__ = [
    "ALIASES",
    "HEADLINE",
    "ROUTERS",
    "ROUTER_NAMES",
    "ClassStatistics",
    "FrozenModel",
    "Router",
    "StageView",
    "resolve_routers",
    "route_batches",
    "task_log_posterior",
]
