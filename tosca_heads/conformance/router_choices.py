"""A router routes as evaluation drives it: on each task's view, through `routing_rules.routed`
(the one place choices are checked: an integer tensor [G, n] of modules in [0, M); an honest router
handed only the honest part of the view), the same choices when asked twice; one that does not say
`needs_statistics = True` routes without the class statistics."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from tosca_foundation.errors import UserError
from tosca_heads.conformance.router_views import views
from tosca_heads.conformance.shared import first_line, refuse
from tosca_heads.routers import Router
from tosca_heads.routers.routing_rules import routed


def check_choices(router: Router, learner: Mapping[str, Any] | None = None) -> None:
    name = router.name
    statistics = router.needs_statistics or router.on_request
    for task, view in enumerate(views(router, with_statistics=statistics, learner=learner)):
        if not router.available(view):
            raise refuse(
                "router", name, f"says it is not available on task {task}'s view, which holds everything"
            )
        chosen = [_routed(router, view, task) for _ in range(2)]
        if not torch.equal(chosen[0], chosen[1]):
            raise refuse("router", name, f"chose differently when asked twice on task {task}'s view")


def _routed(router: Router, view: object, task: int) -> torch.Tensor:
    name = router.name
    try:
        return routed(router, view)  # type: ignore[arg-type]
    except UserError as exc:
        raise refuse("router", name, str(exc).removeprefix(f"router {name!r} ")) from None
    except Exception as exc:
        hint = ""
        if getattr(view, "frozen", None) is None and not router.needs_statistics:
            hint = " (view.frozen is None here: a router that reads the class statistics says needs_statistics = True)"
        raise refuse(
            "router",
            name,
            f"route on task {task}'s view raised {type(exc).__name__}: {first_line(str(exc))}{hint}",
        ) from None
