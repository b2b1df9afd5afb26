"""Code outside the package that registers routers, baselines, backbones, datasets or loggers,
loaded before a command runs: the modules named in $TOSCA_PLUGINS (comma-separated, importable
from sys.path) and every entry point of the group `tosca.plugins` of the installed distributions.
A plug-in that fails to import stops the command in one line naming it.

Foreign code is held to the rules of the command it runs in (`foreign_code`, around the import
here and around every call the trackers make into a logger): what it prints goes to stderr, since
stdout carries the command's answers (`--json` among them); an exit it raises (`SystemExit`,
`GeneratorExit`) is a failure of that plug-in (`PluginExit`), said by its caller in one line,
never a silent exit 0; an interrupt (`KeyboardInterrupt`) while it imports is said too.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterator
from importlib import metadata

from tosca_foundation.errors import UserError
from tosca_foundation.settings import setting

ENTRY_POINTS = "tosca.plugins"


class PluginExit(RuntimeError):
    """An exit raised by a plug-in's code (SystemExit, GeneratorExit), as an ordinary error that the
    code calling the plug-in reports as its failure."""


@contextlib.contextmanager
def foreign_code() -> Iterator[None]:
    """Around a call into a plug-in: its prints go to stderr, an exit it raises is a `PluginExit`."""
    with contextlib.redirect_stdout(sys.stderr):
        try:
            yield
        except (SystemExit, GeneratorExit) as exc:
            code = f" {exc}" if str(exc) else ""
            raise PluginExit(f"it raised {type(exc).__name__}{code}, which would end the command") from None


def plugin_names() -> list[str]:
    named = [n.strip() for n in (setting("TOSCA_PLUGINS") or "").split(",") if n.strip()]
    return [*named, *(ep.value for ep in metadata.entry_points(group=ENTRY_POINTS))]


def load_plugins() -> list[str]:
    """Import every plug-in once (a module imported twice registers nothing twice); their names."""
    loaded = []
    for name in plugin_names():
        module = name.split(":")[0]
        try:
            with foreign_code():
                importlib.import_module(module)
        except PluginExit as exc:
            raise UserError(f"plug-in {module!r} failed to import ({exc})") from None
        except KeyboardInterrupt:  # a Ctrl-C then, or the plug-in's own raise: either way, said
            raise UserError(
                f"plug-in {module!r} was interrupted while it was imported (KeyboardInterrupt); nothing ran"
            ) from None
        except Exception as exc:  # any failure of foreign code: said
            raise UserError(f"plug-in {module!r} failed to import ({type(exc).__name__}: {exc})") from None
        loaded.append(module)
    return loaded
