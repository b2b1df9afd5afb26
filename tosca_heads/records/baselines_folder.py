"""A baselines folder (`tosca baselines`): one cell per baseline (`records.cell`: asked.json,
measured.json, outcomes.safetensors, done.json written last), its figures computed from its kept
answers when read, and the views drawn from the cells, written and never read back: each
baseline's metrics.json (the metrics block `tosca fit` writes, under the router "none") and
results.csv (A_t per task and split, with A_t_low, A_t_high and images), and the comparison beside
TOSCA's routers: comparison.csv (every figure with `_low`/`_high` columns and `images`), .md and
.png. A baselines folder written before cells (a baseline's metrics.json without its asked.json)
is refused in one line (`check_formats`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from featcache.store import FeatureStore
from tosca_foundation import atomic
from tosca_foundation.errors import UserError
from tosca_foundation.files import read_bytes, read_json
from tosca_heads.method.baseline_registry import BASELINES, parameter_count
from tosca_heads.method.metrics import RANKED, figures, intervals_said, shown, with_interval
from tosca_heads.method.protocol import StreamConfig
from tosca_heads.method.uncertainty import Outcomes
from tosca_heads.records import FORMAT, cell, plots
from tosca_heads.records.claim import FolderKind, mark
from tosca_heads.records.outcomes import OUTCOMES
from tosca_heads.records.run_folder import stage_interval
from tosca_heads.records.table import Table

if TYPE_CHECKING:  # pandas is loaded where a comparison is tabled: a sweep's first line needs none
    import pandas as pd

NO_ROUTING = "none"
NOT_DECLARED = "not declared"  # the parameter count of a plug-in without `parameters_for`
COMPARISON_FILES = ("comparison.csv", "comparison.md", "comparison.png")
BASELINE_FILES = ("metrics.json", "results.csv", OUTCOMES, *cell.CELL_FILES)
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
    parameters: int | None  # None: a plug-in that declares no `parameters_for` ("not declared")
    seconds: float
    validation: dict[str, Any] | None = None
    reference: str = ""
    outcomes: dict[str, Outcomes] | None = None  # per split, which images it answered right (None: not kept)


def is_baselines_dir(folder: Path) -> bool:
    """A baselines folder written before folders carried tosca's marker: nothing but the comparison
    files (comparison.csv with tosca's header) and folders named after baselines, each holding a
    metrics.json that tosca wrote for that baseline; at least one of those (`check_formats` then
    refuses it as written before cells)."""
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
    """Refuse, in one line and before anything is said or written, a baselines folder holding a
    baseline written before cells (its metrics.json without its asked.json), or a finished cell
    edited or damaged since (`baseline_result`): it is never written over. A cell never finished
    (no done.json) is left to be computed again."""
    if not Path(folder).is_dir():
        return
    for entry in sorted(Path(folder).iterdir()):
        if (entry / "metrics.json").is_file() and not cell.is_cell(entry):
            raise UserError(
                f"{entry} was written before baselines were kept as cells (a metrics.json, no "
                f"{cell.ASKED}): delete it and run the baselines again"
            )
        if entry.is_dir() and (entry / cell.DONE).exists():
            baseline_result(entry)


BASELINES_FOLDER = FolderKind(
    name="baselines",
    flag="--out",
    noun="baselines folder",
    written_before=is_baselines_dir,
    check_files=check_formats,
)
REDO = "delete the folder to compute the baseline again"


def baseline_asked(
    method: str,
    store: FeatureStore,
    stream_cfg: StreamConfig,
    params: dict[str, Any],
    validation_split: dict[str, Any] | None,
) -> dict[str, Any]:
    """What a baseline cell is asked (its asked.json): the store's identity with its feature dim and
    classes (what its parameter count is worked out from, `parameters_of`), the task split, the
    validation split (`records.validation_record`, None without one), the method and its own
    parameters, and the versions that change its numbers."""
    ident = store.identity
    return {
        "kind": "baseline",
        "store": {
            "fingerprint": store.fingerprint,
            "dataset": ident["dataset"]["name"],
            "backbone": ident["backbone"]["alias"],
            "dim": store.dim,
            "classes": store.shape.classes,
        },
        "stream": asdict(stream_cfg),
        "validation_split": validation_split,
        "method": method,
        "params": json.loads(json.dumps(params)),
        "versions": cell.versions(),
    }


def write_baseline(folder: Path, result: MethodResult, asked: dict[str, Any], device: str) -> MethodResult:
    """One baseline's cell inside a claimed baselines folder (its done.json last), then its views;
    the row as read back from the cell (what a rerun that reuses it shows)."""
    mark(folder.parent, BASELINES_FOLDER)
    answers = {split: {result.method: o} for split, o in (result.outcomes or {}).items()}
    given = cell.figures(answers).get("test", {}).get(result.method, {})
    measured = {
        "seconds": result.seconds,
        "machine": cell.machine(device),
        "beside": {k: v for k, v in result.metrics.items() if k not in given},  # a knob chosen, state bytes
    }
    cell.write_cell(folder, asked, measured, answers)
    kept = baseline_result(folder)
    write_views(folder, kept, asked)
    return kept


def baseline_reference(name: str) -> str:
    """What makes a registered baseline a reference, in words ("" for an honest continual method):
    its class's `reference` (True, or the words)."""
    declared = getattr(BASELINES[name], "reference", False) if name in BASELINES else False
    return declared if isinstance(declared, str) else ("a reference" if declared else "")


def result_of(found: cell.Cell) -> MethodResult:
    """A baseline cell's row: its figures computed from its answers, what it measured beside them."""
    method = found.asked["method"]
    blocks = cell.figures(found.answers)
    test = {**blocks["test"][method], **found.measured.get("beside", {})}
    held = blocks.get("validation", {}).get(method)
    outcomes = {split: named[method] for split, named in found.answers.items() if method in named}
    return MethodResult(
        method,
        NO_ROUTING,
        test,
        parameters_of(found),
        found.seconds,
        held,
        baseline_reference(method),
        outcomes,
    )


def parameters_of(found: cell.Cell) -> int | None:
    """A baseline cell's parameter count, worked out from what it was asked (its method, its
    parameters, the store's dim and classes: `baseline_registry.parameter_count`), never read from
    a file: no file holds a count to edit (a measured.json written before this kept one, ignored).
    A cell asked before asked.json held the store's dim and classes is one line."""
    store = found.asked.get("store")
    dim, classes = (store.get("dim"), store.get("classes")) if isinstance(store, dict) else (None, None)
    if not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in (dim, classes)):
        raise UserError(
            f"{found.folder / cell.ASKED}: its store has no feature dim and classes to count the "
            f"parameters from (a cell written before counts were worked out from what was asked); {REDO}"
        )
    params = found.asked.get("params")
    return parameter_count(found.asked["method"], params if isinstance(params, dict) else {}, dim, classes)


