"""The README's demo table is what `tosca demo` prints (issue 57, point 13): every cell but the
seconds (they time a machine, not a method), intervals included, and the lines under it.

Fast tests read the README's block alone: it parses, its heads, references and
the lines under it are the ones the code writes, every figure lies in its interval, and each exact
interval (A_last, routing acc) is the exact binomial one of its figure over the split's images. A
`realdata` one (CI: `make test-realdata`) runs the demo on the real EuroSAT store and compares the
block with the table printed, cell by cell: any change of a figure, an interval, a head or a row
fails it until the README is pasted anew. The paragraph that reads the table quotes its figures
as the table has them."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from support import ROOT
from support.demo_table import printed_table, readme_table

from tosca_cli.views import intervals_line
from tosca_foundation.dataset_names import DATASETS
from tosca_heads.method.baseline_registry import default_baselines
from tosca_heads.method.metrics import EXACT, Metric, columns_of, figures, header_of
from tosca_heads.method.protocol import split_name
from tosca_heads.method.uncertainty import clopper_pearson
from tosca_heads.records.baselines_folder import baseline_reference
from tosca_heads.requests.command_requests import DEMO_PER_CLASS
from tosca_heads.routers import reference_text

FIGURE = re.compile(r"^(?P<value>-?\d+\.\d\d) \[(?P<low>-?\d+\.\d), (?P<high>-?\d+\.\d)\]$")
TEST_IMAGES = 3000  # EuroSAT's 10 classes x the demo's 300 test images each
UNTIMED = "seconds"


def test_the_readme_demo_table_holds_together() -> None:
    quoted = readme_table()
    split = DATASETS["eurosat"].split
    named = split_name(split.init_cls, split.increment)
    assert quoted.title == f"eurosat / effnet_lite0, {DEMO_PER_CLASS} images/class, {named}, test split"
    assert quoted.columns == [
        "method",
        "routing",
        *map(header_of, columns_of(False)),
        "parameters",
        UNTIMED,
        "reference",
    ]
    methods = quoted.column("method")
    assert methods[: methods.index(default_baselines()[0])] == ["tosca"] * 8
    assert methods[8:] == list(default_baselines())
    for method, routing, reference in zip(
        methods, quoted.column("routing"), quoted.column("reference"), strict=True
    ):
        said = reference_text(routing) if method == "tosca" else baseline_reference(method)
        assert reference == said, (method, routing)
    assert len(set(quoted.column("parameters")[:8])) == 1  # one TOSCA run, eight ways of routing it
    assert quoted.notes[0] == intervals_line([{"intervals": {"A_last": (0, 1)}, "images": TEST_IMAGES}])


@pytest.mark.parametrize("metric", figures(), ids=lambda m: m.name)
def test_each_readme_demo_figure_lies_in_its_interval(metric: Metric) -> None:
    """Each figure in its bracket; an exact one's bracket is the Clopper-Pearson interval of the
    right answers the figure says, over the split's 3,000 images (bootstrap ones are the run's own,
    held by the realdata test below)."""
    quoted = readme_table()
    for method, cell in zip(quoted.column("method"), quoted.column(header_of(metric)), strict=True):
        if cell == "–":  # a baseline routes nothing
            assert method != "tosca" and metric.name == "routing_accuracy", method
            continue
        found = FIGURE.match(cell)
        assert found is not None, (method, cell)
        value, low, high = (float(found[k]) for k in ("value", "low", "high"))
        assert low - 0.05 <= value <= high + 0.05, (method, cell)
        if metric.interval == EXACT:
            right = round(value / 100 * TEST_IMAGES)
            assert abs(100 * right / TEST_IMAGES - value) < 0.005, (method, cell)
            exact = clopper_pearson(right, TEST_IMAGES)
            assert (low, high) == tuple(round(100 * bound, 1) for bound in exact), (method, cell)


# The joint probe (a reference) is full-batch L-BFGS in float32: its matrix products round
# differently on AVX2 and AVX-512 machines, and its A_bar and forgetting end a test image apart:
# the README's row was printed on an AMD EPYC, an Intel Xeon prints A_bar 94.60 and forgetting 4.04
# (docs/demo.md, "The same figures elsewhere"). Every other row is held to the digit.
ACROSS_CPUS = {"joint_probe"}
NUMBER = re.compile(r"-?\d[\d,]*\.?\d*")


@pytest.mark.realdata
def test_the_readme_demo_table_is_what_the_demo_prints(
    demo_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole demo on the real store (about 70 s once the store exists), its comparison table
    read as printed at a width that keeps each row on one line."""
    from typer.testing import CliRunner

    from cli import app

    monkeypatch.setenv("COLUMNS", "400")
    cache = tmp_path / "cache"
    shutil.copytree(demo_cache, cache)  # the demo's files go beside its store: each run its own
    args = ["--progress", "off", "demo", "--cache-dir", str(cache), "--runs-dir", str(tmp_path / "runs")]
    result = CliRunner().invoke(app, [*args, "--device", "cpu"])
    assert result.exit_code == 0, result.output
    printed, quoted = printed_table(result.output), readme_table()
    assert (quoted.title, quoted.columns) == (printed.title, printed.columns)
    assert len(quoted.rows) == len(printed.rows)
    for q, p in zip(quoted.without(UNTIMED), printed.without(UNTIMED), strict=True):
        if q[0] not in ACROSS_CPUS:
            assert q == p
            continue
        # the same words, each figure within a step of the README's
        assert [NUMBER.sub("#", c) for c in q] == [NUMBER.sub("#", c) for c in p], (q, p)
        said = [float(x.replace(",", "")) for x in NUMBER.findall(" ".join(q))]
        found = [float(x.replace(",", "")) for x in NUMBER.findall(" ".join(p))]
        assert len(said) == len(found), (q, p)
        assert all(abs(a - b) <= 0.1 for a, b in zip(said, found, strict=True)), (q, p)
    assert quoted.notes == printed.notes


def test_the_readme_reading_of_the_demo_table_quotes_its_figures() -> None:
    """The paragraph under the table quotes A_last figures and the points between them: each as
    the table has it (oracle, lda and RanPAC rounded to one decimal; the points entropy loses to
    oracle, and those lda wins back, rounded to whole points)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    said = " ".join(text[text.index("With this small CNN") :].split("\n\n")[0].split())
    quoted = readme_table()
    a_last = {
        (method, routing): float(cell.split()[0])
        for method, routing, cell in zip(
            quoted.column("method"), quoted.column("routing"), quoted.column("A_last"), strict=True
        )
    }
    oracle, entropy = a_last["tosca", "oracle"], a_last["tosca", "entropy"]
    lda, ranpac = a_last["tosca", "lda"], a_last["ranpac", "none"]
    assert f"(`oracle` {oracle:.1f}%)" in said
    assert f"recovers {round(lda - entropy)} of the {round(oracle - entropy)} points ({lda:.1f}%)" in said
    assert f"level with RanPAC ({ranpac:.1f}%)" in said
