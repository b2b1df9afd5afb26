"""Figures a reviewer accepts (issue 35): each figure drawn from a hand-made result, its properties
read from the figure's matplotlib objects (texts, colour limits, line styles, markers, patches),
never from pixels. Which routers and baselines are references comes from their registries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tosca_heads.method.baseline_registry import BASELINES
from tosca_heads.records import plots
from tosca_heads.records.sweep import FLAG_COLUMNS
from tosca_heads.routers import ROUTERS, is_honest, reference_text, resolve_routers

COMPUTED = resolve_routers(None)  # the routers a run computes unless others are named

REFERENCES = [name for name in COMPUTED if not is_honest(name)]
HONEST = [name for name in COMPUTED if is_honest(name)]


def _lines(fig: Any) -> dict[str, Any]:
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    return dict(zip(labels, ax.get_lines(), strict=True))


def _assert_every_line_visible(lines: dict[str, Any]) -> None:
    """Own colour, own marker, hollow: a line drawn over another still shows its markers."""
    assert len({line.get_color() for line in lines.values()}) == len(lines)
    assert len({line.get_marker() for line in lines.values()}) == len(lines)
    assert all(line.get_markerfacecolor() == "none" for line in lines.values())


def test_accuracy_png_marks_references_and_curves_that_coincide(tmp_path: Path, captured: list[Any]) -> None:
    assert REFERENCES and len(HONEST) >= 2  # the registry has both kinds
    curves = {name: [0.9, 0.8 - 0.01 * i, 0.7 - 0.01 * i] for i, name in enumerate(ROUTERS)}
    twin, first = HONEST[1], HONEST[0]
    curves[twin] = list(curves[first])  # two honest routers that route alike
    plots.run_curves([0, 1, 2], curves, "t", tmp_path / "accuracy.png")
    lines = _lines(captured[0])
    assert len(lines) == len(ROUTERS)  # every curve given, the on-request routers too
    _assert_every_line_visible(lines)
    for label, line in lines.items():
        name = label.split(" ")[0].rstrip(",")
        if name in REFERENCES:
            assert line.get_linestyle() == "--" and f"(reference: {reference_text(name)})" in label
        else:
            assert line.get_linestyle() == "-" and "reference" not in label
    said = [label for label in lines if label.startswith(f"{twin},") or label.startswith(f"{twin} ")]
    assert said == [f"{twin}, identical to {first}"]
    twin_line, first_line = lines[said[0]], lines[first]
    assert twin_line.get_markersize() > first_line.get_markersize()  # drawn around it, not hidden
    assert sum("identical" in label for label in lines) == 1
    assert "test split" in captured[0].axes[0].get_title()


def test_comparison_png_marks_references_from_the_registries(tmp_path: Path, captured: list[Any]) -> None:
    rows = [
        {"method": "tosca", "routing": r, "A_t": json.dumps([0.9, 0.8]), "reference": reference_text(r)}
        for r in COMPUTED
    ]
    rows += [
        {
            "method": m,
            "routing": "none",
            "A_t": json.dumps([0.9, 0.75]),
            "reference": getattr(BASELINES[m], "reference", "") or "",
        }
        for m in ("simplecil", "ranpac", "joint_probe")
    ]
    plots.comparison(rows, "t", tmp_path / "comparison.png")
    lines = _lines(captured[0])
    _assert_every_line_visible(lines)
    for row, (label, line) in zip(rows, lines.items(), strict=True):
        reference = bool(row["reference"])
        assert (line.get_linestyle() == "--") == reference and ("reference" in label) == reference
    assert any("joint_probe (reference" in label for label in lines)  # the baseline registry says so
    # every honest TOSCA row equal to the first: each says so, none is hidden
    honest = [label for label in lines if label.startswith("tosca") and "reference" not in label]
    assert all("identical to tosca" in label for label in honest[1:])


def _points() -> pd.DataFrame:
    """A 2 r x 2 l1 x 2 lr sweep over 3 seeds; entropy around 50%, oracle around 90%."""
    rng = np.random.default_rng(0)
    rows = []
    for r in (8, 16):
        for l1 in (0.0, 0.0005):
            for lr in (0.01, 0.025):
                for seed in (0, 1, 2):
                    base = {c: 0 for c in FLAG_COLUMNS} | {"r": r, "l1": l1, "lr": lr, "seed": seed}
                    base |= {"flow": "tosca", "s": r, "init_cls": 2, "increment": 2}
                    shift = 0.01 * (r == 16) + 0.02 * (l1 > 0) + 0.005 * (lr == 0.025)
                    rows.append(
                        base
                        | {
                            "A_last_entropy": 0.5 + shift + 0.01 * rng.normal(),
                            "A_last_oracle": 0.9 + shift / 4 + 0.005 * rng.normal(),
                            "val_A_last_entropy": 0.5 + shift + 0.01 * rng.normal(),
                        }
                    )
    return pd.DataFrame(rows)


def test_heatmap_each_panel_its_own_scale_its_split_mean_std_and_the_chosen_point(
    tmp_path: Path, captured: list[Any]
) -> None:
    points = _points()
    # the sweep's record chose lr 0.01 at r=16, l1=0.0005 (a tie rule may pick a point that is not the best)
    chosen = {
        "split": "validation",
        "router": "entropy",
        "chosen": {"flags": {"r": 16, "l1": 0.0005, "lr": 0.01}},
    }
    plots.heatmaps(
        points,
        tmp_path / "heatmap_A_last.png",
        ["entropy", "oracle"],
        FLAG_COLUMNS,
        ["r", "l1", "lr"],
        "val_A_last_entropy",
        chosen,
    )
    fig = captured[0]
    panels = [ax for ax in fig.axes if ax.get_images()]
    assert len(panels) == 2 and len(fig.axes) == 4  # a colour bar per panel
    for ax in panels:  # each panel its own scale: its lowest cell to its highest (issue 49, point 5)
        image = ax.get_images()[0]
        shown = np.asarray(image.get_array())
        assert image.get_clim() == (shown.min(), shown.max())
        assert image.colorbar is not None and image.colorbar.ax in fig.axes
    entropy, oracle = (ax.get_images()[0].get_clim() for ax in panels)
    assert entropy[1] < oracle[0]  # a shared scale would have flattened both: their ranges do not meet
    for router, ax in zip(("entropy", "oracle"), panels, strict=True):
        texts = {(round(t.get_position()[0]), round(t.get_position()[1])): t.get_text() for t in ax.texts}
        assert len(texts) == 4
        # the chosen cell (r=16 is row 1, l1=0.0005 column 1) shows the chosen configuration
        seeds = points[(points.r == 16) & (points.l1 == 0.0005) & (points.lr == 0.01)][f"A_last_{router}"]
        assert texts[(1, 1)] == f"{100 * seeds.mean():.1f}\n± {100 * seeds.std():.1f}"
        # another cell: the configuration best on validation over lr, mean ± std over its seeds
        cell = points[(points.r == 8) & (points.l1 == 0.0)]
        best_lr = cell.groupby("lr")["val_A_last_entropy"].mean().idxmax()
        seeds = cell[cell.lr == best_lr][f"A_last_{router}"]
        assert texts[(0, 0)] == f"{100 * seeds.mean():.1f}\n± {100 * seeds.std():.1f}"
        marks = [p for p in ax.patches if p.get_label() == "chosen"]
        assert len(marks) == 1 and marks[0].get_xy() == (0.5, 0.5)
        assert ("reference" in ax.get_title()) == (not is_honest(router))
    title = fig._suptitle.get_text()
    assert "TEST split" in title and "chosen on the validation split" in title and "r=16, l1=0.0005" in title
    assert "mean ± std over 3 seeds" in title and "each panel on its own colour scale" in title


def test_heatmap_of_one_seed_says_there_is_no_std(tmp_path: Path, captured: list[Any]) -> None:
    points = _points()
    points = points[points.seed == 0]
    plots.heatmaps(points, tmp_path / "h.png", ["entropy"], FLAG_COLUMNS, ["r", "l1", "lr"], "", None)
    fig = captured[0]
    assert "one seed: no std" in fig._suptitle.get_text()
    assert all("±" not in t.get_text() for t in fig.axes[0].texts)
    assert not [p for p in fig.axes[0].patches if p.get_label() == "chosen"]


def test_confusion_png_prints_counts_beside_a_colour_bar(tmp_path: Path, captured: list[Any]) -> None:
    matrices = {"entropy": [[18, 2, 0], [3, 15, 2], [0, 1, 19]], "lda": [[20, 0, 0], [1, 19, 0], [0, 5, 35]]}
    plots.routing_confusion(matrices, "routing after task 2 (test)", tmp_path / "confusion.png")
    fig = captured[0]
    panels = [ax for ax in fig.axes if ax.get_images()]
    assert len(panels) == 2 and len(fig.axes) == 3
    bar = next(ax for ax in fig.axes if ax not in panels)
    assert "share" in bar.get_ylabel()
    for name, ax in zip(matrices, panels, strict=True):
        counts = {
            (round(t.get_position()[1]), round(t.get_position()[0])): int(t.get_text()) for t in ax.texts
        }
        assert counts == {(i, j): v for i, row in enumerate(matrices[name]) for j, v in enumerate(row)}
        assert ax.get_images()[0].get_clim() == (0, 1)


def test_curves_png_draws_both_loss_parts_per_task(tmp_path: Path, captured: list[Any]) -> None:
    curves = {
        0: {"ce": [2.0, 1.0, 0.5], "l1_term": [7.0, 7.5, 7.6], "lr": [0.1, 0.05, 0.0]},
        1: {"ce": [1.5, 0.9, 0.4], "l1_term": [6.0, 6.5, 6.9], "lr": [0.1, 0.05, 0.0]},
    }
    plots.training_curves(curves, "t", tmp_path / "curves.png")
    ce, l1, lr = ([x for x in ax.get_lines() if len(set(x.get_xdata())) > 1] for ax in captured[0].axes)
    assert [list(line.get_ydata()) for line in ce] == [curves[0]["ce"], curves[1]["ce"]]
    assert [list(line.get_ydata()) for line in l1] == [curves[0]["l1_term"], curves[1]["l1_term"]]
    assert list(l1[1].get_xdata()) == [3, 4, 5]  # task 1's epochs follow task 0's
    top, middle, _ = captured[0].axes
    assert "cross-entropy" in top.get_ylabel() and "L1 term" in middle.get_ylabel()
    assert "loss = cross-entropy + L1 term" in top.get_title()
    assert ce[0].get_color() == l1[0].get_color() == lr[0].get_color() != ce[1].get_color()


@pytest.mark.parametrize("n", [2, 25])
def test_best_curves_lines_stay_visible(tmp_path: Path, captured: list[Any], n: int) -> None:
    points = _points()
    points["A_t_entropy"] = json.dumps([0.9, 0.7])  # every configuration's curve alike
    config = [c for c in FLAG_COLUMNS if c != "seed"]
    summary = points.groupby(config).agg(seeds=("seed", "count")).reset_index()
    plots.best_curves(
        points, summary, "entropy", tmp_path / "b.png", FLAG_COLUMNS, ["r", "l1", "lr"], "validation", n
    )
    lines = _lines(captured[0])
    _assert_every_line_visible(lines)
    assert sum("identical to" in label for label in lines) == len(lines) - 1


def _beside(fig: Any, ax: Any) -> bool:
    """The axes' legend lies wholly right of the area its data is drawn in (drawn figure, pixels)."""
    legend = ax.get_legend().get_window_extent(fig.canvas.get_renderer())
    return legend.x0 >= ax.get_window_extent().x1


