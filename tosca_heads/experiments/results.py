"""A sweep's results on disk: the append-only results.csv, and what is built from it at the end
(results.parquet, summary.md, heatmaps of A_last over r x l1, A_t curves of the best points).

results.csv is the sweep's memory: a row is appended (and fsynced) the moment its point finishes,
so a killed sweep loses at most the points in flight. A row cut short by the kill is dropped when
the file is next opened, and a key appears at most once.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from featcache.foundation import atomic
from featcache.foundation.errors import UserError
from tosca_heads.method.protocol import StreamConfig
from tosca_heads.method.recipe import TrainConfig
from tosca_heads.routers import HEADLINE
from tosca_heads.routers.scores import MODES

FLAG_COLUMNS = [f.name for f in fields(TrainConfig)] + [f.name for f in fields(StreamConfig)]
MODE_COLUMNS = [
    f"{metric}_{mode}" for mode in MODES for metric in ("A_bar", "A_last", "forgetting", "routing", "A_t")
]
COLUMNS = [
    "key",
    *FLAG_COLUMNS,
    "dataset",
    "backbone",
    "tasks",
    *MODE_COLUMNS,
    "params_per_task",
    "train_seconds",
    "eval_seconds",
    "run_seconds",
    "worker_pid",
    "feature_loads",
    "group_size",
    "group_seconds",
    "device",
]
ADDED_COLUMNS = ["group_size", "group_seconds", "device"]  # absent from results.csv of tosca <= 0.1
TEXT_COLUMNS = {"key", "flow", "dataset", "backbone", "device"}
OPTIONAL_COLUMNS = {"r", "s", *ADDED_COLUMNS, *(c for c in MODE_COLUMNS if c.startswith("routing_"))}


class ResultsTable:
    """results.csv: one row per finished point, appended as points finish."""

    def __init__(self, path: Path, check_only: bool = False):
        """Read (and check) the rows there; drop rows a kill cut short, unless `check_only`."""
        self.path = Path(path)
        self._rows: list[dict[str, str]] = []
        if self.path.exists():
            self._rows = self._read_clean(rewrite=not check_only)

    def _read_clean(self, rewrite: bool) -> list[dict[str, str]]:
        try:
            text = self.path.read_text()
        except UnicodeDecodeError:
            raise UserError(f"{self.path} is not a text file; it was damaged: pass another --out") from None
        lines = list(csv.reader(io.StringIO(text)))
        if not lines:
            return []
        header = lines[0]
        older = header == [c for c in COLUMNS if c not in ADDED_COLUMNS]
        if header != COLUMNS and not older:
            raise UserError(
                f"{self.path} has other columns than this version writes; pass another --out for a new sweep"
            )
        rows, seen = [], set()
        for number, line in enumerate(lines[1:], start=2):
            if len(line) != len(header) or line[0] in seen:
                continue  # cut short by a kill, or a point recorded twice
            seen.add(line[0])
            row = dict(zip(header, line, strict=True))
            self._check_row(number, row)
            rows.append({c: row.get(c, "") for c in COLUMNS})
        if rewrite and (older or len(rows) != len(lines) - 1 or not text.endswith("\n")):
            self._rewrite(rows)
        return rows

    def _check_row(self, number: int, row: dict[str, str]) -> None:
        """A row whose numbers are not numbers was edited: one line naming the cell, not a traceback
        (or a table built from it)."""
        for column, value in row.items():
            if (
                column in TEXT_COLUMNS
                or column.startswith("A_t_")
                or (value == "" and column in OPTIONAL_COLUMNS)
            ):
                continue
            try:
                float(value)
            except ValueError:
                raise UserError(
                    f"{self.path} line {number}: {column} holds {value[:40]!r}, not a number; the file was "
                    "edited or damaged: fix or delete that line (the sweep then reruns its point)"
                ) from None

    def _rewrite(self, rows: list[dict[str, str]]) -> None:
        with atomic.replacing(self.path) as tmp, open(tmp, "w", newline="") as fh:
            writer = csv.DictWriter(fh, COLUMNS)
            writer.writeheader()
            writer.writerows(rows)

    def keys(self) -> set[str]:
        return {row["key"] for row in self._rows}

    def append(self, row: dict[str, Any]) -> None:
        if row["key"] in self.keys():
            return
        cells = {c: _cell(row[c]) for c in COLUMNS}
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, COLUMNS)
        if not self.path.exists() or self.path.stat().st_size == 0:
            writer.writeheader()
        writer.writerow(cells)
        with open(self.path, "a", newline="") as fh:
            fh.write(buffer.getvalue())  # one write per row: a kill leaves whole rows or a cut last line
            fh.flush()
            os.fsync(fh.fileno())
        self._rows.append(cells)

    def frame(self) -> pd.DataFrame:
        if not self._rows:
            return pd.DataFrame(columns=COLUMNS)
        return pd.read_csv(self.path, keep_default_na=False, na_values=[""])


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


# ------------------------------------------------------------------------------------------ summary


def varying_flags(frame: pd.DataFrame) -> list[str]:
    """Flags that take more than one value in the sweep (seed excluded: it is averaged over)."""
    return [c for c in FLAG_COLUMNS if c != "seed" and frame[c].nunique(dropna=False) > 1]


def summarise_points(frame: pd.DataFrame, rank_mode: str) -> pd.DataFrame:
    """Mean and std over seeds for each configuration, best A_last under `rank_mode` first."""
    group = [c for c in FLAG_COLUMNS if c != "seed"]
    metrics = [f"{m}_{mode}" for mode in MODES for m in ("A_bar", "A_last", "routing")]
    agg: dict[str, Any] = {c: ["mean", "std"] for c in metrics}
    agg.update(params_per_task="first", train_seconds="mean", seed="count")
    summary = frame.groupby(group, dropna=False).agg(agg)
    summary.columns = [f"{a}_{b}" if b not in ("first",) else a for a, b in summary.columns]
    summary = summary.rename(columns={"seed_count": "seeds", "train_seconds_mean": "train_seconds"})
    summary = summary.reset_index().sort_values(f"A_last_{rank_mode}_mean", ascending=False, kind="stable")
    return summary.reset_index(drop=True)


def mean_curves(frame: pd.DataFrame, mode: str) -> dict[tuple, list[float]]:
    """A_t under `mode` averaged over seeds, per configuration."""
    group = [c for c in FLAG_COLUMNS if c != "seed"]
    curves: dict[tuple, list[float]] = {}
    for key, rows in frame.groupby(group, dropna=False):
        stacked = np.array([json.loads(t) for t in rows[f"A_t_{mode}"]])
        curves[key if isinstance(key, tuple) else (key,)] = stacked.mean(0).tolist()
    return curves


def _pm(mean: float, std: float) -> str:
    if np.isnan(std):
        return f"{100 * mean:.2f}"
    return f"{100 * mean:.2f} ± {100 * std:.2f}"


def summary_markdown(
    frame: pd.DataFrame, summary: pd.DataFrame, rank_mode: str, shown: Sequence[str] = HEADLINE
) -> str:
    flags = varying_flags(frame) or ["r", "l1"]
    header = [*flags, *(f"A_last {m}" for m in shown), f"A_bar {rank_mode}", "routing acc", "params/task"]
    header += ["train s", "seeds"]
    lines = [
        f"# Sweep on {frame['dataset'].iloc[0]} / {frame['backbone'].iloc[0]}: {len(summary)} configurations, "
        f"{len(frame)} runs",
        "",
        f"Best first by A_last under the `{rank_mode}` router; accuracies in %, mean ± std over seeds "
        "(results.csv has every router).",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
    ]
    for _, row in summary.iterrows():
        cells = [_flag(row[f]) for f in flags]
        cells += [_pm(row[f"A_last_{m}_mean"], row[f"A_last_{m}_std"]) for m in shown]
        cells.append(_pm(row[f"A_bar_{rank_mode}_mean"], row[f"A_bar_{rank_mode}_std"]))
        cells.append(_pm(row[f"routing_{rank_mode}_mean"], row[f"routing_{rank_mode}_std"]))
        cells += [f"{int(row['params_per_task']):,}", f"{row['train_seconds']:.1f}", str(int(row["seeds"]))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _flag(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


# ------------------------------------------------------------------------------------------ plots


def plot_heatmaps(frame: pd.DataFrame, path: Path, shown: Sequence[str] = HEADLINE) -> None:
    """A_last over r x l1, one panel per shown router; other flags: the best configuration per cell."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rs, l1s = sorted(frame["r"].unique()), sorted(frame["l1"].unique())
    others = [f for f in varying_flags(frame) if f not in ("r", "l1")]
    fig, axes = plt.subplots(
        1, len(shown), figsize=(3.2 * len(shown) + 1, 0.5 * len(rs) + 2.2), squeeze=False
    )
    for ax, mode in zip(axes[0], shown, strict=True):
        grid = np.full((len(rs), len(l1s)), np.nan)
        per_config = frame.groupby([c for c in FLAG_COLUMNS if c != "seed"], dropna=False)[f"A_last_{mode}"]
        means = per_config.mean().reset_index()
        for (r, l1), cell in means.groupby(["r", "l1"]):
            grid[rs.index(r), l1s.index(l1)] = 100 * cell[f"A_last_{mode}"].max()
        image = ax.imshow(grid, cmap="viridis", aspect="auto", vmin=np.nanmin(grid), vmax=np.nanmax(grid))
        for i in range(len(rs)):
            for j in range(len(l1s)):
                if not np.isnan(grid[i, j]):
                    ax.text(j, i, f"{grid[i, j]:.1f}", ha="center", va="center", color="w", fontsize=8)
        ax.set_xticks(range(len(l1s)), [f"{v:g}" for v in l1s])
        ax.set_yticks(range(len(rs)), [str(v) for v in rs])
        ax.set_xlabel("l1")
        ax.set_ylabel("r")
        ax.set_title(f"A_last, {mode} router (%)", fontsize=9)
        fig.colorbar(image, ax=ax, fraction=0.046)
    if others:
        fig.suptitle(f"each cell: best over {', '.join(others)}; mean over seeds", fontsize=9)
    fig.tight_layout()
    atomic.save_figure(fig, path, dpi=110)
    plt.close(fig)


