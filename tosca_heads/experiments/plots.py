"""Every figure tosca draws, through one set-up: matplotlib's file-only backend, one figure per call,
saved whole or not at all (featcache.foundation.atomic), closed after.

- `run_curves`: A_t per router of one run (accuracy.png);
- `comparison`: A_t per method of a comparison (comparison.png);
- `heatmaps`, `best_curves`: a sweep's A_last over r x l1 and the A_t of its best points;
- `routing_confusion`: per router, where each task's images are routed (confusion.png).
- `training_curves`: loss and learning rate per epoch of one run, task after task (curves.png).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from featcache.foundation import atomic


@contextlib.contextmanager
def drawing(path: Path, dpi: int, **subplots: Any) -> Iterator[tuple[Any, Any]]:
    """(figure, axes) of `plt.subplots(**subplots)`; laid out, saved to `path` and closed at the end."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(**subplots)
    try:
        yield fig, axes
        fig.tight_layout()
        atomic.save_figure(fig, path, dpi=dpi)
    finally:
        plt.close(fig)


def _task_axis(ax: Any, ylabel: str) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("task")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)


def run_curves(tasks: Sequence[int], curves: dict[str, list[float]], title: str, path: Path) -> None:
    """A_t (fractions) per router after each task."""
    with drawing(path, 120, figsize=(6, 4)) as (_, ax):
        for router, curve in curves.items():
            ax.plot(list(tasks), [100 * a for a in curve], marker="o", label=router)
        _task_axis(ax, "accuracy on all seen classes (%)")
        ax.set_title(title)
        ax.legend(title="routing")


def distinct_colours(n: int) -> list[str]:
    """n colours, no two alike: matplotlib's ten, then tab20's and tab20b's (up to 50 lines)."""
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    pool = [to_hex(c) for name in ("tab10", "tab20", "tab20b", "tab20c") for c in colormaps[name].colors]
    unique = list(dict.fromkeys(pool))
    return [unique[i % len(unique)] for i in range(n)]


def comparison(rows: Sequence[dict[str, Any]], title: str, path: Path) -> None:
    """A_t per method (rows with method, routing, A_t as JSON); TOSCA solid, baselines dashed."""
    colours = distinct_colours(len(rows))
    with drawing(path, 120, figsize=(6.5, 4)) as (_, ax):
        for row, colour in zip(rows, colours, strict=True):
            curve = json.loads(row["A_t"])
            label = row["method"] if row["routing"] == "none" else f"{row['method']} ({row['routing']})"
            style = "-" if row["method"] == "tosca" else "--"
            ax.plot(
                range(len(curve)),
                [100 * a for a in curve],
                style,
                color=colour,
                marker="o",
                markersize=3,
                label=label,
            )
        _task_axis(ax, "accuracy on all seen classes (%)")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)


def heatmaps(
    points: Any,
    path: Path,
    shown: Sequence[str],
    flag_columns: Sequence[str],
    varying: Sequence[str],
    pick: str = "",
) -> None:
    """Test A_last over r x l1, one panel per shown router (mean over seeds). With other flags
    swept, each cell shows the configuration that is best by the `pick` column (the ranking
    router's validation A_last where the sweep has one), never the best by the test figure shown."""
    rs, l1s = sorted(points["r"].unique()), sorted(points["l1"].unique())
    others = [f for f in varying if f not in ("r", "l1")]
    config = [c for c in flag_columns if c != "seed"]
    size = (3.2 * len(shown) + 1, 0.5 * len(rs) + 2.2)
    with drawing(path, 110, nrows=1, ncols=len(shown), figsize=size, squeeze=False) as (fig, axes):
        for ax, router in zip(axes[0], shown, strict=True):
            grid = np.full((len(rs), len(l1s)), np.nan)
            chooser = pick or f"A_last_{router}"
            columns = list(dict.fromkeys([f"A_last_{router}", chooser]))
            means = points.groupby(config, dropna=False)[columns].mean().reset_index()
            for (r, l1), cell in means.groupby(["r", "l1"]):
                grid[rs.index(r), l1s.index(l1)] = 100 * cell.loc[cell[chooser].idxmax(), f"A_last_{router}"]
            image = ax.imshow(grid, cmap="viridis", aspect="auto", vmin=np.nanmin(grid), vmax=np.nanmax(grid))
            for i in range(len(rs)):
                for j in range(len(l1s)):
                    if not np.isnan(grid[i, j]):
                        ax.text(j, i, f"{grid[i, j]:.1f}", ha="center", va="center", color="w", fontsize=8)
            ax.set_xticks(range(len(l1s)), [f"{v:g}" for v in l1s])
            ax.set_yticks(range(len(rs)), [str(v) for v in rs])
            ax.set_xlabel("l1")
            ax.set_ylabel("r")
            ax.set_title(f"A_last, {router} router (%)", fontsize=9)
            fig.colorbar(image, ax=ax, fraction=0.046)
        if others:
            by = pick.removeprefix("val_").replace("A_last_", "") if pick else ""
            on = f"best on validation ({by})" if pick.startswith("val_") else "best on test"
            fig.suptitle(
                f"test A_last; each cell: the configuration {on} over {', '.join(others)}", fontsize=9
            )


