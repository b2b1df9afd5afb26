"""One registry type for every kind of thing a command takes by name: backbones, datasets,
routers, baselines, trackers and image decoders.

A registry maps names to entries. An entry holds what `tosca list` and a refusal say of a name (its
description, whether it is a reference rather than an honest result, where it was registered, its
other names), and its implementation: the object itself, or for a built-in whose module is heavy
(torch) the place it lives, `module:attribute`, imported the first time the name is used. Listing
a registry (`entries()`, iterating its names) imports nothing, so `tosca list` starts without torch.

As a mapping, `registry[name]` is the implementation (loaded on first use), an alias finding the
same entry as its name; iterating gives the names, never the aliases; `del registry[name]` takes a
name out (a test or a doctest leaving the registry as it found it), and nothing is put in but
through `add` or `declare`. Every kind registers through
one signature, `add(name, value, description, reference, module, aliases)` (or `declare` for a
built-in loaded on first use), which the `register_*` function of each kind calls after checking
what that kind must offer; a name or alias registered twice is refused. A name the user typed is
checked once, at the edge, by `pick`: its registered name, or one line saying what is known and
which name was probably meant.

Processes a command starts (the Dask workers of a sweep, a suite or an extraction) do not run the
caller's script: what code outside the package registered (`made_elsewhere`: a plug-in, a script,
a notebook) is sent to them and `adopt`ed there (tosca_foundation.cluster). A registry is
pickled by its address (`module:NAME`), so a worker finds its own copy.

Import-light: stdlib and the foundation's errors and names only.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from tosca_foundation.errors import UserValueError
from tosca_foundation.names import did_you_mean

T = TypeVar("T")
OURS = (
    "tosca_foundation",
    "featcache",
    "tosca_heads",
    "tosca_cli",
)  # a name registered from these is built in
BUILT_IN = "built-in"


@dataclass(frozen=True)
class Entry:
    """One registered name: `description` (one line), `reference` (why it is no honest result; ""
    for an honest one), `origin` (the module that registered it, or "built-in"), its `aliases`
    (other names that find it), and its implementation: `value`, or `target` (`module:attribute`)
    until it is first used."""

    name: str
    description: str = ""
    reference: str = ""
    origin: str = BUILT_IN
    target: str = ""
    value: Any = None
    aliases: tuple[str, ...] = ()

    @property
    def built_in(self) -> bool:
        return self.origin == BUILT_IN


def origin_of(module: str | None) -> str:
    """Where a name registered from `module` comes from: "built-in" (our packages), else the module
    ("__main__" for a script or a notebook)."""
    module = module or ""
    return BUILT_IN if not module or module.split(".")[0] in OURS else module


def reference_words(declared: bool | str) -> str:
    """A `reference = True` or `reference = "told the task"` declaration, in words ("" if none)."""
    return declared if isinstance(declared, str) else ("a reference" if declared else "")


REGISTRIES: list[Registry[Any]] = []  # every registry of this process, as it was made


class Registry(Mapping[str, T]):
    """The names of one `kind` (router, baseline, ...), in the order they were registered.
    `address` is where the registry itself lives (`module:NAME`)."""

    def __init__(self, kind: str, address: str, flag: str | None = None) -> None:
        """`flag`: how a user names one (`--router`), for `pick`'s refusal (default: the kind)."""
        self.kind, self.address, self.flag = kind, address, flag or kind
        self._entries: dict[str, Entry] = {}
        self._aliases: dict[str, str] = {}  # alias -> name
        REGISTRIES.append(self)

    def declare(
        self,
        name: str,
        target: str,
        description: str,
        reference: bool | str = False,
        aliases: tuple[str, ...] = (),
    ) -> None:
        """A built-in whose implementation is imported from `target` (`module:attribute`) on first use."""
        self._put(
            Entry(name, description, reference_words(reference), BUILT_IN, target, aliases=tuple(aliases))
        )

    def add(
        self,
        name: str,
        value: T,
        description: str = "",
        reference: bool | str = False,
        module: str | None = None,
        aliases: tuple[str, ...] = (),
    ) -> T:
        """Register `value` under `name` (and its `aliases`); `module` is the registering code's
        (plug-in or built-in)."""
        found = Entry(name, description, reference_words(reference), origin_of(module), value=value)
        self._put(replace(found, aliases=tuple(aliases)))
        return value

    def _put(self, found: Entry) -> None:
        for name in (found.name, *found.aliases):
            if not name or name in self:
                raise UserValueError(f"{self.kind} name {name!r} is empty or registered twice")
        self._entries[found.name] = found
        self._aliases.update(dict.fromkeys(found.aliases, found.name))

    def name_of(self, name: str) -> str:
        """The registered name `name` stands for (itself, or the name an alias finds)."""
        return self._aliases.get(name, name)

    def pick(self, name: object, flag: str | None = None, also: tuple[str, ...] = ()) -> str:
        """The registered name of what a user typed (a name or an alias; or one of `also`, words
        the caller takes besides, such as "auto"), checked once at the edge; unknown: `refusal`'s
        line."""
        if isinstance(name, str) and (name in self or name in also):
            return self.name_of(name)
        raise UserValueError(self.refusal(name, flag, also))

    def refusal(self, name: object, flag: str | None = None, also: tuple[str, ...] = ()) -> str:
        """The one line refusing an unknown name: where it was typed (`flag`, default the
        registry's), the closest name ("did you mean ...?") and every name known."""
        known = [*also, *self]
        close = did_you_mean(name, [*known, *self._aliases])
        return f"unknown {flag or self.flag} {str(name)!r}{close}: use one of {', '.join(known) or 'none'}"

    def entry(self, name: str) -> Entry:
        return self._entries[self.name_of(name)]

    def entries(self) -> list[Entry]:
        """Every entry, in registration order; nothing is imported."""
        return list(self._entries.values())

    def __getitem__(self, name: str) -> T:
        name = self.name_of(name)
        found = self._entries[name]
        if found.value is None and found.target:
            module, _, attribute = found.target.partition(":")
            found = replace(found, value=getattr(importlib.import_module(module), attribute))
            self._entries[name] = found
        return found.value

    def __delitem__(self, name: str) -> None:
        found = self._entries.pop(self.name_of(name))
        for alias in found.aliases:
            del self._aliases[alias]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries or name in self._aliases

    def made_elsewhere(self) -> list[Entry]:
        """What code outside the package registered (plug-ins, a script, a notebook)."""
        return [found for found in self._entries.values() if not found.built_in]

    def adopt(self, entries: list[Entry]) -> None:
        """Take in entries registered in another process, unless their name is here already (a
        plug-in that the unpickling of its entry imported, and so registered, here too)."""
        for found in entries:
            if found.name not in self._entries:
                self._put(replace(found, aliases=tuple(a for a in found.aliases if a not in self)))

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return registry_at, (self.address,)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {len(self)} names)"


def registry_at(address: str) -> Registry[Any]:
    """The registry living at `module:NAME` in this process."""
    module, _, name = address.partition(":")
    return getattr(importlib.import_module(module), name)