def plot_best_curves(
    frame: pd.DataFrame, summary: pd.DataFrame, rank_mode: str, path: Path, top: int = 5
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    group = [c for c in FLAG_COLUMNS if c != "seed"]
    curves = mean_curves(frame, rank_mode)
    flags = varying_flags(frame) or ["r", "l1"]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for _, row in summary.head(top).iterrows():
        key = tuple(row[c] for c in group)
        curve = next(v for k, v in curves.items() if _same_key(k, key))
        label = ", ".join(f"{f}={_flag(row[f])}" for f in flags)
        ax.plot(range(len(curve)), [100 * a for a in curve], marker="o", label=label)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("task")
    ax.set_ylabel(f"A_t, {rank_mode} router (%)")
    ax.set_title(f"best {min(top, len(summary))} of {len(summary)} configurations (mean over seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    atomic.save_figure(fig, path, dpi=120)
    plt.close(fig)


def _same_key(a: tuple, b: tuple) -> bool:
    return all((x == y) or (_isnan(x) and _isnan(y)) for x, y in zip(a, b, strict=True))


def _isnan(x: Any) -> bool:
    return isinstance(x, float) and np.isnan(x)


def write_sweep_outputs(
    out: Path, frame: pd.DataFrame, rank_mode: str, shown: Sequence[str] | None = None
) -> dict[str, Path]:
    """Everything derived from results.csv; rebuilt whole after each sweep (and after a resume)."""
    shown = list(shown or HEADLINE)
    files = {"results.csv": out / "results.csv"}
    if frame.empty:
        return files
    with atomic.replacing(out / "results.parquet") as tmp:
        frame.to_parquet(tmp, index=False)
    summary = summarise_points(frame, rank_mode)
    atomic.write_text(out / "summary.md", summary_markdown(frame, summary, rank_mode, shown))
    plot_heatmaps(frame, out / "heatmap_A_last.png", shown)
    plot_best_curves(frame, summary, rank_mode, out / "best_curves.png")
    for name in ("results.parquet", "summary.md", "heatmap_A_last.png", "best_curves.png"):
        files[name] = out / name
    return files
