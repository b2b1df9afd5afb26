"""A package whose names load with their module on first use (PEP 562), so importing the package,
or a light module inside it, does not load what its heavy modules import.

    __getattr__, __all__ = lazy_names(__name__, {"format": ("FeatureStore", ...), ...})

Import-light: stdlib only.
"""

from __future__ import annotations

import importlib
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
