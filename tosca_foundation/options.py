"""Request objects say how the command line offers each of their fields: `option(...)` puts the
help text and the flag's spellings on a dataclass field, and `cli.py` builds each command's options
from its request class. One place for a flag's name, type, default and meaning; a field without
`option` (set by code, not by users) is not offered.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, dataclass, field
from typing import Any


def option(
    default: Any = MISSING,
    help: str = "",
    names: tuple[str, ...] = (),
    argument: bool = False,
    comma: bool = False,
    factory: Callable[[], Any] | None = None,
    output: bool = False,
) -> Any:
    """A request field the command line offers: `names` are its spellings (default: --field-name),
    `argument` makes it positional, `comma` reads a tuple field from one comma-separated value,
    `output` marks a folder the command writes (checked before anything runs:
    `tosca_foundation.folders.check_outputs`)."""
    metadata = {"help": help, "names": names, "argument": argument, "comma": comma, "output": output}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def flag_name(f: Any) -> str:
    """How the command line spells a request's field (`f`, a dataclass field): --run, --keep-modules."""
    names = f.metadata.get("names") or ()
    return names[0] if names else "--" + f.name.replace("_", "-")


@dataclass(frozen=True)
class ExtraFlag:
    """A flag of a command that is no field of its request but an entry of one of its dict fields
    (the recipe flags of `fit`, the grid flags of `sweep`): its option name, type, help, default,
    and its key in that dict (default: its name)."""

    name: str
    kind: Any
    help: str
    default: Any = None
    key: str | None = None
