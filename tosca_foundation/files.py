"""Reading the small files tosca keeps, bounded; and turning what the disk says into one line.

Every metadata file tosca reads (a store's zarr.json, a run's config.json and metrics.json, a
sweep.json, a folder's `.tosca` marker, a lock's record, a task file's header, a suite file) is
read through `read_bytes`: opened without blocking (a fifo in its place never hangs the
command), refused unless it is a regular file, and refused when it is larger than such a file can
be (a sparse 2 GiB config.json costs nothing to make and 5 GB to parse) before a byte is read.
JSON and TOML are checked for nesting depth before they are parsed (`check_depth`): text nested
3,000 deep would otherwise end in a RecursionError, or in one when its value is walked later.

A JSON file that is missing, not JSON, or not an object is the user's to fix (edited, damaged,
copied half-way): one line naming it and what to do, never a traceback. An `OSError` from a
full, read-only or otherwise unwritable place, a name longer than the filesystem allows, or a
path longer than the system allows (each said as itself), is one line too (`disk_errors` around
a write; the command line does the same for any reachable place as a last resort).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import tomllib

from tosca_foundation.errors import UserError
from tosca_foundation.text import printable
from tosca_foundation.units import human_bytes

FULL = (errno.ENOSPC, errno.EDQUOT)
NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)
TOO_LONG = (errno.ENAMETOOLONG,)
USER_FIXABLE = (*FULL, *NOT_WRITABLE, *TOO_LONG)
NAME_MAX, PATH_MAX = 255, 4096  # bytes: a file or folder name's limit, and a whole path's (Linux)

METADATA_LIMIT = 32 << 20  # bytes: a store's attrs with 20,000 skipped images are about 2 MB
MAX_DEPTH = 64  # nesting levels of JSON or TOML: tosca writes at most 6


@contextlib.contextmanager
def _regular_file(path: Path, what: str, hint: str) -> Iterator[tuple[int, os.stat_result]]:
    """`path` opened for reading when it is a regular file, with its stat; a missing file, a folder,
    a fifo, a device or a socket is one line naming it (`what`, then `hint`). O_NONBLOCK: opening a
    fifo with no writer would wait for ever."""
    shown = printable(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise UserError(f"{what} {shown} is missing{hint}") from None
    except OSError as exc:
        raise UserError(f"cannot read {what} {shown} ({exc.strerror or type(exc).__name__}){hint}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise UserError(f"{what} {shown} is a folder, not a file{hint}")
        if not stat.S_ISREG(info.st_mode):
            raise UserError(
                f"{what} {shown} is not a regular file (a fifo, a device or a socket); tosca reads only "
                f"files{hint}"
            )
        yield fd, info
    except OSError as exc:
        raise UserError(f"cannot read {what} {shown} ({exc.strerror or type(exc).__name__}){hint}") from None
    finally:
        os.close(fd)


def read_bytes(path: str | Path, what: str, hint: str = "", limit: int = METADATA_LIMIT) -> bytes:
    """A regular file's bytes, at most `limit` of them. A missing file, a folder, a fifo, a device
    or a socket, and a file larger than `limit`, are one line naming it; nothing ever blocks."""
    path, hint = Path(path), f"; {hint}" if hint else ""
    with _regular_file(path, what, hint) as (fd, info):
        too_big = UserError(
            f"{what} {printable(path)} is larger than such a file can be ({human_bytes(info.st_size)}; at "
            f"most {human_bytes(limit)}): it is not one tosca wrote{hint}"
        )
        if info.st_size > limit:
            raise too_big
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        if left <= 0:  # it grew while it was read
            raise too_big
        return b"".join(chunks)


def read_head(path: str | Path, what: str, n: int, hint: str = "") -> tuple[bytes, int]:
    """A regular file's first `n` bytes and its size (a format told by its magic bytes, however
    large the file): the same refusals as `read_bytes`, one line each; nothing ever blocks."""
    path, hint = Path(path), f"; {hint}" if hint else ""
    with _regular_file(path, what, hint) as (fd, info):
        return os.pread(fd, n, 0), info.st_size


def read_text(path: str | Path, what: str, hint: str = "", limit: int = METADATA_LIMIT) -> str:
    """A text file's contents (see `read_bytes`); a file that is not UTF-8 text is one line too."""
    data = read_bytes(path, what, hint, limit)
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise UserError(
            f"cannot read {what} {path} (UnicodeDecodeError){f'; {hint}' if hint else ''}"
        ) from None


