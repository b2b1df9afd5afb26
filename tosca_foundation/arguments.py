"""The Python API's own parsing: what the command line's option parser does for a flag (a value of
its type, a known name), done for a keyword argument, so that a script's mistake is one line naming
the keyword as Python names it (`epochs=`, not `--epochs`), as a `UserTypeError`, where Python
would otherwise fail deep inside with a traceback, or take "false" for true."""

from __future__ import annotations

import os
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tosca_foundation.errors import UserTypeError

# what each plain type is called in a refusal
SAID = {bool: "True or False", int: "an integer", float: "a number", str: "text", Path: "a path"}


def holds(kind: Any, value: Any) -> bool:
    """Whether `value` is of `kind` (a type hint: a plain type, a union, None, a tuple or a mapping of
    them) as a request field takes it: an int is no bool, a number may be an int, a path is text or
    an os.PathLike (and not empty: that would mean the current folder). A hint it cannot judge (a
    class of the package's own, a callable) holds anything: the function checks those itself."""
    origin = typing.get_origin(kind)
    if kind is type(None) or kind is None:
        return value is None
    if origin in (typing.Union, types.UnionType):
        return any(holds(arm, value) for arm in typing.get_args(kind))
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is str:
        return isinstance(value, str)
    if kind is Path:
        return isinstance(value, (str, os.PathLike)) and str(value) != ""
    if origin in (tuple, Sequence):
        arms = [a for a in typing.get_args(kind) if a is not Ellipsis] or [Any]
        return (
            isinstance(value, Sequence)
            and not isinstance(value, (str, bytes))
            and all(holds(arms[0], item) for item in value)
        )
    if origin in (dict, Mapping):
        return isinstance(value, Mapping)
    if origin is type:
        base = typing.get_args(kind)[0]
        return isinstance(value, type) and (not isinstance(base, type) or issubclass(value, base))
    return isinstance(value, kind) if isinstance(kind, type) else True


def said(kind: Any) -> str:
    """A type hint in a refusal's words: 'an integer or None', 'a list of text'."""
    origin = typing.get_origin(kind)
    if kind is type(None) or kind is None:
        return "None"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(dict.fromkeys(said(arm) for arm in typing.get_args(kind)))
    if origin in (tuple, Sequence):
        arms = [a for a in typing.get_args(kind) if a is not Ellipsis]
        return f"a list of {said(arms[0]) if arms else 'values'}"
    if origin in (dict, Mapping):
        return "a dict"
    if origin is type:
        return f"a subclass of {getattr(typing.get_args(kind)[0], '__name__', 'a class')}"
    return SAID.get(kind, f"a {getattr(kind, '__name__', kind)}")


def shown(value: Any) -> str:
    """A value in a refusal, inert and in words (never a Python repr of an object): text quoted, a
    number or None as written, a path as its quoted text, a class by its name, anything else by
    its type ("a list", "a FeatureStore")."""
    if isinstance(value, (str, int, float)) or value is None:
        return repr(value)
    if isinstance(value, os.PathLike):
        return repr(os.fspath(value))
    if isinstance(value, type):
        return f"the class {value.__name__}"
    return f"a {type(value).__name__}"


def check_types(function: str, owner: Any, given: Mapping[str, Any]) -> None:
    """Each of `given` (keyword -> value) of the type `owner` (a request dataclass, or a function)
    declares for it, else one line: "extract() keyword views='1' must be an integer". Names
    `owner` does not declare are the caller's to refuse (`names.check_keywords`)."""
    hints = typing.get_type_hints(owner)
    for name, value in given.items():
        if name in hints and not holds(hints[name], value):
            raise UserTypeError(f"{function}() keyword {name}={shown(value)} must be {said(hints[name])}")


def as_path(function: str, name: str, value: Any) -> Path:
    """A path argument (text or an os.PathLike, not empty) as a Path, else one line naming it."""
    if not holds(Path, value):
        raise UserTypeError(f"{function}() keyword {name}={shown(value)} must be {said(Path)}")
    return Path(value)
