"""What is built from a sweep's results.csv at the end (records.sweep holds the file itself):
results.parquet, summary.md, heatmaps of A_last over r x l1, A_t curves of the best points, and
what the sweep chose.

The points are ranked, and the best chosen, on the validation split where the sweep has one; on
test otherwise, and the summary says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from featcache.foundation import atomic
from tosca_heads.experiments.plots import best_curves, heatmaps
from tosca_heads.experiments.records.sweep import FLAG_COLUMNS, METRIC_COLUMNS, POINT_COLUMNS
from tosca_heads.routers import HEADLINE, ROUTERS

if TYPE_CHECKING:  # pandas is loaded when a table is built, not to append rows on a worker
    import pandas as pd

# ------------------------------------------------------------------------------------------ summary


def routers_in(frame: pd.DataFrame) -> list[str]:
    """The routers of a results frame, in the registry's order (unknown ones after)."""
    present = list(dict.fromkeys(frame["router"]))
    return [r for r in ROUTERS if r in present] + [r for r in present if r not in ROUTERS]


def by_point(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per point, with a `{metric}_{router}` column per router and metric on test, and a
    `val_{metric}_{router}` column on the validation split where the points have one."""
    points = frame.drop_duplicates("key").set_index("key")[[c for c in POINT_COLUMNS if c != "key"]]
    for split, prefix in (("test", ""), ("validation", "val_")):
        part = frame[frame["split"] == split]
        if part.empty:
            continue
        for metric, column in METRIC_COLUMNS.items():
            pivot = part.pivot(index="key", columns="router", values=column)
            pivot.columns = [f"{prefix}{metric}_{router}" for router in pivot.columns]
            points = points.join(pivot)
    return points.reset_index()


def varying_flags(points: pd.DataFrame) -> list[str]:
    """Flags that take more than one value in the sweep (seed excluded: it is averaged over)."""
    return [c for c in FLAG_COLUMNS if c != "seed" and points[c].nunique(dropna=False) > 1]


def ranking_split(points: pd.DataFrame, rank_by: str) -> str:
    """The split the points are ranked and chosen on: validation where every point has it, else test."""
    column = f"val_A_last_{rank_by}"
    return "validation" if column in points and bool(points[column].notna().all()) else "test"


def rank_column(split: str, rank_by: str) -> str:
    """The summary column that orders the configurations."""
    return f"{'val_' if split == 'validation' else ''}A_last_{rank_by}_mean"


def summarise_points(points: pd.DataFrame, rank_by: str, routers: Sequence[str]) -> pd.DataFrame:
    """Mean and std over seeds for each configuration, best first by A_last under `rank_by` on the
    ranking split (`ranking_split`: validation where the points have it; test beside, never used
    to rank)."""
    group = [c for c in FLAG_COLUMNS if c != "seed"]
    metrics = [
        f"{prefix}{m}_{r}"
        for prefix in ("", "val_")
        for r in routers
        for m in ("A_bar", "A_last", "routing")
        if f"{prefix}{m}_{r}" in points
    ]
    agg: dict[str, Any] = {c: ["mean", "std"] for c in metrics}
    agg.update(params_per_task="first", train_seconds="mean", seed="count")
    summary = points.groupby(group, dropna=False).agg(agg)
    summary.columns = [f"{a}_{b}" if b not in ("first",) else a for a, b in summary.columns]
    summary = summary.rename(columns={"seed_count": "seeds", "train_seconds_mean": "train_seconds"})
    order = rank_column(ranking_split(points, rank_by), rank_by)
    summary = summary.reset_index().sort_values(order, ascending=False, kind="stable")
    return summary.reset_index(drop=True)


def _pm(mean: float, std: float) -> str:
    if np.isnan(mean):
        return "–"
    if np.isnan(std):
        return f"{100 * mean:.2f}"
    return f"{100 * mean:.2f} ± {100 * std:.2f}"


def flag_text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def choices(
    points: pd.DataFrame,
    summary: pd.DataFrame,
    rank_by: str,
    command: Callable[[dict[str, Any]], str],
    modules: Callable[[dict[str, Any]], str | None] | None = None,
) -> dict[str, Any]:
    """What the sweep chose and on which split (sweep.json and summary.md record it): the best
    configuration on the ranking split with its test figures and the `tosca fit` command that
    refits it (at the sweep's first seed; with --keep-modules, that point's kept run folder), and, for reference, the configuration the test split would have chosen (choosing it
    would be tuning on test)."""
    split = ranking_split(points, rank_by)
    flags = varying_flags(points) or ["r", "l1"]

    def described(row: Any) -> dict[str, Any]:
        entry = {
            "flags": {f: _plain(row[f]) for f in flags},
            "A_last": float(row[f"A_last_{rank_by}_mean"]),
            "seeds": int(row["seeds"]),
        }
        if f"val_A_last_{rank_by}_mean" in row:
            entry["val_A_last"] = float(row[f"val_A_last_{rank_by}_mean"])
        return entry

    best = summary.iloc[0]
    on_test = summary.loc[summary[f"A_last_{rank_by}_mean"].idxmax()]
    config = {c: _plain(best[c]) for c in FLAG_COLUMNS if c != "seed" and c in best}
    picked = {**described(best), "command": command(config)}
    kept = None if modules is None else modules(config)
    if kept is not None:
        picked["modules"] = kept
        picked["seed"] = int(points["seed"].min())
    return {
        "split": split,
        "router": rank_by,
        "chosen": picked,
        "best_on_test": described(on_test),
    }


def _plain(value: Any) -> Any:
    """A table value as JSON takes it (numpy numbers as Python's; NaN as None)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and np.isnan(value):
        return None
    return value


def summary_markdown(
    points: pd.DataFrame, summary: pd.DataFrame, rank_by: str, shown: Sequence[str], chosen: dict[str, Any]
) -> str:
    flags = varying_flags(points) or ["r", "l1"]
    split = chosen["split"]
    val = ["val A_last " + rank_by] if split == "validation" else []
    header = [*flags, *val, *(f"A_last {m}" for m in shown), f"A_bar {rank_by}", "routing acc"]
    header += ["params/task", "train s", "seeds"]
    if split == "validation":
        how = (
            f"Best first by A_last under the `{rank_by}` router on the validation split (held out of the "
            "training images); the test columns are shown beside it and never used to rank."
        )
    else:
        how = (
            f"Best first by A_last under the `{rank_by}` router **on the test split**: this sweep holds out no "
            "validation split, so a configuration chosen from this table is tuned on test (`--val-fraction` "
            "holds one out)."
        )
    lines = [
        f"# Sweep on {points['dataset'].iloc[0]} / {points['backbone'].iloc[0]}: {len(summary)} configurations, "
        f"{len(points)} runs",
        "",
        f"{how} Accuracies in %, mean ± std over seeds (results.csv has every router and split).",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
    ]
    for _, row in summary.iterrows():
        cells = [flag_text(row[f]) for f in flags]
        if val:
            cells.append(_pm(row[f"val_A_last_{rank_by}_mean"], row[f"val_A_last_{rank_by}_std"]))
        cells += [_pm(row.get(f"A_last_{m}_mean", np.nan), row.get(f"A_last_{m}_std", np.nan)) for m in shown]
        cells.append(_pm(row[f"A_bar_{rank_by}_mean"], row[f"A_bar_{rank_by}_std"]))
        cells.append(_pm(row[f"routing_{rank_by}_mean"], row[f"routing_{rank_by}_std"]))
        cells += [f"{int(row['params_per_task']):,}", f"{row['train_seconds']:.1f}", str(int(row["seeds"]))]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", *choice_lines(chosen)]
    return "\n".join(lines) + "\n"


def choice_lines(chosen: dict[str, Any]) -> list[str]:
    """The chosen configuration in words, with its refit command, and what test would have chosen."""
    best, on_test, router = chosen["chosen"], chosen["best_on_test"], chosen["router"]

    def flags(entry: dict[str, Any]) -> str:
        return ", ".join(f"{k}={flag_text(v)}" for k, v in entry["flags"].items())

    if chosen["split"] == "validation":
        lines = [
            f"Chosen on validation ({router}): {flags(best)}, validation A_last {100 * best['val_A_last']:.2f}, "
            f"test A_last {100 * best['A_last']:.2f}.",
            f"For reference, the test split would have chosen {flags(on_test)} (test A_last "
            f"{100 * on_test['A_last']:.2f}): that figure is tuned on test.",
        ]
    else:
        lines = [
            f"Chosen on test ({router}): {flags(best)}, test A_last {100 * best['A_last']:.2f}; "
            "this figure is tuned on the test set."
        ]
    lines.append(f"Refit it: `{best['command']}`")
    if best.get("modules"):
        lines.append(
            f"Its modules (seed {best['seed']}, kept by --keep-modules): {best['modules']} "
            f"(`tosca predict {best['modules']} IMAGES`)"
        )
    return lines


def write_sweep_outputs(
    out: Path,
    frame: pd.DataFrame,
    rank_by: str,
    shown: Sequence[str] | None = None,
    command: Callable[[dict[str, Any]], str] | None = None,
    modules: Callable[[dict[str, Any]], str | None] | None = None,
) -> tuple[dict[str, Path], dict[str, Any] | None]:
    """Everything derived from results.csv, rebuilt whole after each sweep (and after a resume);
    and what it chose (None without results). `command` gives the `tosca fit` command of a
    configuration (its flags), `modules` the run folder --keep-modules kept of it (None: none)."""
    shown = (
        [r for r in (shown or HEADLINE) if r in set(frame["router"])]
        if not frame.empty
        else list(shown or HEADLINE)
    )
    files = {"results.csv": out / "results.csv"}
    if frame.empty:
        return files, None
    with atomic.writing(out / "results.parquet", "wb") as fh:
        frame.to_parquet(fh, index=False)
    points = by_point(frame)
    summary = summarise_points(points, rank_by, routers_in(frame))
    chosen = choices(points, summary, rank_by, command or (lambda config: "tosca fit ..."), modules)
    atomic.write_text(out / "summary.md", summary_markdown(points, summary, rank_by, shown, chosen))
    pick = rank_column(chosen["split"], rank_by).removesuffix("_mean")
    heatmaps(points, out / "heatmap_A_last.png", shown, FLAG_COLUMNS, varying_flags(points), pick, chosen)
    best_curves(
        points,
        summary,
        rank_by,
        out / "best_curves.png",
        FLAG_COLUMNS,
        varying_flags(points) or ["r", "l1"],
        chosen["split"],
    )
    for name in ("results.parquet", "summary.md", "heatmap_A_last.png", "best_curves.png"):
        files[name] = out / name
    return files, chosen
