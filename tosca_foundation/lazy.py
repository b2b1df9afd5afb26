"""A package whose names load with their module on first use (PEP 562), so importing the package,
or a light module inside it, does not load what its heavy modules import.

    __getattr__, __all__ = lazy_names(__name__, {"format": ("FeatureStore", ...), ...})
    __getattr__, __dir__ = lazy_face(__name__, "stage2_api")  # a package's face: its API module's __all__

Import-light: stdlib only.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from typing import Any


def lazy_names(package: str, homes: dict[str, tuple[str, ...]]) -> tuple[Callable[[str], Any], list[str]]:
    """The package's `__getattr__` (a name from `homes`, module -> names, imported from
    `package.module` when first asked for) and its `__all__`."""
    home_of = {name: module for module, names in homes.items() for name in names}

    def __getattr__(name: str) -> Any:
        if name not in home_of:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{home_of[name]}"), name)

    return __getattr__, sorted(home_of)


def lazy_face(package: str, module: str) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's `__getattr__` and `__dir__` handing on the names of one module's `__all__` (its
    API, listed there once), the module imported when one is first asked for: `import package`
    loads nothing of it. `package.API` and `package.__all__` are that list."""
    home = f"{package}.{module}"

    def names() -> list[str]:
        return list(importlib.import_module(home).__all__)

    def __getattr__(name: str) -> Any:
        if name in ("API", "__all__"):
            return tuple(names()) if name == "API" else names()
        # a submodule not imported yet (`from package import store`) is no API name: asking for it
        # must not load the API
        is_module = name.startswith("_") or importlib.util.find_spec(f"{package}.{name}") is not None
        if not is_module and name in names():
            return getattr(importlib.import_module(home), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        import sys

        return sorted({*vars(sys.modules[package]), *names(), "API"})

    return __getattr__, __dir__
