""" "Did you mean": the registered name closest to a mistyped one (a router, a dataset, a backbone,
a preset, a baseline, a keyword argument), so the one line that refuses a name also says which one
was meant; and how a line names an argument: as the command line spells it (`--val-fraction`) or
as Python does (`val_fraction`), so one check serves both faces."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterable

from tosca_foundation.errors import UserTypeError

Spell = Callable[[str], str]  # an argument's name (a request field, a recipe key) as a line shows it


def as_flag(name: str) -> str:
    """The command line's spelling: `val_fraction` -> `--val-fraction`."""
    return "--" + name.replace("_", "-")


def as_keyword(name: str) -> str:
    """Python's spelling: the parameter's own name."""
    return name


def did_you_mean(name: object, known: Iterable[str]) -> str:
    """' (did you mean 'entropy'?)', or '' when no registered name is close."""
    close = difflib.get_close_matches(str(name).lower(), [str(k) for k in known], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_keywords(function: Callable[..., object], given: Iterable[str], more: Iterable[str] = ()) -> None:
    """The keywords a Python function's `**kwargs` took, each one it knows: its named parameters,
    or one of `more` (what its `**kwargs` stand for: recipe keys, extract options). Else one line
    as Python words it, with the closest valid name: "fit() got an unknown keyword argument 'epoch'
    (did you mean 'epochs'?): valid: ..."."""
    named = [
        p.name
        for p in inspect.signature(function).parameters.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    valid = list(dict.fromkeys([*named, *more]))
    for name in given:
        if name not in valid:
            raise UserTypeError(
                f"{function.__name__}() got an unknown keyword argument {name!r}{did_you_mean(name, valid)}: "
                f"valid: {', '.join(valid)}"
            )
