"""The demo's comparison table as a list of cells, read two ways: from the README's block under
"### What the demo prints" (plain, columns two or more spaces apart) and from what `tosca demo`
printed (rich's boxed table after the "5/5 comparison" heading). Both give a `QuotedTable`, so a
test can hold the one to the other cell by cell."""

from __future__ import annotations

import re
from dataclasses import dataclass

from support import ROOT

README_HEADING = "### What the demo prints"
COMPARISON_HEADING = "5/5 comparison"
GAP = re.compile(r"\s{2,}")  # between two columns of the README's block; a cell holds single spaces


@dataclass(frozen=True)
class QuotedTable:
    """A comparison table as printed: its title, column heads, rows of cells (a row short of the
    heads, its reference left blank, is padded with "") and the lines said under it."""

    title: str
    columns: list[str]
    rows: list[list[str]]
    notes: list[str]

    def column(self, name: str) -> list[str]:
        return [row[self.columns.index(name)] for row in self.rows]

    def without(self, *names: str) -> list[list[str]]:
        """The rows without the named columns (the seconds: they time the machine, not the method)."""
        keep = [i for i, column in enumerate(self.columns) if column not in names]
        return [[row[i] for i in keep] for row in self.rows]


def readme_block() -> list[str]:
    """The lines of the README's demo block: the first code block under its heading."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(README_HEADING)
    block = re.search(r"```\n(.*?)```", text[start:], flags=re.S)
    assert block is not None, f"README.md has no code block under {README_HEADING!r}"
    return block.group(1).splitlines()


def readme_table() -> QuotedTable:
    """The README's demo table: title, heads, rows, then the lines under it (the first line that
    does not split into a row's cells and every line after it)."""
    lines = readme_block()
    columns = GAP.split(lines[1].strip())
    rows, notes = [], []
    for line in lines[2:]:
        cells = GAP.split(line.strip())
        if notes or not len(columns) - 1 <= len(cells) <= len(columns):
            notes.append(line)
            continue
        rows.append(cells + [""] * (len(columns) - len(cells)))
    return QuotedTable(lines[0], columns, rows, notes)


def printed_table(output: str) -> QuotedTable:
    """The comparison table `tosca demo` printed (a boxed rich table, one line per row: the output
    is read at a width that fits it), and the lines under it up to the plots'."""
    lines = output.splitlines()
    at = next(i for i, line in enumerate(lines) if COMPARISON_HEADING in line)
    top = next(i for i in range(at, len(lines)) if lines[i].startswith("┏"))
    bottom = next(i for i in range(top, len(lines)) if lines[i].startswith("└"))
    end = next(i for i in range(bottom, len(lines)) if lines[i].startswith("plots:"))

    def cells(line: str, bar: str) -> list[str]:
        return [cell.strip() for cell in line.strip().strip(bar).split(bar)]

    head = next(line for line in lines[top:bottom] if line.startswith("┃"))
    rows = [cells(line, "│") for line in lines[top:bottom] if line.startswith("│")]
    return QuotedTable(lines[top - 1].strip(), cells(head, "┃"), rows, lines[bottom + 1 : end])
