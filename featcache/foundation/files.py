"""Reading the small JSON files tosca keeps, and turning what the disk says into one line.

A JSON file that is missing, not JSON, or not an object is the user's to fix (edited, damaged,
copied half-way): one line naming it and what to do, never a traceback. An `OSError` from a
full, read-only or otherwise unwritable place, or a name longer than the filesystem allows, is
one line too (`disk_errors` around a write; the command line does the same for any reachable
place as a last resort).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from featcache.foundation.errors import UserError
from featcache.foundation.text import printable

FULL = (errno.ENOSPC, errno.EDQUOT)
NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)
TOO_LONG = (errno.ENAMETOOLONG,)
USER_FIXABLE = (*FULL, *NOT_WRITABLE, *TOO_LONG)


def read_text(path: str | Path, what: str, hint: str = "") -> str:
    """A text file's contents; a missing, unreadable or binary file is one line naming it."""
    path, hint = Path(path), f"; {hint}" if hint else ""
    try:
        if path.is_dir():
            raise UserError(f"{what} {path} is a folder, not a file{hint}")
        return path.read_text()
    except FileNotFoundError:
        raise UserError(f"{what} {path} is missing{hint}") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise UserError(f"cannot read {what} {path} ({reason}){hint}") from None


def read_json(path: str | Path, what: str, hint: str) -> dict[str, Any]:
    """A JSON object from `path`; a missing, unreadable, malformed or non-object file is one line."""
    path = Path(path)
    text = read_text(path, what, hint)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{what} {path} is not valid JSON ({exc.msg} at line {exc.lineno}); {hint}") from None
    if not isinstance(data, dict):
        raise UserError(f"{what} {path} holds a {type(data).__name__}, not a JSON object; {hint}")
    return data


def require_writable(path: str | Path) -> None:
    """Refuse, before any work, a place that cannot be written: `path`, or the nearest folder above
    it that exists (where it would be created)."""
    here = Path(path).absolute()
    while not here.exists() and here != here.parent:
        here = here.parent
    try:
        read_only = bool(os.statvfs(here).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    if read_only:
        raise UserError(f"cannot write {printable(here)} (Read-only file system)")
    if not os.access(here, os.W_OK):
        raise UserError(f"cannot write {printable(here)} (Permission denied)")


def os_error_line(
    exc: OSError, where: str | Path | None = None, doing: str = "", after: str = ""
) -> str | None:
    """The one line for an OSError a user can fix (disk full, read-only, permission, name too
    long), or None when it is something else (a bug keeps its traceback). `where` defaults to the
    error's own file name; `after` is appended to the disk-full line (what was kept)."""
    if exc.errno not in USER_FIXABLE:
        return None
    place = printable(where if where is not None else (exc.filename or "a file"))
    while_ = f" while {doing}" if doing else ""
    if exc.errno in FULL:
        return (
            f"disk full ({exc.strerror}){while_} in {place}{after}; free some space, then run the same "
            "command again to resume"
        )
    if exc.errno in TOO_LONG:
        longest = max(Path(str(exc.filename or where or "")).parts or ("",), key=len)
        return (
            f"a file or folder name is too long for this filesystem ({len(longest.encode())} bytes; most "
            f"allow 255){while_} in {place}; choose a shorter name"
        )
    verb = "write" if exc.errno == errno.EROFS else "access"
    return f"cannot {verb} {place} ({exc.strerror}){while_}"


@contextlib.contextmanager
def disk_errors(path: str | Path, doing: str, after: str = "") -> Iterator[None]:
    """Inside the block, a user-fixable OSError becomes one line that says what was being done."""
    try:
        yield
    except OSError as exc:
        line = os_error_line(exc, path, doing, after)
        if line is None:
            raise
        raise UserError(line) from None
