"""The one table writer of stage 2: a `Table` (a title, a note, the header and rows as shown, and
the frame they were made from) written as markdown, TeX, CSV and parquet. A sweep's summary, a
baselines folder's comparison and a suite's tables are each one `Table`; what their cells say is
theirs, how a table is laid out in a file is here alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from featcache.foundation import atomic

if TYPE_CHECKING:  # pandas is loaded when a table is written, not to append rows on a worker
    import pandas as pd

FORMATS = ("md", "tex", "csv", "parquet")


def _tex_escaped(text: str) -> str:
    return text.replace("_", r"\_").replace("%", r"\%").replace("†", r"$^\dagger$").replace("±", r"$\pm$")


@dataclass
class Table:
    """A table as it is shown (`header`, `rows` of cell text) and as it is kept (`frame`: what the
    CSV and parquet files hold; None when the table is shown only), with its `title` and `note`."""

    title: str
    note: str
    header: Sequence[str]
    rows: Sequence[Sequence[str]]
    frame: pd.DataFrame | None = field(default=None, repr=False)

    def markdown(self, level: int = 1) -> str:
        """`# title`, the note, then the table (a heading of `level` #s)."""
        lines = [
            f"{'#' * level} {self.title}",
            "",
            self.note,
            "",
            "| " + " | ".join(self.header) + " |",
            "|" + "|".join("---" for _ in self.header) + "|",
        ]
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        return "\n".join(lines) + "\n"

    def tex(self) -> str:
        """A booktabs table captioned "title. note" (cells already in \\textbf are kept as they are)."""
        spec = "l" + "r" * (len(self.header) - 1)
        lines = [r"\begin{table}", r"\centering", rf"\begin{{tabular}}{{{spec}}}", r"\toprule"]
        lines.append(" & ".join(_tex_escaped(h) for h in self.header) + r" \\")
        lines.append(r"\midrule")
        lines += [
            " & ".join(c if c.startswith("\\textbf") else _tex_escaped(c) for c in row) + r" \\"
            for row in self.rows
        ]
        caption = _tex_escaped(f"{self.title}. {self.note}")
        lines += [r"\bottomrule", r"\end{tabular}", rf"\caption{{{caption}}}", r"\end{table}"]
        return "\n".join(lines) + "\n"

    def csv(self) -> str:
        if self.frame is None:
            raise ValueError(f"table {self.title!r} keeps no frame to write as CSV")
        return self.frame.to_csv(index=False)

    def write(
        self, path: Path, formats: Sequence[str] = FORMATS, markdown: str | None = None
    ) -> dict[str, Path]:
        """The table as `path` with each suffix of `formats` (atomically); `markdown` replaces the
        .md text (a table with more below it). Returns each file by its name."""
        written = {}
        for suffix in formats:
            target = Path(path).with_suffix(f".{suffix}")
            if suffix == "parquet":
                if self.frame is None:
                    raise ValueError(f"table {self.title!r} keeps no frame to write as parquet")
                with atomic.writing(target, "wb") as fh:
                    self.frame.to_parquet(fh, index=False)
            else:
                text = {"md": lambda: markdown or self.markdown(), "tex": self.tex, "csv": self.csv}[suffix]()
                atomic.write_text(target, text)
            written[target.name] = target
        return written