def best_curves(
    points: Any,
    summary: Any,
    rank_by: str,
    path: Path,
    flag_columns: Sequence[str],
    labels: Sequence[str],
    split: str = "test",
    top: int = 5,
) -> None:
    """Test A_t under `rank_by` (mean over seeds) of the `top` configurations best on `split`."""
    config = [c for c in flag_columns if c != "seed"]
    curves: dict[tuple, list[float]] = {}
    for key, rows in points.groupby(config, dropna=False):
        stacked = np.array([json.loads(t) for t in rows[f"A_t_{rank_by}"]])
        curves[key if isinstance(key, tuple) else (key,)] = stacked.mean(0).tolist()
    with drawing(path, 120, figsize=(6.5, 4)) as (_, ax):
        for _, row in summary.head(top).iterrows():
            key = tuple(row[c] for c in config)
            curve = next(v for k, v in curves.items() if _same(k, key))
            label = ", ".join(
                f"{f}={row[f]:g}" if isinstance(row[f], float) else f"{f}={row[f]}" for f in labels
            )
            ax.plot(range(len(curve)), [100 * a for a in curve], marker="o", label=label)
        _task_axis(ax, f"test A_t, {rank_by} router (%)")
        ax.set_title(
            f"best {min(top, len(summary))} of {len(summary)} configurations on {split} (mean over seeds)",
            fontsize=9,
        )
        ax.legend(fontsize=7)


def _same(a: tuple, b: tuple) -> bool:
    """Equal keys, NaN equal to NaN (an unset flag read back from a table)."""
    return all(
        x == y or (isinstance(x, float) and isinstance(y, float) and np.isnan(x) and np.isnan(y))
        for x, y in zip(a, b, strict=True)
    )


def routing_confusion(matrices: dict[str, list[list[int]]], title: str, path: Path) -> None:
    """One panel per router: row t is task t's images, each cell the share routed to that task's
    module (row-normalised, so tasks of different sizes read alike; the diagonal is right)."""
    names = list(matrices)
    with drawing(path, 110, nrows=1, ncols=len(names), figsize=(3.2 * len(names), 3.2), squeeze=False) as (
        fig,
        axes,
    ):
        for ax, name in zip(axes[0], names, strict=True):
            counts = np.asarray(matrices[name], dtype=float)
            shares = counts / np.maximum(counts.sum(1, keepdims=True), 1)
            ax.imshow(shares, vmin=0, vmax=1, cmap="Blues")
            ticks = range(len(counts)) if len(counts) <= 20 else range(0, len(counts), 5)
            ax.set_xticks(list(ticks))
            ax.set_yticks(list(ticks))
            ax.set_title(name, fontsize=9)
            ax.set_xlabel("routed to task", fontsize=8)
            ax.set_ylabel("true task", fontsize=8)
        fig.suptitle(title, fontsize=10)


def training_curves(curves: dict[int, dict[str, list[float]]], title: str, path: Path) -> None:
    """Per epoch, the cross-entropy (top), the L1 term (middle; loss = their sum, curves.csv's
    columns) and the learning rate (bottom), the tasks one after another on one epoch axis (task
    t's epochs follow task t-1's), a vertical line where each task starts; an empty figure that says
    so when no task kept its curve. `curves`: task -> a run's curve (records.run.read_curve's form)."""
    rows = (("ce", "cross-entropy (mean per image)"), ("l1_term", "L1 term (l1 x |module|_1)"))
    with drawing(path, 120, nrows=3, ncols=1, figsize=(6.5, 6.5), sharex=True) as (_, axes):
        start = 0
        for task, curve in sorted(curves.items()):
            epochs = range(start, start + len(curve["ce"]))
            colour = axes[0].plot(epochs, curve["ce"], label=f"task {task}")[0].get_color()
            if "l1_term" in curve:
                axes[1].plot(epochs, curve["l1_term"], color=colour)
            axes[2].plot(epochs, curve["lr"], color=colour)
            if start:
                for ax in axes:
                    ax.axvline(start - 0.5, color="grey", alpha=0.3, linewidth=0.8)
            start += len(curve["ce"])
        if not curves:
            axes[0].text(0.5, 0.5, "no task kept its training curve", ha="center", va="center")
        elif not any("l1_term" in c for c in curves.values()):
            axes[1].text(0.5, 0.5, "no L1 term kept (tasks trained before tosca kept it)", ha="center", va="center")
        for ax, (_, label) in zip(axes, rows, strict=False):
            ax.set_ylabel(label, fontsize=8)
        axes[2].set_ylabel("learning rate", fontsize=8)
        axes[2].set_xlabel("epoch (tasks one after another)")
        for ax in axes:
            ax.grid(alpha=0.3)
        axes[0].set_title(f"{title}\nloss = cross-entropy + L1 term (curves.csv)", fontsize=9)
        if 1 < len(curves) <= 12:
            axes[0].legend(fontsize=7, ncol=2)
