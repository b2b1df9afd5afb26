"""A sweep's results on disk: the append-only results.csv, and what is built from it at the end
(results.parquet, summary.md, heatmaps of A_last over r x l1, A_t curves of the best points).

results.csv (format 3) holds one row per point, split and router: the point's flags (its
validation split's among them) and timings, then the split ("test", or "validation" where the
sweep holds one out), the router's name and metrics; its columns do not depend on which routers
exist, so a sweep made before a router was added still resumes. `format` and `rows` (how many rows
the point has) are columns of every row. A point's rows are appended (and fsynced) in one write
the moment it finishes, so a killed sweep loses at most the points in flight; a point whose rows a
kill cut short is dropped when the file is next opened, and a point appears at most once. Older
files are read and rewritten as format 3 when their sweep resumes: format 2 (one row per point and
router, a `routers` column, no validation) and format 1 (one wide row per point, a column per
router and metric: tosca 0.1).

The points are ranked, and the best chosen, on the validation split where the sweep has one; on
test otherwise, and the summary says so.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from featcache.foundation import atomic
from featcache.foundation.errors import UserError
from featcache.foundation.files import parse_json, read_text
from featcache.foundation.fingerprints import canonical_json
from tosca_heads.experiments.plots import best_curves, heatmaps
from tosca_heads.method.protocol import StreamConfig
from tosca_heads.method.recipe import TrainConfig
from tosca_heads.routers import HEADLINE, ROUTERS

if TYPE_CHECKING:  # pandas is loaded when a table is built, not to append rows on a worker
    import pandas as pd

FORMAT = 3
RESULTS_LIMIT = 1 << 30  # bytes of results.csv: 100,000 points of a dozen routers fit in a third of it
FLAG_COLUMNS = [f.name for f in fields(TrainConfig)] + [f.name for f in fields(StreamConfig)]
VALIDATION_COLUMNS = ["val_fraction", "val_seed"]  # the point's validation split (0: none)
TIMING_COLUMNS = [
    "train_seconds",
    "eval_seconds",
    "run_seconds",
    "worker_pid",
    "feature_loads",
    "group_size",
    "group_seconds",
    "device",
]
POINT_COLUMNS = [
    "format",
    "key",
    *FLAG_COLUMNS,
    *VALIDATION_COLUMNS,
    "dataset",
    "backbone",
    "tasks",
    "params_per_task",
    *TIMING_COLUMNS,
]
METRIC_COLUMNS = {
    "A_bar": "A_bar",
    "A_last": "A_last",
    "forgetting": "forgetting",
    "routing": "routing_accuracy",
    "A_t": "A_t",
}
COLUMNS = [*POINT_COLUMNS, "rows", "split", "router", *METRIC_COLUMNS.values()]
SPLITS = ("test", "validation")
TEXT_COLUMNS = {"key", "flow", "dataset", "backbone", "device", "split", "router", "A_t"}
# format 2 (before the validation split): no validation columns, one row per router, `routers`
FORMAT_2 = [
    *(c for c in POINT_COLUMNS if c not in VALIDATION_COLUMNS),
    "routers",
    "router",
    *METRIC_COLUMNS.values(),
]
OPTIONAL_COLUMNS = {"r", "s", "group_size", "group_seconds", "device", "routing_accuracy"}
# the columns of a format-1 file before its per-router ones (the last three came late in 0.1)
FORMAT_1_POINT = ["key", *FLAG_COLUMNS, "dataset", "backbone", "tasks"]
FORMAT_1_ADDED = ["group_size", "group_seconds", "device"]


def point_rows(
    point: dict[str, Any],
    routers: dict[str, dict[str, Any]],
    validation: dict[str, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The rows of one finished point: its own columns, then one row per split and router's
    metrics block (test, then validation where the point has one)."""
    blocks = [("test", name, block) for name, block in routers.items()]
    blocks += [("validation", name, block) for name, block in (validation or {}).items()]
    rows = []
    for split, name, block in blocks:
        row = {
            **{c: point.get(c) for c in POINT_COLUMNS},
            "format": FORMAT,
            "rows": len(blocks),
            "split": split,
            "router": name,
        }
        row.update(
            A_bar=block["A_bar"],
            A_last=block["A_last"],
            forgetting=block["forgetting"],
            routing_accuracy=block["routing_accuracy"],
            A_t=json.dumps([round(a, 6) for a in block["A_t"]]),
        )
        rows.append(row)
    return rows


