"""One long computation that reports nothing while it runs (a factorisation, an LU solve, an
eigendecomposition of a large matrix) says so in the progress line.

A baseline's progress moves when a task ends; a single LAPACK call of minutes between two such
moves left the line unchanged ("4/5 tasks") as if the command hung. The code that starts such a
call marks it (`during`); the progress board reads what is under way (`said`) each time it writes
a line, and says it once it has lasted `SAID_AFTER` seconds: "in an LU solve of a ridge system
(10,000 x 10,000) for 0:42". The record is per process and thread-safe; nothing is said where no
board is shown.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NoReturn

SAID_AFTER = 2.0  # seconds: a call shorter than this is not worth a word

_LOCK = threading.Lock()
_UNDER_WAY: dict[int, tuple[str, float]] = {}  # mark -> (what, started on `clock`)
_MARKS = itertools.count()
_ABANDONED = threading.Event()


@contextmanager
def during(what: str, clock: Callable[[], float] = time.monotonic) -> Iterator[None]:
    """Within the block, `what` (a noun phrase: "an LU solve of a ridge system (2,000 x 2,000)") is
    under way."""
    with _LOCK:
        mark = next(_MARKS)
        _UNDER_WAY[mark] = (what, clock())
    try:
        yield
    finally:
        with _LOCK:
            _UNDER_WAY.pop(mark, None)


def said(clock: Callable[[], float] = time.monotonic) -> str:
    """ "in WHAT for M:SS" for the longest-running computation under way, once it has lasted
    `SAID_AFTER` seconds; "" otherwise."""
    with _LOCK:
        under_way = list(_UNDER_WAY.values())
    if not under_way:
        return ""
    what, started = min(under_way, key=lambda item: item[1])
    seconds = clock() - started
    if seconds < SAID_AFTER:
        return ""
    minutes, rest = divmod(int(seconds), 60)
    return f"in {what} for {minutes}:{rest:02d}"


def abandon() -> None:
    """A worker thread was left inside a long call (its caller was interrupted)."""
    _ABANDONED.set()


def leave(code: int) -> NoReturn:
    """End the process with `code`: `sys.exit`, or, once a long call was abandoned, the exit
    handlers (`atexit`), stdout and stderr flushed, then `os._exit`, so that the interpreter does
    not wait at its finalisation for the abandoned call to return."""
    if not _ABANDONED.is_set():
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed or broken pipe: nothing more to say
            stream.flush()
    os._exit(code)
