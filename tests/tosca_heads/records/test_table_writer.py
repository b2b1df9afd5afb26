"""The one table writer (records.table): one `Table` (cells, bold marks, note, what follows it) is
written as markdown, TeX, CSV and parquet, each format laid out there alone."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tosca_heads.records.table import Table, csv_text


def _table(frame: pd.DataFrame | None = None) -> Table:
    rows = [["TOSCA (lda)", "73.66 ± 1.20"], ["TOSCA (batch) †", "70.10 [68.2, 72.0]"]]
    header = ["method", "A A_last"]
    return Table("Suite s", "Accuracies in %.", header, rows, frame, bold={(0, 1)}, after="More below.\n")


def test_one_table_is_written_in_every_format_with_its_bold_cells(tmp_path: Path) -> None:
    frame = pd.DataFrame({"method": ["lda", "batch"], "mean": [0.7366, 0.701]})
    files = _table(frame).write(tmp_path / "table.md")
    assert list(files) == ["table.md", "table.tex", "table.csv", "table.parquet"]
    md = (tmp_path / "table.md").read_text()
    assert md == (
        "# Suite s\n\nAccuracies in %.\n\n| method | A A_last |\n|---|---|\n"
        "| TOSCA (lda) | **73.66 ± 1.20** |\n| TOSCA (batch) † | 70.10 [68.2, 72.0] |\n\nMore below.\n"
    )
    tex = (tmp_path / "table.tex").read_text()
    assert r"method & A A\_last \\" in tex
    assert r"TOSCA (lda) & \textbf{73.66 $\pm$ 1.20} \\" in tex
    assert r"TOSCA (batch) $^\dagger$ & 70.10 [68.2, 72.0] \\" in tex
    assert r"\caption{Suite s. Accuracies in \%.}" in tex and "More below" not in tex
    assert (tmp_path / "table.csv").read_text() == frame.to_csv(index=False)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "table.parquet"), frame)


def test_a_table_without_a_frame_writes_its_rows_as_csv_and_no_parquet(tmp_path: Path) -> None:
    table = Table("results", "", ["task", "A_t"], [[0, "0.900000"], [1, "a, b"]])
    table.write(tmp_path / "results.csv", ("csv",))
    assert (tmp_path / "results.csv").read_bytes() == b'task,A_t\r\n0,0.900000\r\n1,"a, b"\r\n'
    assert csv_text(None, [[2, "x"]]) == "2,x\r\n"  # rows appended under a header already written
    with pytest.raises(ValueError, match="keeps no frame"):
        table.write(tmp_path / "results.parquet", ("parquet",))


def test_tex_prints_every_markup_character_as_text() -> None:
    """A store name, weights label or suite name holding TeX's markup characters stays text: the
    header keeps its column count, and no command (`\\input{...}`) reaches the file."""
    hostile = r"A&B \input{/etc/passwd} 50% $x$ #1 ~y^2 a_b"
    tex = Table(hostile, "n", [f"{hostile} A_last", "x"], [[hostile, "1.0"]]).tex()
    header = tex.splitlines()[4]
    assert header.count("&") - header.count(r"\&") == 1  # two columns, as declared (`lr`)
    assert r"\input{" not in tex and r"\textbackslash{}input\{/etc/passwd\}" in tex
    for raw in ("50% ", "$x$", "#1", "~y", "^2", "a_b"):
        assert raw not in tex.replace(r"\%", "").replace(r"\$", "").replace(r"\#", "").replace(r"\_", "")
    assert r"A\&B" in tex and r"50\% \$x\$ \#1 \textasciitilde{}y\textasciicircum{}2 a\_b" in tex
