"""A router's declarations, read before it routes: what `register_router`, `tosca list`,
`--router` and the tables read off the class, each of the kind they expect."""

from __future__ import annotations

from tosca_heads.conformance.shared import refuse
from tosca_heads.routers import Router


def check_declarations(cls: type) -> None:
    """A `Router` subclass with its own `route(view)`; `name` a non-empty text without spaces (what
    `--router` takes); `summary` one line (`tosca list`); `aliases` a tuple of such names; `label`
    a text; `reference` True, False or words; `needs_statistics` and `on_request` True or False;
    no `honest` of its own (it would hide `reference`)."""
    shown = getattr(cls, "__name__", repr(cls))
    if not (isinstance(cls, type) and issubclass(cls, Router)):
        raise refuse("router", shown, "is not a subclass of tosca_heads.Router")
    name = cls.name
    if not isinstance(name, str) or not name or any(c.isspace() for c in name):
        raise refuse(
            "router",
            shown,
            f"name must be a non-empty text without spaces (what --router takes), got {name!r}",
        )
    summary = cls.summary
    if not isinstance(summary, str) or not summary.strip() or "\n" in summary:
        raise refuse("router", name, f"summary must be one line saying what it routes by, got {summary!r}")
    aliases = cls.aliases
    if not isinstance(aliases, tuple) or not all(isinstance(a, str) and a and " " not in a for a in aliases):
        raise refuse("router", name, f"aliases must be a tuple of names, got a {type(aliases).__name__}")
    if not isinstance(cls.label, str):
        raise refuse("router", name, f"label must be a text, got {cls.label!r}")
    if not isinstance(cls.reference, (bool, str)) or cls.reference == "":
        raise refuse(
            "router", name, f"reference must be True, False or words saying why, got {cls.reference!r}"
        )
    for flag in ("needs_statistics", "on_request"):
        if not isinstance(getattr(cls, flag), bool):
            raise refuse("router", name, f"{flag} must be True or False, got {getattr(cls, flag)!r}")
    if any("honest" in vars(c) for c in cls.__mro__ if c is not Router):
        raise refuse("router", name, "sets honest: set `reference = True` (a reference) or nothing (honest)")
    if cls.route is Router.route:
        raise refuse(
            "router", name, "defines no route(view) (the module per configuration and sample, [G, n])"
        )