# JSON strings, then brackets; TOML strings (basic, literal, multi-line) and comments, then brackets
_JSON_SKIP = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_TOML_SKIP = re.compile(r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*')
_BRACKETS = re.compile(r"[\[{]+|[\]}]+")


def nesting_depth(text: str, toml: bool = False, limit: int = MAX_DEPTH) -> int:
    """How deeply `text`'s arrays and objects nest (strings and comments left out); the scan stops
    as soon as it passes `limit`, so it costs one pass at most and never recurses."""
    stripped = (_TOML_SKIP if toml else _JSON_SKIP).sub("", text)
    depth = deepest = 0
    for run in _BRACKETS.finditer(stripped):
        token = run.group()
        depth += len(token) if token[0] in "[{" else -len(token)
        if depth > deepest:
            deepest = depth
            if deepest > limit:
                break
    return deepest


def check_depth(text: str, where: str, hint: str = "", toml: bool = False) -> None:
    """Refuse text nested deeper than MAX_DEPTH, before it is parsed."""
    if nesting_depth(text, toml) > MAX_DEPTH:
        raise UserError(
            f"{where} nests more than {MAX_DEPTH} levels deep: it is not a file tosca wrote"
            f"{f'; {hint}' if hint else ''}"
        )


def parse_json(text: str | bytes, where: str, hint: str = "") -> Any:
    """Any JSON value, its depth checked first; text that is not JSON is one line naming `where`."""
    if isinstance(text, bytes):
        try:
            text = text.decode()
        except UnicodeDecodeError:
            raise UserError(
                f"{where} is not valid JSON (not UTF-8 text){f'; {hint}' if hint else ''}"
            ) from None
    check_depth(text, where, hint)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(
            f"{where} is not valid JSON ({exc.msg} at line {exc.lineno}){f'; {hint}' if hint else ''}"
        ) from None
    except RecursionError:  # pragma: no cover - check_depth refuses anything this deep first
        raise UserError(f"{where} nests too deeply{f'; {hint}' if hint else ''}") from None


def read_json(path: str | Path, what: str, hint: str, limit: int = METADATA_LIMIT) -> dict[str, Any]:
    """A JSON object from `path`, read bounded; a missing, unreadable, oversized, too deeply nested,
    malformed or non-object file is one line."""
    path = Path(path)
    data = parse_json(read_text(path, what, hint, limit), f"{what} {path}", hint)
    if not isinstance(data, dict):
        raise UserError(f"{what} {path} holds a {type(data).__name__}, not a JSON object; {hint}")
    return data


def read_toml(path: str | Path, what: str, hint: str = "") -> dict[str, Any]:
    """A TOML file, read bounded and its depth checked before it is parsed."""
    text = read_text(path, what, hint)
    check_depth(text, f"{what} {path}", hint, toml=True)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{what} {path} is not valid TOML: {exc}") from None
    except RecursionError:  # pragma: no cover - check_depth refuses anything this deep first
        raise UserError(f"{what} {path} nests too deeply") from None


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
        path = os.fsencode(str(exc.filename or where or ""))
        longest = max(path.split(b"/"), key=len)
        if len(longest) <= NAME_MAX and len(path) >= PATH_MAX:  # every name fits: the whole path does not
            return (
                f"a path is too long for this system ({len(path):,} bytes; a path must be shorter than "
                f"{PATH_MAX:,}){while_}: {place}; choose a shorter path (fewer or shorter folders)"
            )
        return (
            f"a file or folder name is too long for this filesystem ({len(longest):,} bytes; most allow "
            f"{NAME_MAX}){while_} in {place}; choose a shorter name"
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
