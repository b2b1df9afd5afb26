"""A sweep folder: sweep.json (the study: the store, the grids, the validation split, what was
chosen and how), its points, each a cell in points/KEY/ (`records.sweep_points`: what it was asked,
what it measured, its per-image answers), and the views drawn from the points, written whole and
never read back: results.csv here, the summaries and plots (`studies.results`).

results.csv (format `records.FORMAT`, in every row) holds one row per point, split and router:
the point's flags (its validation split's among them) and timings, then the split ("test", or
"validation" where the sweep holds one out), the router's name and metrics, each metric's
interval (`A_bar_low`, `A_bar_high`, ... `routing_accuracy_high`: 95%, exact binomial for A_last
and the routing accuracy, a stratified bootstrap over images for A_bar and forgetting, never
narrower than their counts allow: `method.uncertainty`) and the `images` they are over, every
figure computed from the point's answers when the view is drawn (`rows_of`). It is rewritten
whole (atomically) from the finished points as they finish, at most every `VIEW_SECONDS`, and when
a sweep ends (`ResultsView`); an edit to it changes nothing the sweep says. A sweep.json of another format is refused in one line (`records.check_format`).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import time
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from featcache.store import FeatureStore
from tosca_foundation import atomic
from tosca_foundation.errors import UserError
from tosca_foundation.files import read_json
from tosca_foundation.fingerprints import identity_differences
from tosca_heads.method.metrics import BUILT_IN, Metric, figures, with_interval
from tosca_heads.method.protocol import StreamConfig, ValidationConfig
from tosca_heads.method.recipe import TrainConfig
from tosca_heads.records import (
    FORMAT,
    check_format,
    store_block,
    validation_record,
)
from tosca_heads.records.claim import FolderKind
from tosca_heads.records.derived import Block
from tosca_heads.records.sweep_points import Point, check_points, figures_of_points, in_order
from tosca_heads.records.table import Table
from tosca_heads.routers import ROUTERS

if TYPE_CHECKING:  # pandas is loaded when a table is built, not to read points on a worker
    import pandas as pd

SWEEP_FILE = "sweep.json"
RESULTS_FILE = "results.csv"
VIEW_SECONDS = 5.0  # results.csv is written again at most this often while a sweep runs
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
    *(*POINT_COLUMNS, "split", "router", *(m.name for m in _built_in()), "A_t"),
    *(*INTERVAL_COLUMNS, "images"),
]  # then each registered metric's columns (`columns`)


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


def rows_of(point: Point, blocks: dict[str, dict[str, Block]]) -> list[dict[str, Any]]:
    """A finished point's rows of results.csv: its own columns, then its metrics blocks as its
    answers give them (`sweep_points.figures_of_points`), test then validation, routers in the
    registry's order."""
    return point_rows(point.columns(), _ordered(blocks.get("test", {})), _ordered(blocks.get("validation")))


def _ordered(named: dict[str, Block] | None) -> dict[str, Block] | None:
    """Blocks in the registry's order of routers, as metrics.json lists them (unknown ones after)."""
    if named is None:
        return None
    return {
        name: named[name]
        for name in [*(r for r in ROUTERS if r in named), *sorted(set(named) - set(ROUTERS))]
    }


def results_rows(points: Sequence[Point]) -> dict[str, list[dict[str, Any]]]:
    """Each point's rows (key -> rows), their figures computed from the answers in one go."""
    return {
        point.key: rows_of(point, blocks)
        for point, blocks in zip(points, figures_of_points(points), strict=True)
    }


def write_results(out: Path, rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """results.csv, the view of every finished point's rows (`rows_of`), written whole and
    atomically (never read back: the points are the truth), and the frame it holds (empty, and no
    file written, without points)."""
    import pandas as pd

    if not rows:
        return pd.DataFrame(columns=columns())
    table = Table("sweep results", "", columns(), [[_cell(row.get(c)) for c in columns()] for row in rows])
    table.write(Path(out) / RESULTS_FILE, ("csv",))
    return pd.read_csv(io.StringIO(table.csv()), keep_default_na=False, na_values=[""])


class ResultsView:
    """results.csv while a sweep runs: each finished point's rows, drawn once from its answers,
    written whole over the file at most every `every` seconds as points finish (a killed sweep
    leaves the view of most of what it finished; its points are the truth either way) and at the
    end (`final`)."""

    def __init__(self, out: Path, found: Sequence[Point], every: float = VIEW_SECONDS):
        self.out, self.every = Path(out), every
        self._points = {p.key: p for p in found}
        self._rows = results_rows(found)
        self._written = -math.inf

    def rows(self, key: str) -> list[dict[str, Any]]:
        return self._rows[key]

    def add(self, points: Sequence[Point]) -> list[list[dict[str, Any]]]:
        """Points just finished (one bootstrap for their figures); each one's rows. The view is
        written again when `every` seconds have passed since it last was."""
        drawn = results_rows(points)
        self._points.update((p.key, p) for p in points)
        self._rows.update(drawn)
        if time.monotonic() - self._written >= self.every:
            self._write()
        return [drawn[p.key] for p in points]

    def _write(self) -> pd.DataFrame:
        self._written = time.monotonic()
        ordered = in_order(list(self._points.values()))
        return write_results(self.out, [row for p in ordered for row in self._rows[p.key]])

    def final(self, points: Sequence[Point]) -> pd.DataFrame:
        """The view of `points` (every finished point, as `read_points` gives them), written, and
        the frame it holds."""
        self._points = {p.key: p for p in points}
        self._rows.update(results_rows([p for p in points if p.key not in self._rows]))
        return self._write()


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
    check_files=check_points,
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