FRACTION_COLUMNS = {"A_bar", "A_last", "routing_accuracy", "val_fraction"}
WHOLE_COLUMNS = {
    "format",
    "r",
    "s",
    "epochs",
    "batch_size",
    "seed",
    "init_cls",
    "increment",
    "order_seed",
    "val_seed",
    "tasks",
    "params_per_task",
    "routers",
    "rows",
    "group_size",
    "feature_loads",
    "worker_pid",
}
AT_LEAST_ONE = {
    "format",
    "r",
    "s",
    "epochs",
    "batch_size",
    "init_cls",
    "increment",
    "tasks",
    "routers",
    "rows",
}


def _cell_problem(column: str, value: str) -> str:
    """What a numeric cell of results.csv should be and is not ('' when it is fine): finite,
    accuracies in [0, 1], forgetting in [-1, 1], counts whole; every other number is not negative.
    (`nan`, `inf`, `-3` or 7.5 would otherwise merge points or be shown as percentages.)"""
    try:
        number = float(value)
    except ValueError:
        return "a number"
    if not math.isfinite(number):
        return "a finite number"
    if column in FRACTION_COLUMNS:
        return "" if 0.0 <= number <= 1.0 else "an accuracy between 0 and 1"
    if column == "forgetting":
        return "" if -1.0 <= number <= 1.0 else "a forgetting between -1 and 1"
    if column in WHOLE_COLUMNS and not number.is_integer():
        return "a whole number"
    if number < (1 if column in AT_LEAST_ONE else 0):
        return f"a number of at least {1 if column in AT_LEAST_ONE else 0}"
    return ""


def point_key(flags: dict[str, Any]) -> str:
    """A sweep point's identity: a digest of every flag (`SweepPoint.key`), so a grown grid re-uses
    the points it shares and a row whose flags were edited no longer matches its key."""
    return hashlib.sha256(canonical_json(flags).encode()).hexdigest()[:16]


def _flags_of(row: dict[str, str]) -> dict[str, Any]:
    """The typed flags of a results.csv row (as `SweepPoint.flags` gives them: the validation
    split's only when the point holds one out)."""
    flags: dict[str, Any] = {}
    for f in [*fields(TrainConfig), *fields(StreamConfig)]:
        value, kind = row.get(f.name, ""), str(f.type)
        if value == "":
            flags[f.name] = None
        elif kind == "str":
            flags[f.name] = value
        elif kind.startswith("int"):
            flags[f.name] = int(float(value))
        else:
            flags[f.name] = float(value)
    if float(row.get("val_fraction") or 0) > 0:
        flags["val_fraction"] = float(row["val_fraction"])
        flags["val_seed"] = int(float(row.get("val_seed") or 0))
    return flags


