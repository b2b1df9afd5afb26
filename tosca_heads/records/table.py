"""The one table writer of stage 2: a `Table` (a title, a note, the header and rows of cell text, the
cells shown in bold, what follows it in markdown, and the frame it was made from) written as
markdown, TeX, CSV and parquet. A sweep's summary, a baselines folder's comparison, a suite's
tables and the per-task results.csv of a baseline or a sweep are each one `Table`: what their cells
say is theirs, how a table is laid out in a file is here alone.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tosca_foundation import atomic

if TYPE_CHECKING:  # pandas is loaded when a table is written, not to append rows on a worker
    import pandas as pd

FORMATS = ("md", "tex", "csv", "parquet")


TEX = {  # every character TeX reads as markup, as its text (one pass: what is put in is never read again)
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "†": r"$^\dagger$",
    "±": r"$\pm$",
}


def _tex_escaped(text: str) -> str:
    """`text` as TeX prints it: a store name, a weights label or a suite name holding `&`, `\\`,
    `{` ... is text in the table, never a column, a command or an `\\input`."""
    return "".join(TEX.get(char, char) for char in str(text))


def csv_text(header: Sequence[str] | None, rows: Sequence[Sequence[Any]]) -> str:
    """Rows as the csv module writes them (its default dialect: quoted where needed, lines ending
    in CRLF), under `header` (None: the rows alone, to append to a file that has one)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    if header is not None:
        writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


@dataclass
class Table:
    """A table as it is shown (`header`, `rows` of cell text, the (row, column) cells in `bold`) and
    as it is kept (`frame`: what the CSV and parquet files hold; None: the rows themselves, as the
    csv module writes them), with its `title` and `note`; `after`, markdown that follows the table
    in its .md file (a sweep's choice in words, a second table)."""

    title: str
    note: str
    header: Sequence[str]
    rows: Sequence[Sequence[Any]]
    frame: pd.DataFrame | None = field(default=None, repr=False)
    bold: set[tuple[int, int]] = field(default_factory=set)
    after: str = ""

    def _cells(self, escaped: Any, strong: str) -> list[list[str]]:
        """The rows' cells through `escaped`, a bold one as `strong` (a format with {} for the text)."""
        return [
            [strong.format(escaped(c)) if (i, j) in self.bold else escaped(c) for j, c in enumerate(row)]
            for i, row in enumerate(self.rows)
        ]

    def markdown(self, level: int = 1) -> str:
        """`# title`, the note, then the table (a heading of `level` #s), then `after`."""
        lines = [f"{'#' * level} {self.title}", "", self.note, "", "| " + " | ".join(self.header) + " |"]
        lines.append("|" + "|".join("---" for _ in self.header) + "|")
        lines += ["| " + " | ".join(row) + " |" for row in self._cells(str, "**{}**")]
        return "\n".join(lines) + "\n" + (f"\n{self.after}" if self.after else "")

    def tex(self) -> str:
        """A booktabs table captioned "title. note"."""
        spec = "l" + "r" * (len(self.header) - 1)
        lines = [r"\begin{table}", r"\centering", rf"\begin{{tabular}}{{{spec}}}", r"\toprule"]
        lines.append(" & ".join(_tex_escaped(h) for h in self.header) + r" \\")
        lines.append(r"\midrule")
        lines += [" & ".join(row) + r" \\" for row in self._cells(_tex_escaped, r"\textbf{{{}}}")]
        caption = _tex_escaped(f"{self.title}. {self.note}")
        lines += [r"\bottomrule", r"\end{tabular}", rf"\caption{{{caption}}}", r"\end{table}"]
        return "\n".join(lines) + "\n"

    def csv(self) -> str:
        """The frame as pandas writes it, or (no frame) the header and rows as the csv module does."""
        return csv_text(self.header, self.rows) if self.frame is None else self.frame.to_csv(index=False)

    def write(self, path: Path, formats: Sequence[str] = FORMATS) -> dict[str, Path]:
        """The table as `path` with each suffix of `formats` (atomically). Returns each file by its name."""
        written = {}
        for suffix in formats:
            target = Path(path).with_suffix(f".{suffix}")
            if suffix == "parquet":
                if self.frame is None:
                    raise ValueError(f"table {self.title!r} keeps no frame to write as parquet")
                with atomic.writing(target, "wb") as fh:
                    self.frame.to_parquet(fh, index=False)
            else:
                with atomic.writing(target, "w", newline="") as fh:  # the CSV's own line ends, kept
                    fh.write({"md": self.markdown, "tex": self.tex, "csv": self.csv}[suffix]())
            written[target.name] = target
        return written
