"""A sweep folder's records: sweep.json (the store, the grids, the validation split, what was
chosen), results.csv, the append-only table of every finished point, and outcomes/KEY.safetensors,
each point's per-image answers (`records.outcomes`: its intervals and paired tests come from them).

results.csv (format `records.FORMAT`, in every row) holds one row per point, split and router:
the point's flags (its validation split's among them) and timings, then the split ("test", or
"validation" where the sweep holds one out), the router's name and metrics, each metric's
interval (`A_bar_low`, `A_bar_high`, ... `routing_accuracy_high`: 95%, exact binomial for A_last
and the routing accuracy, a stratified bootstrap over images for A_bar and forgetting, never
narrower than their counts allow: `method.uncertainty`) and the `images` they are over; its columns do not depend on which routers exist, so a sweep made before
a router was added still resumes. `format` and `rows` (how many rows
the point has) are columns of every row. A point's rows are appended (and fsynced) in one write
the moment it finishes, so a killed sweep loses at most the points in flight; a point whose rows a
kill cut short is dropped when the file is next opened, and a point appears at most once. A
sweep.json or a row of another format is refused in one line (`records.check_format`).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from featcache.store import FeatureStore
from tosca_foundation import atomic
from tosca_foundation.errors import UserError
from tosca_foundation.files import parse_json, read_json, read_text
from tosca_foundation.fingerprints import canonical_json, identity_differences
from tosca_heads.method.metrics import BUILT_IN, METRICS, Metric, figures, with_interval
from tosca_heads.method.protocol import StreamConfig, ValidationConfig
from tosca_heads.method.recipe import TrainConfig
from tosca_heads.records import (
    FORMAT,
    check_format,
    store_block,
    validation_record,
)
from tosca_heads.records.claim import FolderKind
from tosca_heads.records.derived import check_figures, recorded_blocks
from tosca_heads.records.outcomes import PerSplit, read_outcomes, write_outcomes
from tosca_heads.records.table import Table, csv_text

if TYPE_CHECKING:  # pandas is loaded when a table is built, not to append rows on a worker
    import pandas as pd

SWEEP_FILE = "sweep.json"
RESULTS_FILE = "results.csv"
RESULTS_LIMIT = 1 << 30  # bytes of results.csv: 100,000 points of a dozen routers fit in a third of it
FLAG_COLUMNS = [f.name for f in fields(TrainConfig)] + [f.name for f in fields(StreamConfig)]
VALIDATION_COLUMNS = ["val_fraction", "val_seed"]  # the point's validation split (0: none)
TIMING_COLUMNS = [
    *("train_seconds", "eval_seconds", "run_seconds", "worker_pid", "feature_loads"),
    *("group_size", "group_seconds", "device"),
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


def _built_in() -> list[Metric]:
    return [m for m in figures() if m.name in BUILT_IN]


def _plug_ins() -> list[Metric]:
    return [m for m in figures() if m.name not in BUILT_IN]


def _interval_columns(metrics: Sequence[Metric]) -> list[str]:
    """Each metric's interval at uncertainty.LEVEL, `NAME_low` and `NAME_high`, for those that
    declare one (`Metric.interval`)."""
    return [f"{m.name}_{end}" for m in metrics if m.interval is not None for end in ("low", "high")]


# each row's figures with their intervals (empty where the run kept no answers) and the images of
# the split they are over (after the last task)
INTERVAL_COLUMNS = _interval_columns(_built_in())
COLUMNS = [
    *(*POINT_COLUMNS, "rows", "split", "router", *(m.name for m in _built_in()), "A_t"),
    *(*INTERVAL_COLUMNS, "images"),
]  # then each registered metric's columns (`columns`)
OUTCOMES_FOLDER = "outcomes"  # outcomes/KEY.safetensors: each point's per-image answers (records.outcomes)
SPLITS = ("test", "validation")
TEXT_COLUMNS = {"key", "flow", "dataset", "backbone", "device", "split", "router", "A_t"}
OPTIONAL_COLUMNS = {
    *("r", "s", "group_size", "group_seconds", "device", "routing_accuracy", "images"),
    *INTERVAL_COLUMNS,
}


def columns() -> list[str]:
    """results.csv's columns: `COLUMNS` (the built-in figures'), then each registered metric's
    (`metrics.register_metric`: its value, and its interval where it declares one), empty in the
    rows of a point computed before it was registered."""
    plug_ins = _plug_ins()
    return [*COLUMNS, *(m.name for m in plug_ins), *_interval_columns(plug_ins)]


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
            {m.name: block.get(m.name) for m in figures()},
            A_t=json.dumps([round(a, 6) for a in block["A_t"]]),
            images=block.get("images"),
        )
        intervals = block.get("intervals", {})
        for m in with_interval():
            row[f"{m.name}_low"], row[f"{m.name}_high"] = intervals.get(m.name, [None, None])
        rows.append(row)
    return rows


FRACTION_COLUMNS = {"val_fraction"}
# counts: whole numbers; those of them at least one
AT_LEAST_ONE = {
    *("format", "r", "s", "epochs", "batch_size"),
    *("init_cls", "increment", "tasks", "rows"),
}
WHOLE_COLUMNS = {
    *AT_LEAST_ONE,
    *(
        "seed",
        "order_seed",
        "val_seed",
        "params_per_task",
        "group_size",
        "feature_loads",
        "worker_pid",
        "images",
    ),
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
    metric = METRICS.get(column) or METRICS.get(_interval_of(column))  # an interval: as its figure
    if metric is not None:
        return "" if metric.holds(number) else f"{metric.label} between {metric.low:g} and {metric.high:g}"
    if column in WHOLE_COLUMNS and not number.is_integer():
        return "a whole number"
    if number < (1 if column in AT_LEAST_ONE else 0):
        return f"a number of at least {1 if column in AT_LEAST_ONE else 0}"
    return ""


def _interval_of(column: str) -> str:
    """The metric whose interval a `NAME_low`/`NAME_high` column holds ("" for any other column)."""
    name, _, end = column.rpartition("_")
    return name if end in ("low", "high") and name in METRICS else ""


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
        """Read (and check) the rows there; unless `check_only`, drop what a kill cut short (and
        give a file written with other metrics registered this tosca's columns)."""
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
        if header == columns():
            rows, converted = self._rows(header, body), False
        elif header[: len(COLUMNS)] == COLUMNS:  # written with other metrics registered
            unknown = [c for c in header[len(COLUMNS) :] if c not in METRICS and not _interval_of(c)]
            if unknown:
                raise UserError(
                    f"{self.path} has a column {unknown[0][:40]!r} of a metric not registered here: load the "
                    "plug-in that registers it (TOSCA_PLUGINS), or pass another --out"
                )
            rows, converted = [_with_columns(row) for row in self._rows(header, body)], True
        else:
            raise UserError(
                f"{self.path} has other columns than this tosca writes (written before tosca's first "
                "release, or edited); pass another --out for a new sweep"
            )
        points: dict[str, list[dict[str, str]]] = {}
        for row in rows:
            points.setdefault(row["key"], []).append(row)
        whole = {key: found for key, found in points.items() if _whole(found)}
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
            check_format(self.path, int(float(row["format"])), f"sweep results (line {number})")
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
                    raise self._edited(number, f"its flags do not match its key {key[:40]!r}")

    def _check(self, number: int, row: dict[str, str]) -> None:
        """A row whose numbers are not numbers was edited: one line naming the cell, not a traceback
        (or a table built from it)."""
        for column, value in row.items():
            if column == "split" and value not in SPLITS:
                raise self._edited(number, f"split holds {value[:40]!r}, not test or validation")
            if (
                column in TEXT_COLUMNS
                or column.startswith("A_t_")
                or (value == "" and (column in OPTIONAL_COLUMNS or column in METRICS or _interval_of(column)))
            ):
                continue
            wanted = _cell_problem(column, value)
            if wanted:
                raise self._edited(number, f"{column} holds {value[:40]!r}, not {wanted}") from None
        curve = row.get("A_t", "")
        try:
            values = parse_json(curve, "A_t") if curve else []
        except UserError:
            values = None
        if not isinstance(values, list) or not all(_cell_problem("A_last", str(v)) == "" for v in values):
            raise self._edited(number, f"A_t holds {curve[:40]!r}, not a list of accuracies")

    def _edited(self, number: int | str, what: str) -> UserError:
        """One line for a row of results.csv that tosca did not write: its line, what is wrong."""
        return UserError(
            f"{self.path} line {number}: {what}; the file was edited or damaged: fix or delete that line "
            "(the sweep then reruns its point)"
        )

    def _rewrite(self, rows: list[dict[str, str]]) -> None:
        Table("sweep results", "", columns(), [[row.get(c, "") for c in columns()] for row in rows]).write(
            self.path, ("csv",)
        )

    def keys(self) -> set[str]:
        return set(self._points)

    def answers(self) -> dict[str, PerSplit]:
        """Each recorded point's kept answers, every figure its rows record checked against them
        (`records.derived`, one bootstrap for all the points on the same images): answers missing,
        edited, damaged or of another point, or a figure edited, are one line."""
        found: dict[str, PerSplit] = {}
        out = self.path.parent
        fix = "delete its rows in results.csv and outcomes/KEY.safetensors to compute the point again"
        recorded = []
        for key, rows in self._points.items():
            found[key] = answers = read_point_outcomes(out, key)
            blocks: dict[str, dict[str, Any]] = {}
            for row in rows:
                blocks.setdefault(row["split"], {})[row["router"]] = _row_block(row)
            where = f"{self.path} (point {key})"
            recorded += recorded_blocks(answers, blocks, where, fix.replace("KEY", key), row_fields())
        check_figures(recorded)
        return found

    def append(self, rows: list[dict[str, Any]]) -> None:
        """One finished point's rows (`point_rows`), in one write: a kill leaves all or a cut tail."""
        if not rows or rows[0]["key"] in self._points:
            return
        cells = [{c: _cell(row[c]) for c in columns()} for row in rows]
        with atomic.appending(self.path, newline="") as fh:  # never through a link (synced at the end)
            header = columns() if os.fstat(fh.fileno()).st_size == 0 else None
            fh.write(csv_text(header, [list(row.values()) for row in cells]))
        self._points[cells[0]["key"]] = cells

    def point(self, key: str) -> list[dict[str, str]]:
        """A finished point's rows as results.csv holds them (text cells; [] when it has none)."""
        return [dict(row) for row in self._points.get(key, [])]

    def frame(self) -> pd.DataFrame:
        """Every row, one per point and router (what results.parquet holds)."""
        import pandas as pd

        if not self._points:
            return pd.DataFrame(columns=columns())
        text = read_text(self.path, "sweep results", "it was damaged: pass another --out", RESULTS_LIMIT)
        return pd.read_csv(io.StringIO(text), keep_default_na=False, na_values=[""])


def row_fields() -> frozenset[str]:
    """What a row keeps of a metrics block: A_t, the images, every registered figure and the
    intervals (no matrix, no routing curve, no standard errors)."""
    return frozenset({"A_t", "images", "intervals", *(m.name for m in figures())})


def _row_block(row: dict[str, str]) -> dict[str, Any]:
    """A row's metrics block as `records.derived` compares it: A_t, every figure with its interval
    and the images (None where a cell is empty); a routing curve of its routing accuracy alone (a
    row keeps no curve of it: what says the row is a router's)."""

    def number(column: str) -> float | None:
        return float(row[column]) if row.get(column, "") != "" else None

    routing = number("routing_accuracy")
    images = number("images")
    return {
        "A_t": parse_json(row["A_t"], "A_t"),
        "routing_accuracy_t": None if routing is None else [routing],
        "images": None if images is None else int(images),
        **{m.name: number(m.name) for m in figures()},
        "intervals": {m.name: [number(f"{m.name}_low"), number(f"{m.name}_high")] for m in with_interval()},
    }


def _whole(rows: list[dict[str, str]]) -> bool:
    """A point's rows are all there: as many as its `rows` column says, one per split and router."""
    expected = rows[0]["rows"]
    kinds = {(r["split"], r["router"]) for r in rows}
    return expected.isdigit() and len(rows) == int(expected) and len(kinds) == len(rows)


def _with_columns(row: dict[str, str]) -> dict[str, str]:
    """A row written with other metrics registered in this tosca's columns: the cells of a metric
    registered since empty, those of one no longer registered gone."""
    return {c: row.get(c, "") for c in columns()}


def outcomes_path(out: Path, key: str) -> Path:
    """Where a sweep keeps a point's per-image answers: outcomes/KEY.safetensors."""
    return Path(out) / OUTCOMES_FOLDER / f"{key}.safetensors"


def write_point_outcomes(out: Path, key: str, found: PerSplit) -> None:
    """A finished point's outcomes, written before its rows (a point in results.csv has them); the
    folder made here, never through a link."""
    folder = Path(out) / OUTCOMES_FOLDER
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise UserError(f"{folder} is not a folder tosca made (a link or a file): remove it")
    folder.mkdir(exist_ok=True)
    write_outcomes(outcomes_path(out, key), found)


def read_point_outcomes(out: Path, key: str) -> PerSplit:
    """A point's outcomes, checked in one line (missing ones too)."""
    return read_outcomes(
        outcomes_path(out, key), "delete its rows in results.csv (and the file) to compute the point again"
    )


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


# ------------------------------------------------------------------------------------------ sweep.json


def grid_digest(keys: Sequence[str]) -> str:
    """Identity of a grid (its points' keys), recorded so the same command finds its folder again."""
    return hashlib.sha256("\n".join(sorted(keys)).encode()).hexdigest()[:16]


def find_sweep_dir(runs_root: Path, store: FeatureStore, keys: Sequence[str]) -> Path | None:
    """The newest sweep folder under runs_root made by this grid on this store, if any: rerunning
    a sweep command without --out resumes it instead of starting a new runs/sweep-<time>."""
    digest = grid_digest(keys)
    for meta_path in sorted(Path(runs_root).glob("sweep-*/sweep.json"), reverse=True):
        try:
            meta = read_json(meta_path, "sweep file", "")
        except UserError:
            continue  # a damaged folder is not this grid's: it is never resumed by accident
        if not isinstance(meta, dict) or not isinstance(meta.get("grids", []), list):
            continue
        grids = [meta.get("grid"), *meta.get("grids", [])]
        if meta.get("store_fingerprint") == store.fingerprint and digest in grids:
            return meta_path.parent
    return None


def is_sweep_dir(folder: Path) -> bool:
    """A sweep folder written before folders carried tosca's marker: it holds a sweep.json."""
    return (Path(folder) / SWEEP_FILE).is_file()


def read_sweep_file(path: Path) -> dict[str, Any]:
    """A sweep.json, refused in one line when damaged, edited or of a newer format."""
    meta = read_json(path, "sweep file", "it was edited or damaged; pass another --out")
    check_format(path, meta.get("format"), "sweep file")
    if not isinstance(meta.get("grids", []), list):
        raise UserError(f"sweep file {path} was edited: its grids are not a list; pass another --out")
    return meta


def sweep_config(
    store: FeatureStore,
    keys: Sequence[str],
    validation: ValidationConfig,
    held_ids: Sequence[str],
    protocol: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What a sweep's plan records in sweep.json (the claim writes or compares it, `SWEEP_FOLDER`): the
    store, the grid's digest, the validation split and the protocol in words. A sweep folder
    belongs to one store (resuming it on another would mix their rows) and one validation split."""
    meta = {**store_block(store), "grid": grid_digest(keys)}
    if validation.enabled:
        meta["validation"] = validation_record(validation, held_ids)
    if protocol is not None:
        meta["protocol"] = protocol
    return meta


def read_sweep_config(out: Path) -> dict[str, Any]:
    """A sweep folder's sweep.json, with the store fingerprint it is compared by."""
    meta_path = Path(out) / SWEEP_FILE
    meta = read_sweep_file(meta_path)
    if not isinstance(meta.get("store_fingerprint"), str):
        raise UserError(
            f"{meta_path} records no store fingerprint: it was edited or damaged; pass another --out"
        )
    return meta


SWEEP_IDENTITY = ("store_fingerprint", "validation")  # what makes another sweep (not a grown grid, not words)


def sweep_differences(recorded: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    return identity_differences(
        {k: recorded.get(k) for k in SWEEP_IDENTITY}, {k: wanted.get(k) for k in SWEEP_IDENTITY}
    )


def _other_sweep(out: Path, recorded: dict[str, Any], wanted: dict[str, Any]) -> str | None:
    """A sweep's own words for another validation split (what to pass to resume it) or another
    store; checked in that order (the split is what a user is likelier to have changed)."""
    held, asked = recorded.get("validation"), wanted.get("validation")
    if not _same_split(held, asked):
        return f"sweep folder {out} {validation_mismatch(held)}"
    if recorded.get("store_fingerprint") != wanted.get("store_fingerprint"):
        return (
            f"sweep folder {out} holds results of another store ({recorded.get('store')}); pass another --out"
        )
    if held != asked:
        return f"sweep folder {out} {validation_mismatch(held)}"
    return None


def _same_split(recorded: Any, asked: Any) -> bool:
    """Two sweep.json validation records (None: none) hold out the same share with the same seed."""
    if not isinstance(recorded, dict) or not isinstance(asked, dict):
        return recorded is None and asked is None
    return all(recorded.get(k) == asked.get(k) for k in ("fraction", "seed"))


def _grown_grid(recorded: dict[str, Any], wanted: dict[str, Any]) -> dict[str, Any] | None:
    """A grown grid resumed with --out: its digest added, so the same command without --out finds
    this folder again (None: the grid is one the folder knows; sweep.json stays as it is)."""
    grids = recorded.get("grids", [])
    if wanted["grid"] in (recorded.get("grid"), *grids):
        return None
    return {**recorded, **wanted, "grid": recorded.get("grid"), "grids": [*grids, wanted["grid"]]}


def _check_results(out: Path) -> None:
    """results.csv and the points' outcomes readable, before anything runs."""
    ResultsTable(Path(out) / RESULTS_FILE, check_only=True).answers()


SWEEP_FOLDER = FolderKind(
    name="sweep",
    flag="--out",
    noun="sweep folder",
    written_before=is_sweep_dir,
    config_file=SWEEP_FILE,
    read_config=read_sweep_config,
    differences=sweep_differences,
    explain=_other_sweep,
    grown=_grown_grid,
    check_files=_check_results,
    stale_in=(OUTCOMES_FOLDER,),
)


def validation_mismatch(recorded: Any) -> str:
    """Why a sweep folder cannot take this sweep's points: it was made with another validation split
    (one folder, one split: its points are ranked together)."""
    if not isinstance(recorded, dict):
        return (
            "holds points without a validation split (ranked on test); pass --val-fraction 0 to resume it, "
            "or another --out"
        )
    return (
        f"holds points of another validation split ({recorded.get('fraction')!r} of each class, seed "
        f"{recorded.get('seed')!r}); pass --val-fraction {recorded.get('fraction')} --val-seed "
        f"{recorded.get('seed')} to resume it, or another --out"
    )


def record_choice(out: Path, chosen: dict[str, Any] | None) -> None:
    """sweep.json keeps what the sweep chose, on which split, and the command that refits it."""
    meta_path = out / "sweep.json"
    meta = read_sweep_file(meta_path)
    if meta.get("chosen") != chosen:
        atomic.write_text(meta_path, json.dumps({**meta, "chosen": chosen}, indent=2) + "\n")
