"""Every figure tosca draws, through one set-up: matplotlib's file-only backend, one figure per call,
saved whole or not at all (tosca_foundation.atomic), closed after.

- `run_curves`: A_t per router of one run (accuracy.png);
- `comparison`: A_t per method of a comparison (comparison.png);
- `heatmaps`, `best_curves`: a sweep's A_last over r x l1 and the A_t of its best points;
- `routing_confusion`: per router, where each task's images are routed (confusion.png).
- `training_curves`: cross-entropy, L1 term and learning rate per epoch of one run (curves.png).

What a reviewer reads off them, held by tests/tosca_heads/records/test_plots.py from the
figures' objects: every line has its own colour and marker (hollow, so lines that coincide stay
visible) and a curve equal to one drawn before says "identical to" it in the legend; a reference
(a router or baseline its registry marks so) is dashed and labelled as one; a legend stands beside
the axes (`legend_beside`), never over a line; the configuration a sweep chose is its own wide line
in best_curves.png, named so in the legend; each heatmap panel has its own colour scale and colour
bar (a router's A_last differences stay visible beside another router's level), names the split,
prints each cell's mean ± std over seeds and marks the configuration the sweep chose; the
confusion matrices print their counts beside a colour bar.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tosca_foundation import atomic


@contextlib.contextmanager
def drawing(path: Path, dpi: int, **subplots: Any) -> Iterator[tuple[Any, Any]]:
    """(figure, axes) of `plt.subplots(**subplots)`; laid out, saved to `path` and closed at the end."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(**subplots)
    try:
        yield fig, axes
        if fig.get_layout_engine() is None:  # a figure with a shared colour bar lays itself out
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


def distinct_colours(n: int) -> list[str]:
    """n colours, no two alike: matplotlib's ten, then tab20's and tab20b's (up to 50 lines)."""
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    pool = [to_hex(c) for name in ("tab10", "tab20", "tab20b", "tab20c") for c in colormaps[name].colors]
    unique = list(dict.fromkeys(pool))
    return [unique[i % len(unique)] for i in range(n)]


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h", "p", "*", "8", "d", "H")
REFERENCE_STYLE = "--"  # a reference's line; an honest result's is solid
PANELS = {"nrows": 1, "squeeze": False, "layout": "constrained"}  # panels side by side, with colour bars
LEGEND_ROOM = 2.6  # inches a figure grows by for a legend beside its axes
CHOSEN_WIDTH = 4.0  # the chosen configuration's line: wide and translucent, under the others


def legend_beside(ax: Any, **options: Any) -> None:
    """The axes' legend to their right, outside the area the data is drawn in: it covers no line."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, **options)


def router_reference(name: str) -> str:
    """Why a router is a reference, from the router registry ("" for an honest one, or one no longer
    registered)."""
    from tosca_heads.routers import ROUTERS, reference_text

    return reference_text(name) if name in ROUTERS else ""


def draw_lines(ax: Any, lines: dict[str, tuple[Sequence[float], str]], chosen: str | None = None) -> None:
    """label -> (A_t fractions, why it is a reference or ""), one line each in %: its own colour and
    hollow marker; a reference dashed and labelled "(reference: why)"; a curve equal to one drawn
    before says so in its label ("identical to X"), so no line hides another unsaid. The `chosen`
    label's line is wide and translucent, drawn under the others (a band no other line hides in)."""
    colours = distinct_colours(len(lines))
    drawn: list[tuple[str, np.ndarray]] = []
    for i, (label, (curve, reference)) in enumerate(lines.items()):
        values = 100 * np.asarray(curve, dtype=float)
        same = [
            name for name, other in drawn if other.shape == values.shape and np.array_equal(other, values)
        ]
        shown = label + (f" (reference: {reference})" if reference else "")
        shown += f", identical to {same[0]}" if same else ""
        picked = label == chosen
        ax.plot(
            range(len(values)),
            values,
            REFERENCE_STYLE if reference else "-",
            color=colours[i],
            marker=MARKERS[i % len(MARKERS)],
            markersize=5 + 2.5 * len(same),  # drawn over an equal curve: a larger hollow marker around it
            markerfacecolor="none",
            linewidth=CHOSEN_WIDTH if picked else 1.2,
            alpha=0.55 if picked else 1.0,
            zorder=1.5 if picked else 2,
            label=shown,
        )
        drawn.append((label, values))


