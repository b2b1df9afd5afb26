"""How wide tosca's tables may be, and how one that is wider is made to fit: the one place every
console table (`terminal.table`) and every row printed as it comes (`Rows`: fit's tasks) is fitted.

The width is $COLUMNS where it is set (a terminal's, or one given to a pipe or a log), else the
terminal's when stdout is one; never under `NARROWEST` (80). Off a terminal with no $COLUMNS a
table keeps its natural width: a log holds it whole. A table wider than its width is fitted in
steps, each only when the one before is not enough: its intervals are folded under their figure
(`62.50 [50.3, 74.0]` becomes two lines of one cell), then its columns are dealt into as many
tables as it takes, each repeating the row's key columns (the router, a sweep point's flags), and
what is left too wide (a path, a description) is wrapped within its cell, never cut. The files
(`.md`, `.csv`, `.tex`) and `--json` always hold the whole table, one row a line."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from rich.text import Text

NARROWEST = 80
_BORDER = 3  # a column's share of a boxed table: its rule and one space of padding each side
_INTERVAL = re.compile(r"^(?P<bold>\*\*)?(?P<figure>.*\S) (?P<interval>\[[^\[\]]*\])(?P=bold)?$")


def columns_here(stream: object | None = None) -> int | None:
    """The columns a table may take: $COLUMNS where set, else the terminal's when `stream` (stdout)
    is one; at least NARROWEST. None: no terminal and no $COLUMNS (a table keeps its width)."""
    given = os.environ.get("COLUMNS", "").strip()
    if given.isdigit() and int(given) > 0:
        return max(NARROWEST, int(given))
    stream = sys.stdout if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    if isatty is not None and isatty():
        import shutil

        return max(NARROWEST, shutil.get_terminal_size().columns)
    return None


def folded(cell: Text) -> Text:
    """A figure's cell with its interval under it (`62.50` over `[50.3, 74.0]`; a cell marked bold
    as markdown marks it, `**62.50 [50.3, 74.0]**`, keeps the mark on its figure); any other as it
    is."""
    found = _INTERVAL.match(cell.plain)
    if found is None:
        return cell
    bold = found["bold"] or ""
    return Text(f"{bold}{found['figure']}{bold}\n{found['interval']}", style=cell.style)


def widest(cells: Sequence[Text]) -> int:
    """The widest line of these cells, in terminal columns."""
    return max((cell_len(line) for cell in cells for line in cell.plain.split("\n")), default=0)


def wrapped(natural: int, limit: int) -> int:
    """The width a text column (a description, a path) is dealt at: a third of the terminal at most
    (20 columns at the least), its words wrapped within it; a figure's column is never wrapped."""
    return min(natural, max(limit // 3, 20))


def table_width(widths: Sequence[int]) -> int:
    """A boxed table's width in columns, its columns' natural widths given."""
    return sum(widths) + _BORDER * len(widths) + 1


def parts(widths: Sequence[int], keys: int, limit: int) -> list[list[int]]:
    """The columns (their indices) dealt into tables of at most `limit` columns each, in order,
    each starting with the `keys` first (a table of one column more than its keys may be wider:
    its cells are then wrapped)."""
    keys = min(max(keys, 1), len(widths))
    head = list(range(keys))
    dealt: list[list[int]] = []
    current = list(head)
    for index in range(keys, len(widths)):
        if len(current) > keys and table_width([widths[i] for i in [*current, index]]) > limit:
            dealt.append(current)
            current = list(head)
        current.append(index)
    dealt.append(current)
    return dealt


@dataclass(frozen=True)
class Rows:
    """A table whose rows come one at a time (fit's tasks as they end), in fixed-width right-aligned
    columns (`widths`), one space apart: a row is one line where it fits `limit`, else as many lines
    as it takes, each further line indented under the row's `keys` first columns; the header is
    folded the same way, so every column stays under its head."""

    heads: Sequence[str]
    widths: Sequence[int]
    keys: int = 1
    limit: int | None = None

    def lines(self, cells: Sequence[str]) -> list[str]:
        """A row's (or the header's) lines."""
        keys = min(self.keys, len(cells))
        indent = sum(self.widths[:keys]) + keys
        lines: list[str] = []
        line = " ".join(c.rjust(w) for c, w in zip(cells[:keys], self.widths[:keys], strict=True))
        for cell, width in zip(cells[keys:], self.widths[keys:], strict=True):
            if self.limit is not None and cell_len(line) + 1 + width > self.limit and line.strip():
                lines.append(line)
                line = " " * (indent - 1)
            line += " " + cell.rjust(width)
        return [*lines, line]

    def header(self) -> list[str]:
        return self.lines(self.heads)
