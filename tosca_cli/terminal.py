"""What tosca shows on a terminal, and the one way it is shown: `say` (a line of data), `note` (a
labelled side line on stderr: warning, note, error, ...), `table`, `key_values`, `heading` and
`as_json`. Lines from below the command line (`tosca_foundation.text.tell`) and Python warnings
come through `note` too (`speak_here`). Data (paths, class names, store attrs) always as inert text,
never read as markup, control characters escaped; errors as one line on stderr. What a stream cannot
encode (a class name's `é` under an ASCII locale, a byte of a file name that is not UTF-8) is shown
as its Python escape (`\\xe9`, `\\xff`) on every command's stdout and stderr (`plainly`), and JSON
is written with `\\u` escapes there, so it stays JSON. Every table fits the terminal it is printed
on ($COLUMNS respected, 80 at the least: `widths`); off a terminal with no $COLUMNS (pipes, logs,
CI) nothing wraps: a table takes its natural width, so paths, tables and their words stay whole."""

from __future__ import annotations

import codecs
import contextlib
import io
import json
import sys
from collections.abc import Iterator
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from tosca_cli import widths
from tosca_foundation.text import printable

_WIDTH = None if sys.stdout.isatty() else 1_000  # a table is as wide as its cells, never padded to this
out = Console(soft_wrap=True, width=_WIDTH, emoji=False)  # ":-1:" in a name stays text
err = Console(stderr=True, soft_wrap=True, width=_WIDTH, emoji=False)


RULE_WIDTH = 100  # a heading's rule off a terminal (the consoles are as wide as a table needs there)


def heading(title: str) -> None:
    """A step's title on a rule: the terminal's width ($COLUMNS), or RULE_WIDTH columns in a log."""
    width = widths.columns_here(out.file) or (None if _WIDTH is None else RULE_WIDTH)
    out.print(Rule(f"[bold]{escape(title)}"), width=width)


ESCAPE = "tosca.escape"  # the codec error handler `plainly` sets on stdout and stderr


def _escaped(error: UnicodeError) -> tuple[str, int]:
    """What a stream's encoding lacks, as Python escapes: a character as `\\xe9` or `\\u65e5`, a byte
    of a name that is not UTF-8 (held as a lone surrogate, PEP 383) as the byte, `\\xff`."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    shown = [
        f"\\x{ord(c) - 0xDC00:02x}"
        if 0xDC80 <= ord(c) <= 0xDCFF
        else c.encode("ascii", "backslashreplace").decode()
        for c in error.object[error.start : error.end]
    ]
    return "".join(shown), error.end


codecs.register_error(ESCAPE, _escaped)


@contextlib.contextmanager
def plainly() -> Iterator[None]:
    """Within the block (a command), stdout and stderr never fail on text they cannot encode (an ASCII
    locale, `LC_ALL=C`): it is shown escaped (`_escaped`) instead of ending in UnicodeEncodeError."""
    changed = []
    for stream in (sys.stdout, sys.stderr):
        errors = getattr(stream, "errors", None)
        with contextlib.suppress(AttributeError, ValueError, io.UnsupportedOperation):
            stream.reconfigure(errors=ESCAPE)  # type: ignore[union-attr]
            changed.append((stream, errors))
    try:
        yield
    finally:
        for stream, errors in changed:
            with contextlib.suppress(AttributeError, ValueError, io.UnsupportedOperation):
                stream.reconfigure(errors=errors)


def _encodes(text: str, console: Console) -> bool:
    """Whether `console`'s stream can write `text` as it is."""
    try:
        text.encode(getattr(console.file, "encoding", None) or "utf-8")
    except (UnicodeEncodeError, LookupError):
        return False
    return True


@contextlib.contextmanager
def answers_only() -> Iterator[None]:
    """Within the block stdout carries tosca's answers alone (`out`): whatever else prints there (a
    plug-in, a library) goes to stderr, so `--json` stays JSON."""
    pinned = out.file
    out.file = sys.stdout
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        out.file = pinned if pinned is not sys.stdout else None  # type: ignore[assignment]


def error_line(message: str) -> None:
    """`error: <message>` on one line of stderr, whatever paths or names it quotes shown inert."""
    note("error", " ".join(printable(message).split()))


def say(line: Any, console: Console = out, style: str = "") -> None:
    """One line of data: never markup, control characters escaped."""
    console.print(printable(line), markup=False, highlight=False, style=style)


def footnote(line: Any, console: Console = out) -> None:
    """A line of words under a table (what its brackets are, a knob a method chose): wrapped, at
    spaces only, to the width the table fits ($COLUMNS, or the terminal's: `widths.columns_here`),
    its later lines indented two spaces; whole where nothing sets a width (pipes, logs)."""
    import textwrap

    text = printable(line)
    limit = widths.columns_here(console.file)
    if limit is None or len(text) <= limit:
        return say(text, console)
    for part in textwrap.wrap(
        text, limit, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False
    ):
        say(part, console)


