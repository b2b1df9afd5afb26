"""Code outside the package that registers routers, baselines, backbones or datasets, loaded
before a command runs: the modules named in $TOSCA_PLUGINS (comma-separated, importable from
sys.path) and every entry point of the group `tosca.plugins` of the installed distributions. A
plug-in that fails to import stops the command in one line naming it."""

from __future__ import annotations

import importlib
from importlib import metadata

from featcache.foundation.errors import UserError
from featcache.foundation.settings import setting

ENTRY_POINTS = "tosca.plugins"


def plugin_names() -> list[str]:
    named = [n.strip() for n in (setting("TOSCA_PLUGINS") or "").split(",") if n.strip()]
    return [*named, *(ep.value for ep in metadata.entry_points(group=ENTRY_POINTS))]


def load_plugins() -> list[str]:
    """Import every plug-in once (a module imported twice registers nothing twice); their names."""
    loaded = []
    for name in plugin_names():
        module = name.split(":")[0]
        try:
            importlib.import_module(module)
        except (Exception, SystemExit) as exc:  # any failure of foreign code, even an exit: said
            raise UserError(f"plug-in {module!r} failed to import ({type(exc).__name__}: {exc})") from None
        loaded.append(module)
    return loaded