def baseline_result(folder: Path) -> MethodResult:
    """A finished baseline cell's row, every file checked whole: one line otherwise."""
    return result_of(cell.read_cell(folder, REDO))


def reusable_baseline(folder: Path, asked: dict[str, Any]) -> MethodResult | None:
    """The row `folder` holds when its cell is reusable (`cell.reusable`: finished, whole, asked
    the same); None when it holds none, one never finished, or one asked otherwise (computed
    again then). A finished cell edited or damaged since is one line."""
    if not cell.reusable(folder, asked, REDO):
        return None
    kept = baseline_result(folder)
    write_views(folder, kept, asked)  # a cell stopped after its done.json has them now
    return kept


def write_views(folder: Path, result: MethodResult, asked: dict[str, Any]) -> None:
    """A baseline's views, drawn from its cell and never read back: metrics.json (what it was asked,
    its blocks, parameters and seconds) and results.csv (A_t per task and split, with its interval
    and images)."""
    payload: dict[str, Any] = {
        "method": result.method,
        "params": asked["params"],
        "stream": asked["stream"],
        "finished_tasks": len(result.metrics["A_t"]),
        "parameters": result.parameters,
        "seconds": result.seconds,
        "reference": result.reference,
        "routers": {NO_ROUTING: result.metrics},
    }
    if result.validation is not None:
        payload["validation"] = {NO_ROUTING: result.validation}
    atomic.write_text(folder / "metrics.json", json.dumps(payload, indent=2) + "\n")
    outcomes, rows = result.outcomes or {}, []
    for split, block in (("test", result.metrics), ("validation", result.validation)):
        for task, a in enumerate((block or {}).get("A_t", [])):
            rows.append(
                [FORMAT, task, split, NO_ROUTING, f"{a:.6f}", *stage_interval(outcomes.get(split), task, a)]
            )
    header = ["format", "task", "split", "router", "A_t", "A_t_low", "A_t_high", "images"]
    Table(f"{result.method}: A_t per task", "", header, rows).write(folder / "results.csv", ("csv",))


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


def counted(parameters: float | None) -> str:
    """A parameter count as tables print it: 12,800, or "not declared" for a plug-in that gives
    no `parameters_for`."""
    return NOT_DECLARED if parameters is None else f"{int(parameters):,}"


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
        counts = [counted(_number(r["parameters"])), f"{r['seconds']:.1f}", r["reference"] or ""]
        rows.append([r["method"], r["routing"], *cells, *counts])
    return Table(title, note, header, rows, frame)


def write_comparison(out: Path, results: list[MethodResult], title: str) -> dict[str, Path]:
    mark(out, BASELINES_FOLDER)
    frame = comparison_frame(results)
    comparison_table(frame, title).write(out / "comparison.md", ("csv", "md"))
    plots.comparison(frame.to_dict("records"), title, out / "comparison.png")
    return {name: out / name for name in COMPARISON_FILES}
