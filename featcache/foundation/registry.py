"""One registry type for every kind of thing a command takes by name: backbones, datasets,
routers, baselines and trackers.

A registry maps names to entries. An entry holds what `tosca list` and a refusal say of a name (its
description, whether it is a reference rather than an honest result, where it was registered), and
its implementation: the object itself, or for a built-in whose module is heavy (torch) the place
it lives, `module:attribute`, imported the first time the name is used. Listing a registry
(`entries()`, iterating its names) imports nothing, so `tosca list` starts without torch.

As a mapping, `registry[name]` is the implementation (loaded on first use); `add` registers one
(a name registered twice is refused), as the `register_*` functions of each kind do.

Processes a command starts (the Dask workers of a sweep, a suite or an extraction) do not run the
caller's script: what code outside the package registered (`made_elsewhere`: a plug-in, a script,
a notebook) is sent to them and `adopt`ed there (featcache.foundation.cluster). A registry is
pickled by its address (`module:NAME`), so a worker finds its own copy.

Import-light: stdlib only.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

T = TypeVar("T")
OURS = ("featcache", "tosca_heads", "tosca_cli")  # a name registered from these is built in
BUILT_IN = "built-in"


@dataclass(frozen=True)
class Entry:
    """One registered name: `description` (one line), `reference` (why it is no honest result; ""
    for an honest one), `origin` (the module that registered it, or "built-in"), and its
    implementation: `value`, or `target` (`module:attribute`) until it is first used."""

    name: str
    description: str = ""
    reference: str = ""
    origin: str = BUILT_IN
    target: str = ""
    value: Any = None

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


class Registry(MutableMapping[str, T]):
    """The names of one `kind` (router, baseline, ...), in the order they were registered.
    `address` is where the registry itself lives (`module:NAME`)."""

    def __init__(self, kind: str, address: str) -> None:
        self.kind, self.address = kind, address
        self._entries: dict[str, Entry] = {}
        REGISTRIES.append(self)

    def declare(self, name: str, target: str, description: str, reference: bool | str = False) -> None:
        """A built-in whose implementation is imported from `target` (`module:attribute`) on first use."""
        self._check_new(name)
        self._entries[name] = Entry(name, description, reference_words(reference), BUILT_IN, target)

    def add(
        self,
        name: str,
        value: T,
        description: str = "",
        reference: bool | str = False,
        module: str | None = None,
    ) -> T:
        """Register `value` under `name`; `module` is the registering code's (plug-in or built-in)."""
        self._check_new(name)
        self._entries[name] = Entry(
            name, description, reference_words(reference), origin_of(module), value=value
        )
        return value

    def _check_new(self, name: str) -> None:
        if not name or name in self._entries:
            raise ValueError(f"{self.kind} name {name!r} is empty or registered twice")

    def entry(self, name: str) -> Entry:
        return self._entries[name]

    def entries(self) -> list[Entry]:
        """Every entry, in registration order; nothing is imported."""
        return list(self._entries.values())

    def __getitem__(self, name: str) -> T:
        found = self._entries[name]
        if found.value is None and found.target:
            module, _, attribute = found.target.partition(":")
            found = replace(found, value=getattr(importlib.import_module(module), attribute))
            self._entries[name] = found
        return found.value

    def __setitem__(self, name: str, value: T) -> None:
        reference = reference_words(getattr(value, "reference", False))
        self._entries[name] = Entry(
            name, "", reference, origin_of(getattr(value, "__module__", None)), value=value
        )

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def made_elsewhere(self) -> list[Entry]:
        """What code outside the package registered (plug-ins, a script, a notebook)."""
        return [found for found in self._entries.values() if not found.built_in]

    def adopt(self, entries: list[Entry]) -> None:
        """Take in entries registered in another process, unless their name is here already (a
        plug-in that the unpickling of its entry imported, and so registered, here too)."""
        for found in entries:
            self._entries.setdefault(found.name, found)

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return registry_at, (self.address,)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {len(self)} names)"


def registry_at(address: str) -> Registry[Any]:
    """The registry living at `module:NAME` in this process."""
    module, _, name = address.partition(":")
    return getattr(importlib.import_module(module), name)