class ResultsTable:
    """results.csv: every finished point's rows, appended as points finish."""

    def __init__(self, path: Path, check_only: bool = False):
        """Read (and check) the rows there; unless `check_only`, drop what a kill cut short and
        rewrite a format-1 file as format 2."""
        self.path = Path(path)
        self._points: dict[str, list[dict[str, str]]] = {}
        self._line_of: dict[int, int] = {}  # id(row) -> its line in the file, for messages
        if self.path.exists():
            self._points = self._read(rewrite=not check_only)

    def _read(self, rewrite: bool) -> dict[str, list[dict[str, str]]]:
        text = read_text(self.path, "sweep results", "it was damaged: pass another --out", RESULTS_LIMIT)
        whole_lines = text[: text.rfind("\n") + 1]  # a last line without its newline was cut by a kill
        lines = list(csv.reader(io.StringIO(whole_lines)))
        if not lines:
            return {}
        header, body = lines[0], lines[1:]
        if header == COLUMNS:
            rows, converted = self._rows(header, body), False
        elif header == FORMAT_2:
            rows, converted = [_format_2_row(row) for row in self._rows(header, body)], True
        elif header[: len(FORMAT_1_POINT)] == FORMAT_1_POINT:
            rows, converted = self._format_1(header, body), True
        else:
            raise UserError(
                f"{self.path} has other columns than tosca writes; pass another --out for a new sweep"
            )
        points: dict[str, list[dict[str, str]]] = {}
        for row in rows:
            points.setdefault(row["key"], []).append(row)
        whole = {key: found for key, found in points.items() if _whole(found)}
        if not converted or header == FORMAT_2:  # a format-1 file's are checked once rewritten
            self._check_keys(whole)
        dropped = sum(len(found) for found in points.values()) - sum(len(found) for found in whole.values())
        if rewrite and (converted or dropped or len(rows) != len(body) or not text.endswith("\n")):
            self._rewrite([row for found in whole.values() for row in found])
        return whole

    def _rows(self, header: list[str], body: list[list[str]]) -> list[dict[str, str]]:
        rows = []
        for number, line in enumerate(body, start=2):
            if len(line) != len(header):
                continue  # cut short by a kill
            row = dict(zip(header, line, strict=True))
            self._check(number, row)
            self._line_of[id(row)] = number
            rows.append(row)
        return rows

    def _check_keys(self, points: dict[str, list[dict[str, str]]]) -> None:
        """Each recorded point's flags give its key: an edited flag (two points made one, or a
        point standing for another) is refused. Points a kill cut short are dropped before this."""
        for key, rows in points.items():
            for row in rows:
                if point_key(_flags_of(row)) != key:
                    number = self._line_of.get(id(row), "?")
                    raise UserError(
                        f"{self.path} line {number}: its flags do not match its key {key[:40]!r}; the file "
                        "was edited or damaged: fix or delete that line (the sweep then reruns its point)"
                    )

    def _format_1(self, header: list[str], body: list[list[str]]) -> list[dict[str, str]]:
        """Wide format-1 rows (a column per router and metric) as format-2 rows."""
        names = [c[len("A_last_") :] for c in header if c.startswith("A_last_")]
        rows = []
        for number, line in enumerate(body, start=2):
            if len(line) != len(header):
                continue
            wide = dict(zip(header, line, strict=True))
            self._check(number, {k: v for k, v in wide.items() if not k.startswith("A_t_")})
            point = {c: wide.get(c, "") for c in POINT_COLUMNS}
            point.update(format=str(FORMAT), val_fraction="0", val_seed="0")
            for name in names:
                rows.append(
                    {
                        **point,
                        "rows": str(len(names)),
                        "split": "test",
                        "router": name,
                        **{
                            column: wide.get(f"{metric}_{name}", "")
                            for metric, column in METRIC_COLUMNS.items()
                        },
                    }
                )
        return rows

    def _check(self, number: int, row: dict[str, str]) -> None:
        """A row whose numbers are not numbers was edited: one line naming the cell, not a traceback
        (or a table built from it)."""
        for column, value in row.items():
            if column == "split" and value not in SPLITS:
                raise UserError(
                    f"{self.path} line {number}: split holds {value[:40]!r}, not test or validation; the file "
                    "was edited or damaged: fix or delete that line (the sweep then reruns its point)"
                )
            if (
                column in TEXT_COLUMNS
                or column.startswith("A_t_")
                or (value == "" and column in OPTIONAL_COLUMNS)
            ):
                continue
            wanted = _cell_problem(column, value)
            if wanted:
                raise UserError(
                    f"{self.path} line {number}: {column} holds {value[:40]!r}, not {wanted}; the file was "
                    "edited or damaged: fix or delete that line (the sweep then reruns its point)"
                ) from None
        curve = row.get("A_t", "")
        try:
            values = parse_json(curve, "A_t") if curve else []
        except UserError:
            values = None
        if not isinstance(values, list) or not all(_cell_problem("A_last", str(v)) == "" for v in values):
            raise UserError(
                f"{self.path} line {number}: A_t holds {curve[:40]!r}, not a list of accuracies; the file "
                "was edited or damaged: fix or delete that line (the sweep then reruns its point)"
            )

    def _rewrite(self, rows: list[dict[str, str]]) -> None:
        with atomic.writing(self.path, "w", newline="") as fh:
            writer = csv.DictWriter(fh, COLUMNS)
            writer.writeheader()
            writer.writerows(rows)

    def keys(self) -> set[str]:
        return set(self._points)

    def append(self, rows: list[dict[str, Any]]) -> None:
        """One finished point's rows (`point_rows`), in one write: a kill leaves all or a cut tail."""
        if not rows or rows[0]["key"] in self._points:
            return
        cells = [{c: _cell(row[c]) for c in COLUMNS} for row in rows]
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, COLUMNS)
        with atomic.appending(self.path, newline="") as fh:  # never through a link (synced at the end)
            if os.fstat(fh.fileno()).st_size == 0:
                writer.writeheader()
            writer.writerows(cells)
            fh.write(buffer.getvalue())
        self._points[cells[0]["key"]] = cells

    def frame(self) -> pd.DataFrame:
        """Every row, one per point and router (what results.parquet holds)."""
        import pandas as pd

        if not self._points:
            return pd.DataFrame(columns=COLUMNS)
        text = read_text(self.path, "sweep results", "it was damaged: pass another --out", RESULTS_LIMIT)
        return pd.read_csv(io.StringIO(text), keep_default_na=False, na_values=[""])