def run_curves(tasks: Sequence[int], curves: dict[str, list[float]], title: str, path: Path) -> None:
    """A_t (fractions) on the test split per router after each task; the reference routers dashed."""
    with drawing(path, 120, figsize=(7 + LEGEND_ROOM, 4.2)) as (_, ax):
        draw_lines(ax, {router: (curve, router_reference(router)) for router, curve in curves.items()})
        ax.set_xticks(range(len(tasks)), [str(t) for t in tasks])
        _task_axis(ax, "test accuracy on all seen classes (%)")
        ax.set_title(f"{title}\nA_t on the test split; dashed: references, no honest result", fontsize=9)
        legend_beside(ax, title="routing", fontsize=7, title_fontsize=8)


def comparison(rows: Sequence[dict[str, Any]], title: str, path: Path) -> None:
    """A_t on the test split per method (rows with method, routing, A_t as JSON, and `reference`:
    why the row is no honest result, from the router or baseline registry; "" when it is one)."""
    lines = {}
    for row in rows:
        label = row["method"] if row["routing"] == "none" else f"{row['method']} ({row['routing']})"
        lines[label] = (json.loads(row["A_t"]), row.get("reference") or "")
    with drawing(path, 120, figsize=(7.5 + LEGEND_ROOM, 4.5)) as (_, ax):
        draw_lines(ax, lines)
        _task_axis(ax, "test accuracy on all seen classes (%)")
        ax.set_title(f"{title}\nA_t on the test split; dashed: references, no honest result", fontsize=9)
        legend_beside(ax, fontsize=6)


