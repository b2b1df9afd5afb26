"""The figures and tables say what they show (issue 29): a_t.png ticks at whole tasks, a_last.png's
legend beside its bars, comparison.png one colour per line, one seed said as one seed, a skipped
image named once under its split, fit prints where its plot is."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd

from tosca_foundation.text import image_name
from tosca_heads.records import plots
from tosca_heads.studies.suite import tables


def _spec(*names: str) -> Any:
    return SimpleNamespace(stores=[SimpleNamespace(name=n, label=n) for n in names], seeds=[0])


def test_a_t_ticks_at_whole_tasks(tmp_path: Path, captured: list[Any]) -> None:
    curves = {"A": {"TOSCA (entropy)": [[0.9, 0.8]], "SimpleCIL": [[0.85, 0.7]]}}
    plots.suite_curves(_spec("A").stores, curves, tmp_path / "a_t.png")
    ax = captured[0].axes[0]
    lo, hi = ax.get_xlim()
    shown = [t for t in ax.get_xticks() if lo <= t <= hi]
    assert shown and all(float(t).is_integer() for t in shown)


def test_a_last_legend_covers_no_bar(tmp_path: Path, captured: list[Any]) -> None:
    labels = [f"method {i}" for i in range(6)]
    frame = pd.DataFrame(
        [
            {"metric": "A_last", "label": label, "store": store, "mean": 0.9, "std": 0.01}
            for label in labels
            for store in ("A", "B")
        ]
    )
    plots.suite_a_last(_spec("A", "B").stores, frame, tmp_path / "a_last.png")
    fig = captured[0]
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    legend = ax.get_legend().get_window_extent(renderer)
    bars = [patch.get_window_extent(renderer) for patch in ax.patches]
    assert bars and not any(legend.overlaps(bar) for bar in bars)
    assert legend.x1 <= fig.bbox.x1 + 1  # inside the saved image


def test_comparison_draws_every_method_in_its_own_colour(tmp_path: Path, captured: list[Any]) -> None:
    rows = [
        {"method": "tosca", "routing": r, "A_t": "[0.9, 0.8]"}
        for r in ("entropy", "lda", "ncm", "energy", "fusion", "batch", "batch_shuffled", "oracle")
    ]
    rows += [
        {"method": m, "routing": "none", "A_t": "[0.9, 0.7]"} for m in ("simplecil", "ranpac", "joint_probe")
    ]
    plots.comparison(rows, "t", tmp_path / "comparison.png")
    colours = [line.get_color() for line in captured[0].axes[0].get_lines()]
    assert len(colours) == 11 and len(set(colours)) == 11


def test_one_seed_is_said_as_one_seed() -> None:
    assert tables.seeds_said([3]).startswith("One seed (3): no spread over seeds")
    assert "over seeds 3" not in tables.seeds_said([3])
    assert tables.seeds_said([0, 1, 2]) == "Mean ± std over seeds 0, 1, 2"


def test_a_skipped_image_is_named_once_under_its_split() -> None:
    assert image_name("train", "train/cat/x.jpg") == "train/cat/x.jpg"
    assert image_name("test", "cat/x.jpg") == "test/cat/x.jpg"


def test_fit_prints_where_its_plot_is_and_what_its_columns_are(tmp_path: Path) -> None:
    from support.stores import synthetic_store
    from typer.testing import CliRunner

    from cli import app

    store = synthetic_store(tmp_path / "s.zarr", classes=4)
    run = tmp_path / "run"
    args = ["fit", "--store", str(store.path), "--run", str(run), "--epochs", "1", "--batch-size", "8"]
    result = CliRunner().invoke(app, [*args, "--init-cls", "2", "--increment", "2", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert f"plot {run / 'accuracy.png'}" in result.output and (run / "accuracy.png").is_file()
    assert "columns: over the task's last epoch, ce = mean cross-entropy" in result.output
    assert "loss = ce + l1 term" in result.output
