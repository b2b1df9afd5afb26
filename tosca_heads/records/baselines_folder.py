"""A baselines folder (`tosca baselines`): one folder per baseline holding its metrics.json (the
metrics block `tosca fit` writes, under the router "none", and under "validation" where a split is
held out, with its intervals; the baseline's own parameters; `reference` when it is no continual
method), its results.csv (A_t per task and split, with A_t_low, A_t_high and images) and its
outcomes.safetensors (`records.outcomes`), and the comparison files beside TOSCA's routers:
comparison.csv (every figure with `_low`/`_high` columns and `images`), .md and .png.
Format `records.FORMAT`: a baseline's metrics.json of another one (or none) is refused in one line,
and so is a baselines folder that holds one (`check_formats`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from featcache.store import FeatureStore
from tosca_foundation import atomic
from tosca_foundation.errors import UserError
from tosca_foundation.files import read_bytes, read_json
from tosca_heads.method.baseline_registry import BASELINES
from tosca_heads.method.metrics import RANKED, figures, intervals_said, shown, with_interval
from tosca_heads.method.protocol import NO_VALIDATION, StreamConfig, ValidationConfig
from tosca_heads.method.uncertainty import Outcomes
from tosca_heads.records import (
    FORMAT,
    check_format,
    plots,
    store_block,
    valid_metrics_block,
    validation_record,
)
from tosca_heads.records.claim import FolderKind, mark
from tosca_heads.records.derived import check_figures, recorded_blocks
from tosca_heads.records.outcomes import OUTCOMES, read_outcomes, write_outcomes
from tosca_heads.records.run_folder import stage_interval
from tosca_heads.records.table import Table

if TYPE_CHECKING:  # pandas is loaded where a comparison is tabled: a sweep's first line needs none
    import pandas as pd

NO_ROUTING = "none"
COMPARISON_FILES = ("comparison.csv", "comparison.md", "comparison.png")
BASELINE_FILES = ("metrics.json", "results.csv", OUTCOMES)
COMPARISON_HEADER = "method,routing,A_bar,A_last,"


@dataclass
class MethodResult:
    """One row of the comparison: a baseline, or TOSCA under one router; its metrics on test, and
    on the validation split where one is held out. `reference` says what makes it no honest
    result ("" when it is one): a router told the task or letting a batch vote, a baseline that
    sees every task at once."""

    method: str
    routing: str
    metrics: dict[str, Any]
    parameters: int
    seconds: float
    validation: dict[str, Any] | None = None
    reference: str = ""
    outcomes: dict[str, Outcomes] | None = None  # per split, which images it answered right (None: not kept)


def is_baselines_dir(folder: Path) -> bool:
    """A baselines folder written before folders carried tosca's marker: nothing but the comparison
    files (comparison.csv with tosca's header) and folders named after baselines, each holding a
    metrics.json that tosca wrote for that baseline (and its results.csv); at least one of those."""
    written = 0
    for entry in Path(folder).iterdir():
        if entry.is_file() and entry.name in COMPARISON_FILES:
            if entry.name == "comparison.csv" and not _starts_with(entry, COMPARISON_HEADER):
                return False
            continue
        if not (entry.is_dir() and entry.name in BASELINES):
            return False
        if any(f.name not in BASELINE_FILES for f in entry.iterdir()):
            return False
        try:
            metrics = read_json(entry / "metrics.json", "baseline metrics", "")
        except UserError:
            return False
        if not isinstance(metrics, dict) or metrics.get("method") != entry.name:
            return False
        written += 1
    return written > 0


def _starts_with(path: Path, text: str) -> bool:
    try:  # bounded: never a fifo
        return read_bytes(path, "table").decode("utf-8", errors="replace").startswith(text)
    except UserError:
        return False


def check_formats(folder: Path) -> None:
    """Refuse, in one line, a baselines folder holding a baseline's metrics.json of another format
    (written before tosca's first release, or by a newer tosca): it is never written over."""
    for path in sorted(Path(folder).glob("*/metrics.json")) if Path(folder).is_dir() else []:
        read_baseline(path)


BASELINES_FOLDER = FolderKind(
    name="baselines",
    flag="--out",
    noun="baselines folder",
    written_before=is_baselines_dir,
    check_files=check_formats,
)


def write_baseline(
    folder: Path,
    result: MethodResult,
    store: FeatureStore,
    stream_cfg: StreamConfig,
    params: dict[str, Any] | None = None,
    validation: ValidationConfig = NO_VALIDATION,
    *,
    held_ids: Sequence[str],
) -> None:
    """One baseline's folder inside a claimed baselines folder: metrics.json (with the baseline's
    own parameters, RanPAC's M and seed, and the validation split) and results.csv."""
    mark(folder.parent, BASELINES_FOLDER)
    folder.mkdir(exist_ok=True)
    payload = {
        **store_block(store, described=False),
        "method": result.method,
        "stream": asdict(stream_cfg),
        "params": params or {},
        "finished_tasks": len(result.metrics["A_t"]),
        "parameters": result.parameters,
        "seconds": result.seconds,
        "reference": result.reference,
        "routers": {NO_ROUTING: result.metrics},
    }
    if validation.enabled:
        payload["validation_split"] = validation_record(validation, held_ids)
    if result.validation is not None:
        payload["validation"] = {NO_ROUTING: result.validation}
    if result.outcomes:
        write_outcomes(folder / OUTCOMES, {split: {result.method: o} for split, o in result.outcomes.items()})
    else:
        (folder / OUTCOMES).unlink(missing_ok=True)  # an earlier run's would pass for this one's
    atomic.write_text(folder / "metrics.json", json.dumps(payload, indent=2) + "\n")
    outcomes, rows = result.outcomes or {}, []
    for split, block in (("test", result.metrics), ("validation", result.validation)):
        for task, a in enumerate((block or {}).get("A_t", [])):
            rows.append(
                [FORMAT, task, split, NO_ROUTING, f"{a:.6f}", *stage_interval(outcomes.get(split), task, a)]
            )
    header = ["format", "task", "split", "router", "A_t", "A_t_low", "A_t_high", "images"]
    Table(f"{result.method}: A_t per task", "", header, rows).write(folder / "results.csv", ("csv",))


def read_baseline_outcomes(folder: Path, payload: dict[str, Any]) -> dict[str, Outcomes]:
    """A baseline folder's outcomes per split, every figure of its metrics (`read_baseline`'s
    payload) checked against them (`records.derived`): one line when they are missing or do not
    give its figures."""
    hint = "delete the folder to compute the baseline again"
    found = read_outcomes(Path(folder) / OUTCOMES, hint)
    method = payload["method"]
    blocks = {"test": {method: payload["routers"][NO_ROUTING]}}
    if payload.get("validation"):
        blocks["validation"] = {method: payload["validation"][NO_ROUTING]}
    check_figures(recorded_blocks(found, blocks, f"{folder}: metrics.json", hint))
    return {split: named[method] for split, named in found.items() if method in named}


def read_baseline(path: Path) -> dict[str, Any] | None:
    """A baseline's metrics.json, or None when the file is not one tosca wrote or was damaged (a scan
    for baselines passes it over); one of another format is refused in one line."""
    try:
        payload = read_json(path, "baseline metrics", "")
    except UserError:
        return None
    if not isinstance(payload, dict) or not isinstance(payload.get("method"), str):
        return None
    check_format(path, payload.get("format"), "baseline metrics")
    routers = payload.get("routers")
    block = routers.get(NO_ROUTING) if isinstance(routers, dict) else None
    if not valid_metrics_block(block):
        return None
    held = payload.get("validation")
    if held is not None and not (isinstance(held, dict) and valid_metrics_block(held.get(NO_ROUTING))):
        return None
    return {**payload, "routers": {NO_ROUTING: block}}


def read_baseline_figures(path: Path) -> dict[str, Any] | None:
    """A baseline's metrics.json as `read_baseline` reads it, every figure checked against its kept
    answers (`read_baseline_outcomes`): what a table, a tracker or a ranking shows of it."""
    payload = read_baseline(path)
    if payload is not None:
        read_baseline_outcomes(Path(path).parent, payload)
    return payload


def baseline_differences(
    payload: dict[str, Any],
    fingerprint: str,
    stream_cfg: StreamConfig,
    params: dict[str, Any],
    validation_split: dict[str, Any] | None,
) -> list[tuple[str, Any, Any]]:
    """What a baseline's metrics.json (`read_baseline`'s payload) was made with that is not what is
    asked now: (what, made, asked) for its store's fingerprint, task split (class order included),
    own parameters and validation split (`validation_record`, None without one)."""
    compared = (
        ("store_fingerprint", payload.get("store_fingerprint"), fingerprint),
        ("task split", payload.get("stream"), asdict(stream_cfg)),
        ("parameters", payload.get("params", {}), json.loads(json.dumps(params))),
        ("validation split", payload.get("validation_split"), validation_split),
    )
    return [(what, made, asked) for what, made, asked in compared if made != asked]


def reusable_baseline(
    folder: Path,
    method: str,
    store: FeatureStore,
    stream_cfg: StreamConfig,
    tasks: int,
    params: dict[str, Any],
    validation_split: dict[str, Any] | None,
) -> MethodResult | None:
    """The result `folder` holds of `method` when it was made from this very store (its
    fingerprint), task split, parameters and validation split, every task finished: read as
    `read_baseline_figures` reads it (every figure checked against its kept answers, a damaged or
    edited one refused in one line), so a rerun reuses it where computing it again would give the
    same numbers. None when the folder holds none, or one made otherwise (computed again then)."""
    path = Path(folder) / "metrics.json"
    if not path.is_file():
        return None
    payload = read_baseline(path)
    if (
        payload is None
        or payload["method"] != method
        or payload.get("finished_tasks") != tasks
        or baseline_differences(payload, store.fingerprint, stream_cfg, params, validation_split)
    ):
        return None
    outcomes = read_baseline_outcomes(folder, payload)  # as `read_baseline_figures`, the answers kept
    held = payload.get("validation")
    return MethodResult(
        method,
        NO_ROUTING,
        payload["routers"][NO_ROUTING],
        int(payload.get("parameters", 0)),
        float(payload.get("seconds", 0.0)),
        None if held is None else held[NO_ROUTING],
        str(payload.get("reference", "")),
        outcomes,
    )


def bounds(block: dict[str, Any] | None, prefix: str = "") -> dict[str, Any]:
    """A metrics block's intervals as plain columns: `{prefix}{metric}_low`, `_high` and
    `{prefix}images` (None where the block has none)."""
    intervals = (block or {}).get("intervals", {})
    columns: dict[str, Any] = {f"{prefix}images": (block or {}).get("images")}
    for metric in with_interval():
        low, high = intervals.get(metric.name, [None, None])
        columns.update({f"{prefix}{metric.name}_low": low, f"{prefix}{metric.name}_high": high})
    return columns


def comparison_frame(results: list[MethodResult]) -> pd.DataFrame:
    """One row per method (and TOSCA router), test figures with their intervals (`_low`, `_high`
    and the `images` they are over); `val_A_last` (its interval, `val_images`) on the validation
    split where one is held out; `reference` says why a row is no honest result ("" when it is one)."""
    import pandas as pd

    rows = [
        {
            "method": r.method,
            "routing": r.routing,
            **{m.name: r.metrics.get(m.name) for m in figures()},
            "parameters": r.parameters,
            "seconds": r.seconds,
            "A_t": json.dumps([round(a, 6) for a in r.metrics["A_t"]]),
            f"val_{RANKED}": None if r.validation is None else r.validation[RANKED],
            "reference": r.reference,
            **bounds(r.metrics),
            **{
                k: v
                for k, v in bounds(r.validation, "val_").items()
                if k in ("val_images", f"val_{RANKED}_low", f"val_{RANKED}_high")
            },
        }
        for r in results
    ]

    return pd.DataFrame(rows)


def _number(value: Any) -> float | None:
    """A frame's cell as a number (None for a missing one: NaN or None)."""
    import pandas as pd

    return None if value is None or pd.isna(value) else float(value)


def comparison_table(frame: pd.DataFrame, title: str) -> Table:
    """The comparison as a `records.table.Table`: its shown cells, and `frame` as it is kept."""

    shown_figures = figures()
    header = ["method", "routing", *(m.label for m in shown_figures), "parameters", "seconds", "reference"]
    note = (
        "Accuracies in %, on the test split, each with its 95% interval over the test images [low, high] "
        f"({intervals_said()}, method.uncertainty). "
        "A row marked as a reference is no honest result: a router "
        "told the task or letting a test batch vote, or a method that sees every task at once."
    )
    rows = []
    for _, r in frame.iterrows():
        cells = [  # the routing accuracy: "–" for a baseline, which routes nothing
            shown(
                m,
                _number(r.get(m.name)),
                _number(r.get(f"{m.name}_low")),
                _number(r.get(f"{m.name}_high")),
                2,
            )
            for m in shown_figures
        ]
        counts = [f"{int(r['parameters']):,}", f"{r['seconds']:.1f}", r["reference"] or ""]
        rows.append([r["method"], r["routing"], *cells, *counts])
    return Table(title, note, header, rows, frame)


def write_comparison(out: Path, results: list[MethodResult], title: str) -> dict[str, Path]:
    mark(out, BASELINES_FOLDER)
    frame = comparison_frame(results)
    comparison_table(frame, title).write(out / "comparison.md", ("csv", "md"))
    plots.comparison(frame.to_dict("records"), title, out / "comparison.png")
    return {name: out / name for name in COMPARISON_FILES}