STYLES = {"error": "bold red", "FAIL": "red"}  # every other label: yellow
WORDS = ("warning", "note", "error")  # said as "warning: ..."; a report's marks as "FAIL train: ..."


def note(label: str, line: Any) -> None:
    """`label: line` on stderr, the label styled and the line inert: every side line (`warning`,
    `note`, `error`, and a report's `fixed`, `missing`, `FAIL`) is said this way."""
    style = STYLES.get(label, "yellow")
    mark = f"{label}:" if label in WORDS else label
    err.print(f"[{style}]{escape(mark)}[/] {escape(printable(line))}", highlight=False, soft_wrap=True)


@contextlib.contextmanager
def speaking() -> Iterator[None]:
    """Within the block (a command), lines told from below the command line (`text.tell`) and
    Python warnings (a library's, the API's ProtocolWarning, the compiled step's fallback) are said
    as `note`s: one line each, never a warning's file and line number."""
    import warnings

    from tosca_foundation.text import telling

    def shown(message: Any, category: type[Warning], *_: Any, **__: Any) -> None:
        note("warning", " ".join(str(message).split()))

    with (
        telling(lambda line, label: note(label, line) if label else say(line, err)),
        warnings.catch_warnings(),
    ):
        warnings.showwarning = shown
        yield


def cells(*values: Any) -> list[Text]:
    return [v if isinstance(v, Text) else Text(printable(v)) for v in values]


def table(
    title: str | None,
    columns: list[str],
    rows: list[list[Any]],
    left: tuple[str, ...] = (),
    keys: int = 1,
) -> None:
    """An aligned table of data cells; the `left` columns left-aligned, the rest right. Fitted to the
    terminal's width (`widths`): intervals folded under their figure, then the columns dealt into
    several tables, each repeating the `keys` first columns (what names a row), a text column (the
    `left` ones: a description, a path) counted at the width it wraps to."""
    limit = widths.columns_here(out.file)
    # a short row (an unreadable store: its name and why) leaves the rest blank
    texts = [cells(*row) + [Text("")] * (len(columns) - len(row)) for row in rows]
    if limit is not None and _natural(columns, texts) > limit:
        texts = [[widths.folded(cell) for cell in row] for row in texts]
    groups = [list(range(len(columns)))]
    if limit is not None and _natural(columns, texts) > limit:
        natural = [
            widths.widest([Text(column), *(row[i] for row in texts)]) for i, column in enumerate(columns)
        ]
        dealt = [widths.wrapped(w, limit) if columns[i] in left else w for i, w in enumerate(natural)]
        groups = widths.parts(dealt, keys, limit)
    for number, group in enumerate(groups):
        named = printable(title) if title and not number else None
        if len(groups) > 1:  # the title once, on the first
            named = (
                f"{named} ({number + 1} of {len(groups)})"
                if named
                else f"(continued, {number + 1} of {len(groups)})"
            )
        shown = Table(title=Text(named) if named else None)
        for i in group:
            shown.add_column(columns[i], justify="left" if columns[i] in left else "right", overflow="fold")
        for row in texts:
            shown.add_row(*(row[i] for i in group))
        out.print(shown, width=limit, soft_wrap=limit is None)  # fitted: its title wrapped too


def _natural(columns: list[str], texts: list[list[Text]]) -> int:
    """A table's natural width: its widest cell (or head) per column, boxed."""
    return widths.table_width(
        [widths.widest([Text(column), *(row[i] for row in texts)]) for i, column in enumerate(columns)]
    )


def key_values(rows: list[tuple[str, Any, bool]]) -> None:
    """Key and value per line; a `warn` value in yellow; a value wider than the terminal wrapped."""
    shown = Table(show_header=False, box=None, pad_edge=False)
    shown.add_column()
    shown.add_column(overflow="fold")
    for key, value, warn in rows:
        shown.add_row(f"[bold]{key}[/]", Text(printable(value), style="yellow" if warn else ""))
    out.print(shown, highlight=False, width=widths.columns_here(out.file))


def as_json(data: Any) -> None:
    """`data` as JSON on stdout (a str is JSON text already: a frame's `to_json`); with `\\u` escapes
    where stdout cannot write a character of it (an ASCII locale, a name that is not UTF-8)."""
    text = data if isinstance(data, str) else json.dumps(data, default=str, ensure_ascii=False)
    out.print_json(text, ensure_ascii=not _encodes(text, out))


def pct(value: float | None) -> str:
    """A fraction as a percentage with two decimals; `–` for none."""
    return "–" if value is None else f"{100 * value:.2f}"