def test_legends_stand_beside_the_axes_never_over_a_line(tmp_path: Path, captured: list[Any]) -> None:
    curves = {name: [0.9, 0.8, 0.7] for name in COMPUTED}
    plots.run_curves([0, 1, 2], curves, "t", tmp_path / "accuracy.png")
    rows = [{"method": "simplecil", "routing": "none", "A_t": "[0.9, 0.8]", "reference": ""}]
    plots.comparison(rows, "t", tmp_path / "comparison.png")
    training = {t: {"ce": [1.0, 0.5], "l1_term": [2.0, 2.1], "lr": [0.1, 0.0]} for t in range(3)}
    plots.training_curves(training, "t", tmp_path / "curves.png")
    for fig in captured:
        ax = fig.axes[0]
        assert _beside(fig, ax), ax.get_title()


def test_best_curves_mark_the_chosen_configuration_even_below_the_top(
    tmp_path: Path, captured: list[Any]
) -> None:
    points = _points()
    config = [c for c in FLAG_COLUMNS if c != "seed"]
    summary = points.groupby(config).agg(seeds=("seed", "count")).reset_index()
    summary["chosen"] = False
    summary.loc[summary.index[-1], "chosen"] = True  # a tie rule may choose one below the top
    last = summary.iloc[-1]
    points["A_t_entropy"] = [json.dumps([0.9, 0.5 + 0.01 * i]) for i in range(len(points))]
    plots.best_curves(
        points, summary, "entropy", tmp_path / "b.png", FLAG_COLUMNS, ["r", "l1", "lr"], "validation", 3
    )
    fig = captured[0]
    lines = _lines(fig)
    assert len(lines) == 4  # the top three, and the chosen one
    chosen = [label for label in lines if label.endswith("(chosen on validation)")]
    assert chosen == [f"r={last.r}, l1={last.l1:g}, lr={last.lr:g} (chosen on validation)"]
    line = lines[chosen[0]]
    others = [other for label, other in lines.items() if label != chosen[0]]
    assert all(line.get_linewidth() > 2 * o.get_linewidth() for o in others)  # its own wide line
    assert all(line.get_zorder() < o.get_zorder() for o in others)  # under them: it hides none
    assert "wide line: the chosen one" in fig.axes[0].get_title()
    assert _beside(fig, fig.axes[0])
