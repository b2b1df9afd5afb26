"""Names are data: what a dataset, a file or a folder is called is shown, never obeyed.

A class folder named with an escape sequence (`ESC ] 0 ; title BEL`) would otherwise rewrite the
user's terminal title or colours when a table, a progress line or an error shows it. Every
control character (C0, DEL, C1) and every bidirectional-override character is shown as its
Python escape (`\\x1b`, `\\u202e`), so the name stays readable and inert.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Callable, Iterator

# C0 controls, DEL, C1 controls; the bidi embeddings, overrides and isolates (they reorder text)
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]")


def text_argument(value: str) -> str:
    """A command-line text that is not a path (an encoder's name) as its writer typed it: under an
    ASCII locale (LC_ALL=C, PYTHONUTF8=0) Python holds the UTF-8 bytes of `probé` as lone
    surrogates (PEP 383), which no check of printable text passes; bytes that are UTF-8 are read as
    UTF-8. A path keeps its surrogates: they are the bytes that name its file."""
    if not any("\udc80" <= c <= "\udcff" for c in value):
        return value
    try:
        return value.encode("utf-8", "surrogateescape").decode("utf-8")
    except UnicodeError:
        return value


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(value: object) -> str:
    """`str(value)` with every control and bidi character escaped (newlines and tabs too: one line
    stays one line)."""
    return _UNSAFE.sub(_escape, str(value))


_OBJECT = re.compile(r"\s*<[^<>\n]*? at 0x[0-9a-fA-F]+>")
# an exception handed back wrapped in another, as its repr (Dask: `Exception('Kind("message")')`)
_WRAPPED = re.compile(r"(\w+)\((['\"])(.*)\2\)")


def reason(exc: BaseException, most: int = 160) -> str:
    """A foreign exception as the reason in a one-line message: 'Type: its first line', without the
    object reprs some libraries put in it (PIL's `<_io.BytesIO object at 0x7f...>`), and an exception
    another wraps as its repr said as itself, inert."""
    kind, text = type(exc).__name__, _OBJECT.sub("", (str(exc).splitlines() or [""])[0]).strip()
    if wrapped := _WRAPPED.fullmatch(text):  # the inner one says what happened
        kind, text = wrapped[1], wrapped[3]
    return printable(f"{kind}: {text[:most]}" if text else kind)


def image_name(split: str, sample_id: str) -> str:
    """How a left-out image is named to users: its id, under its split unless the id already
    starts with it (a train/<class>/ tree's ids do: no `train/train/...`)."""
    return sample_id if sample_id.startswith(f"{split}/") else f"{split}/{sample_id}"


Teller = Callable[[str, str], None]
_TELLER: list[Teller] = []  # where `tell` says things: the command line's terminal, once it set one


def tell(line: str, label: str = "") -> None:
    """One line for the user as it happens, from below the command line (a lock waited for, a tracker
    that stopped), labelled ("warning", "note") or not: the one way such a line is said. Under
    `tosca` it goes to the terminal's `note` (`tosca_cli.terminal.speak_here`), as every other side
    line; from Python, to stderr, made printable."""
    if _TELLER:
        _TELLER[-1](line, label)
        return
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(printable(f"{label}: {line}" if label else line) + "\n")
        sys.stderr.flush()


@contextlib.contextmanager
def telling(teller: Teller) -> Iterator[None]:
    """Within the block, every `tell` line goes to `teller(line, label)` (a command's terminal)."""
    _TELLER.append(teller)
    try:
        yield
    finally:
        _TELLER.remove(teller)


_ENDINGS: list[dict[str, Callable[[], str | None]]] = []  # lines for the end of each command now running


def tell_at_end(key: str, line: Callable[[], str | None]) -> None:
    """A line for the end of the command, after its answer (where a tracker put its runs, and how to
    open them): said once per `key` (the last `line` given for it, made when said; None: nothing to
    say by then), by the command line once the command succeeded (`ending_lines`); from Python,
    nothing (the caller chose it)."""
    if _ENDINGS:
        _ENDINGS[-1][key] = line


@contextlib.contextmanager
def ending_lines() -> Iterator[Callable[[], list[str]]]:
    """Within the block (a command), `tell_at_end` lines are kept; what the block yields gives them,
    in the order first told, made printable."""
    kept: dict[str, Callable[[], str | None]] = {}
    _ENDINGS.append(kept)
    try:
        yield lambda: [printable(said) for line in kept.values() if (said := line()) is not None]
    finally:
        _ENDINGS.remove(kept)