def _whole(rows: list[dict[str, str]]) -> bool:
    """A point's rows are all there: as many as its `rows` column says, one per split and router."""
    expected = rows[0]["rows"]
    kinds = {(r["split"], r["router"]) for r in rows}
    return expected.isdigit() and len(rows) == int(expected) and len(kinds) == len(rows)


def _format_2_row(row: dict[str, str]) -> dict[str, str]:
    """A format-2 row (no validation split, one row per router) as a format-3 row."""
    converted = {c: row.get(c, "") for c in COLUMNS}
    converted.update(format=str(FORMAT), val_fraction="0", val_seed="0", rows=row["routers"], split="test")
    return converted


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


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
    points: pd.DataFrame, summary: pd.DataFrame, rank_by: str, command: Callable[[dict[str, Any]], str]
) -> dict[str, Any]:
    """What the sweep chose and on which split (sweep.json and summary.md record it): the best
    configuration on the ranking split with its test figures and the `tosca fit` command that
    refits it, and, for reference, the configuration the test split would have chosen (choosing it
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
    return {
        "split": split,
        "router": rank_by,
        "chosen": {**described(best), "command": command(config)},
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
    return [*lines, f"Refit it: `{best['command']}`"]


def write_sweep_outputs(
    out: Path,
    frame: pd.DataFrame,
    rank_by: str,
    shown: Sequence[str] | None = None,
    command: Callable[[dict[str, Any]], str] | None = None,
) -> tuple[dict[str, Path], dict[str, Any] | None]:
    """Everything derived from results.csv, rebuilt whole after each sweep (and after a resume);
    and what it chose (None without results). `command` gives the `tosca fit` command of a
    configuration (its flags)."""
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
    chosen = choices(points, summary, rank_by, command or (lambda config: "tosca fit ..."))
    atomic.write_text(out / "summary.md", summary_markdown(points, summary, rank_by, shown, chosen))
    pick = rank_column(chosen["split"], rank_by).removesuffix("_mean")
    heatmaps(points, out / "heatmap_A_last.png", shown, FLAG_COLUMNS, varying_flags(points), pick)
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
