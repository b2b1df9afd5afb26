"""`check_router(cls)`: every router check, in the order evaluation meets what they check."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tosca_foundation.arguments import check_types
from tosca_heads.conformance.outcome import Conformance
from tosca_heads.conformance.router_choices import check_choices
from tosca_heads.conformance.router_declarations import check_declarations
from tosca_heads.conformance.shared import calling


def check_router(cls: type, learner: Mapping[str, Any] | None = None) -> Conformance:
    """Run the contract the built-in routers pass on `cls` (registered or not): its declarations,
    then its choices on each task's view (checked as evaluation checks them, honest ones handed
    the honest part only, the same when asked twice, none reading the class statistics without
    `needs_statistics = True`). `learner`: keywords for the baseline an on-request router learns
    with (its `learner`; smaller sizes than its defaults for a quick check). A `NonConforming`
    error (one line) at the first check it fails, else its `Conformance`.

    >>> from tosca_heads.routers.routing_rules import NearestClassMean
    >>> check_router(NearestClassMean).passed
    ('declarations', 'choices per task', 'same choices twice')
    """
    check_types("check_router", check_router, {"learner": learner})
    check_declarations(cls)
    router = calling("router", cls.name, "__init__", cls)
    check_choices(router, learner)
    return Conformance("router", cls.name, ("declarations", "choices per task", "same choices twice"), {})