def _cell_key(value: Any) -> str:
    """A flag's value as the grid and sweep.json agree on it (0.0005 and 5e-4 alike; NaN as None)."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "None"
    return f"{value:g}" if isinstance(value, float) else str(value)


def heatmaps(
    points: Any,
    path: Path,
    shown: Sequence[str],
    flag_columns: Sequence[str],
    varying: Sequence[str],
    pick: str = "",
    chosen: dict[str, Any] | None = None,
) -> None:
    """Test A_last over r x l1, one panel per shown router, each on its own colour scale (from its
    lowest cell to its highest, its own colour bar: one router's spread is not flattened by another
    router's level); each cell its mean ± std over seeds; the configuration the sweep chose (`chosen`, sweep.json's
    record: its split, router and flags) outlined in every panel. With other flags swept, a cell
    shows the chosen configuration where it holds it, else the one best by the `pick` column (the
    ranking router's validation A_last where the sweep has one), never the best by the test figure
    shown."""
    rs, l1s = sorted(points["r"].unique()), sorted(points["l1"].unique())
    others = [f for f in varying if f not in ("r", "l1")]
    config = [c for c in flag_columns if c != "seed"]
    picked = (chosen or {}).get("chosen", {}).get("flags", {})
    grids = {router: _heat_grid(points, router, config, rs, l1s, pick, picked) for router in shown}
    size = (4.2 * len(shown) + 1.0, 0.6 * len(rs) + 2.6)
    with drawing(path, 110, ncols=len(shown), figsize=size, **PANELS) as (fig, axes):
        for ax, router in zip(axes[0], shown, strict=True):
            mean, std, at = grids[router]
            lo, hi = colour_scale(mean)
            image = ax.imshow(mean, cmap="viridis", aspect="auto", vmin=lo, vmax=hi)
            for i in range(len(rs)):
                for j in range(len(l1s)):
                    if np.isnan(mean[i, j]):
                        continue
                    text = f"{mean[i, j]:.1f}" + ("" if np.isnan(std[i, j]) else f"\n± {std[i, j]:.1f}")
                    dark = (mean[i, j] - lo) / (hi - lo) < 0.6
                    ax.text(j, i, text, ha="center", va="center", color="w" if dark else "k", fontsize=7)
            if at is not None:
                from matplotlib.patches import Rectangle

                box = Rectangle((at[1] - 0.5, at[0] - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2.5)
                ax.add_patch(box).set_label("chosen")
            ax.set_xticks(range(len(l1s)), [f"{v:g}" for v in l1s])
            ax.set_yticks(range(len(rs)), [str(v) for v in rs])
            ax.set_xlabel("l1")
            ax.set_ylabel("r")
            why = router_reference(router)
            ax.set_title(f"{router} router" + (f"\nreference ({why})" if why else ""), fontsize=9)
            fig.colorbar(image, ax=ax, fraction=0.05, label=f"test A_last (%), {router}'s own scale")
        fig.suptitle(_heat_title(points, chosen, pick, others), fontsize=8)


def colour_scale(values: np.ndarray) -> tuple[float, float]:
    """A panel's colour limits: its lowest and highest value (one unit wide around a single one)."""
    if not np.isfinite(values).any():
        return 0.0, 100.0
    lo, hi = float(np.nanmin(values)), float(np.nanmax(values))
    return (lo - 0.5, hi + 0.5) if hi - lo < 1e-9 else (lo, hi)


def _heat_grid(
    points: Any, router: str, config: list[str], rs: list, l1s: list, pick: str, picked: dict[str, Any]
) -> tuple[np.ndarray, np.ndarray, tuple[int, int] | None]:
    """One panel: the mean and std over seeds of test A_last (%) per r x l1 cell, and the cell of the
    chosen configuration (None when the sweep chose none)."""
    column = f"A_last_{router}"
    chooser = pick or column
    stats = points.groupby(config, dropna=False).agg(
        mean=(column, "mean"), std=(column, "std"), key=(chooser, "mean")
    )
    stats = stats.reset_index()
    is_chosen = np.ones(len(stats), dtype=bool) if picked else np.zeros(len(stats), dtype=bool)
    for flag, value in picked.items():
        if flag in stats:
            is_chosen &= stats[flag].map(_cell_key).to_numpy() == _cell_key(value)
    stats["chosen"] = is_chosen
    mean, std = np.full((len(rs), len(l1s)), np.nan), np.full((len(rs), len(l1s)), np.nan)
    at = None
    for (r, l1), cell in stats.groupby(["r", "l1"]):
        i, j = rs.index(r), l1s.index(l1)
        row = cell[cell["chosen"]].iloc[0] if cell["chosen"].any() else cell.loc[cell["key"].idxmax()]
        mean[i, j], std[i, j] = 100 * row["mean"], 100 * row["std"]
        if cell["chosen"].any():
            at = (i, j)
    return mean, std, at


def _heat_title(points: Any, chosen: dict[str, Any] | None, pick: str, others: Sequence[str]) -> str:
    seeds = sorted(points["seed"].unique())
    spread = "one seed: no std" if len(seeds) == 1 else f"mean ± std over {len(seeds)} seeds"
    lines = [f"A_last on the TEST split (%), {spread}; each panel on its own colour scale"]
    if chosen:
        flags = ", ".join(f"{k}={_cell_key(v)}" for k, v in chosen["chosen"]["flags"].items())
        where = "validation" if chosen["split"] == "validation" else "TEST (tuned on test)"
        lines.append(
            f"red: the configuration chosen on the {where} split by the {chosen['router']} router ({flags})"
        )
    if others:
        by = pick.removeprefix("val_").replace("A_last_", "") if pick else ""
        on = f"best on validation ({by})" if pick.startswith("val_") else "best on test"
        lines.append(f"each cell: the chosen configuration, else the one {on} over {', '.join(others)}")
    return "\n".join(lines)


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
    """Test A_t under `rank_by` (mean over seeds) of the `top` configurations best on `split`, and
    the configuration the sweep chose (`summary`'s `chosen` row; drawn even when a tie rule chose
    one below the top): its own wide line, "chosen on SPLIT" in the legend."""
    config = [c for c in flag_columns if c != "seed"]
    curves: dict[tuple, list[float]] = {}
    for key, rows in points.groupby(config, dropna=False):
        stacked = np.array([json.loads(t) for t in rows[f"A_t_{rank_by}"]])
        curves[key if isinstance(key, tuple) else (key,)] = stacked.mean(0).tolist()
    lines, chosen = {}, None
    picked = np.flatnonzero(summary["chosen"].astype(bool)) if "chosen" in summary else []
    drawn = list(range(min(top, len(summary))))
    drawn += [int(p) for p in picked[:1] if p not in drawn]  # a chosen one below the top: drawn too
    for position in drawn:
        row = summary.iloc[position]
        key = tuple(row[c] for c in config)
        curve = next(v for k, v in curves.items() if _same(k, key))
        label = ", ".join(f"{f}={row[f]:g}" if isinstance(row[f], float) else f"{f}={row[f]}" for f in labels)
        if len(picked) and position == picked[0]:
            label = chosen = f"{label} (chosen on {split})"
        lines[label] = (curve, router_reference(rank_by))
    with drawing(path, 120, figsize=(6.5 + LEGEND_ROOM, 4)) as (_, ax):
        draw_lines(ax, lines, chosen)
        _task_axis(ax, f"test A_t, {rank_by} router (%)")
        ax.set_title(
            f"best {min(top, len(summary))} of {len(summary)} configurations on {split} (mean over seeds)"
            + ("; wide line: the chosen one" if chosen else ""),
            fontsize=9,
        )
        legend_beside(ax, fontsize=7)


def _same(a: tuple, b: tuple) -> bool:
    """Equal keys, NaN equal to NaN (an unset flag read back from a table)."""
    return all(
        x == y or (isinstance(x, float) and isinstance(y, float) and np.isnan(x) and np.isnan(y))
        for x, y in zip(a, b, strict=True)
    )


COUNTS_SHOWN = 20  # tasks up to which each cell prints its count (confusion.json has them all)


def routing_confusion(matrices: dict[str, list[list[int]]], title: str, path: Path) -> None:
    """One panel per router: row t is task t's images, each cell the count routed to that task's
    module, printed, and coloured by its share of the row (so tasks of different sizes read alike;
    the diagonal is right) on one colour bar for every panel."""
    names = list(matrices)
    size = (3.4 * len(names) + 1.2, 3.6)
    with drawing(path, 110, ncols=len(names), figsize=size, **PANELS) as (fig, axes):
        image = None
        for ax, name in zip(axes[0], names, strict=True):
            counts = np.asarray(matrices[name], dtype=np.int64)
            shares = counts / np.maximum(counts.sum(1, keepdims=True), 1)
            image = ax.imshow(shares, vmin=0, vmax=1, cmap="Blues")
            if len(counts) <= COUNTS_SHOWN:
                size = 7 if len(counts) <= 10 else 4
                for i, j in np.ndindex(counts.shape):
                    colour = "w" if shares[i, j] > 0.6 else "k"
                    ax.text(j, i, str(counts[i, j]), ha="center", va="center", color=colour, fontsize=size)
            ticks = range(len(counts)) if len(counts) <= 20 else range(0, len(counts), 5)
            ax.set_xticks(list(ticks))
            ax.set_yticks(list(ticks))
            ax.set_title(name, fontsize=9)
            ax.set_xlabel("routed to task", fontsize=8)
            ax.set_ylabel("true task", fontsize=8)
        fig.colorbar(image, ax=list(axes[0]), fraction=0.03, label="share of the true task's images")
        said = (
            "numbers: images"
            if len(names) and len(matrices[names[0]]) <= COUNTS_SHOWN
            else "counts in confusion.json"
        )
        fig.suptitle(f"{title}; {said}", fontsize=10)


def training_curves(curves: dict[int, dict[str, list[float]]], title: str, path: Path) -> None:
    """Per epoch, the cross-entropy (top), the L1 term (middle; loss = their sum, curves.csv's
    columns) and the learning rate (bottom), the tasks one after another on one epoch axis (task
    t's epochs follow task t-1's), a vertical line where each task starts; an empty figure that says
    so when no task kept its curve. `curves`: task -> a run's curve (records.run.read_curve's form)."""
    rows = (("ce", "cross-entropy (mean per image)"), ("l1_term", "L1 term (l1 x |module|_1)"))
    with drawing(path, 120, nrows=3, ncols=1, figsize=(6.5 + LEGEND_ROOM / 2, 6.5), sharex=True) as (_, axes):
        start, colours, seen = 0, distinct_colours(len(curves)), []
        for task, curve in sorted(curves.items()):
            epochs = range(start, start + len(curve["ce"]))
            colour = colours[len(seen)]
            seen.append(task)
            axes[0].plot(epochs, curve["ce"], color=colour, label=f"task {task}")
            axes[1].plot(epochs, curve["l1_term"], color=colour)
            axes[2].plot(epochs, curve["lr"], color=colour)
            if start:
                for ax in axes:
                    ax.axvline(start - 0.5, color="grey", alpha=0.3, linewidth=0.8)
            start += len(curve["ce"])
        if not curves:
            axes[0].text(0.5, 0.5, "no task kept its training curve", ha="center", va="center")
        for ax, (_, label) in zip(axes, rows, strict=False):
            ax.set_ylabel(label, fontsize=8)
        axes[2].set_ylabel("learning rate", fontsize=8)
        axes[2].set_xlabel("epoch (tasks one after another)")
        for ax in axes:
            ax.grid(alpha=0.3)
        axes[0].set_title(f"{title}\nloss = cross-entropy + L1 term (curves.csv)", fontsize=9)
        if 1 < len(curves) <= 12:
            legend_beside(axes[0], fontsize=7)


def suite_curves(stores: Sequence[Any], curves: dict[str, dict[str, list[list[float]]]], path: Path) -> None:
    """A suite's A_t per task for every store (`stores`: its StoreSpecs; `curves`: store -> method
    label -> A_t per finished cell): each method's mean over its finished cells, the band min-max."""
    n = len(stores)
    with drawing(path, 110, ncols=n, figsize=(4.5 * n + LEGEND_ROOM, 3.8), squeeze=False) as (_, axes):
        for ax, store in zip(axes[0], stores, strict=True):
            for label, found in curves[store.name].items():
                if not found:
                    continue
                values = 100 * np.asarray(found)
                tasks = np.arange(values.shape[1])
                ax.plot(tasks, values.mean(0), label=label, linestyle="--" if "TOSCA" not in label else "-")
                ax.fill_between(tasks, values.min(0), values.max(0), alpha=0.15)
            ax.set_title(store.label)
            _task_axis(ax, "A_t (%)")
        if axes[0][-1].get_legend_handles_labels()[0]:  # nothing finished: nothing to name
            legend_beside(axes[0][-1], fontsize=7)


def suite_a_last(stores: Sequence[Any], table: Any, path: Path) -> None:
    """A suite's A_last per store (`table`: its long table), a bar per method with its std over seeds."""
    frame = table[table.metric == "A_last"]
    labels = list(dict.fromkeys(frame["label"]))
    width = 0.8 / max(1, len(labels))
    with drawing(path, 110, figsize=(max(6, 2.2 * len(stores) + 2), 4)) as (_, ax):
        for i, label in enumerate(labels):
            mine = frame[frame.label == label].set_index("store")
            means = [100 * mine.loc[s.name, "mean"] for s in stores]
            stds = [np.nan_to_num(100 * mine.loc[s.name, "std"]) for s in stores]
            ax.bar(np.arange(len(stores)) + i * width, means, width, yerr=stds, label=label)
        ax.set_xticks(np.arange(len(stores)) + 0.4 - width / 2, [s.name for s in stores])
        ax.set_ylabel("A_last (%)")
        if labels:  # beside the axes, where it cannot cover a bar
            legend_beside(ax, fontsize=7)
        ax.grid(axis="y", alpha=0.3)
