"""The scenario a user named: the built-in scenarios' files are imported here (each registers
itself into `SCENARIOS` with `@register_scenario`), so the registry stays below them and no file
imports one that imports it back."""

from __future__ import annotations

from tosca_heads.method.scenarios import blurry, cil, dil, fscil  # noqa: F401 - each registers itself
from tosca_heads.method.scenarios.registry import SCENARIOS, Scenario


def scenario(name: object, spelling: str = "--scenario") -> type[Scenario]:
    """The scenario a user named (one line with the closest name for an unknown one), refused in
    the words of where it was typed (`spelling`: the flag, or the API's parameter)."""
    return SCENARIOS[SCENARIOS.pick(name, spelling)]
