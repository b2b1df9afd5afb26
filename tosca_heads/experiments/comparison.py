"""Baselines under TOSCA's protocol (same store, class order, tasks, test rows, metrics), and the one
comparison table with TOSCA's routers beside them: comparison.csv, .md and .png.

A baselines folder holds the comparison files and one folder per baseline with a metrics.json
(the metrics block `tosca fit` writes, under the router "none"; "format" 2) and a results.csv.
`compare(BaselinesRequest)` is what `tosca baselines` asks for.
"""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from featcache.foundation import atomic, folders
from featcache.foundation.devices import resolve_device
from featcache.foundation.errors import UserError
from featcache.foundation.files import read_bytes, read_json
from featcache.foundation.limits import require_memory
from featcache.store import FeatureStore, check_not_replaced, check_readable, resolve_store
from tosca_heads.experiments import plots, runfiles
from tosca_heads.experiments.requests import BaselinesRequest
from tosca_heads.experiments.runs import RunResult, evaluate_run, fit_run, request_protocol
from tosca_heads.method.baselines import BASELINES, single_threaded
from tosca_heads.method.features import CachedFeatures, FeatureSource
from tosca_heads.method.metrics import accuracy, block_accuracies, summarise
from tosca_heads.method.protocol import (
    HELD_OUT,
    NO_VALIDATION,
    ProtocolReport,
    StreamConfig,
    TaskStream,
    ValidationConfig,
    split_name,
)
from tosca_heads.method.recipe import PRESETS
from tosca_heads.routers import reference_text

NO_ROUTING = "none"
FORMAT = 3  # a baseline's metrics.json and results.csv (3: the validation split)
COMPARISON_FILES = ("comparison.csv", "comparison.md", "comparison.png")
BASELINE_FILES = ("metrics.json", "results.csv")
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


TaskCallback = Callable[[str, int, int], None]  # (baseline, task, tasks)


def run_baseline(
    name: str,
    store: FeatureStore,
    stream_cfg: StreamConfig,
    source: FeatureSource | None = None,
    on_task: TaskCallback | None = None,
    device: str | torch.device = "cpu",
    validation: ValidationConfig = NO_VALIDATION,
    **params: Any,
) -> MethodResult:
    """Learn task by task (all seen classes at once for the joint probe); evaluate after each task
    on test and, with a validation split, on the held-out training rows (which never train).
    Computed on one CPU thread: the same numbers in a suite's worker and from the single command,
    whatever OMP_NUM_THREADS says (multithreaded BLAS sums in another order)."""
    if name not in BASELINES:
        raise UserError(f"unknown baseline {name!r}: use one of {', '.join(BASELINES)}")
    check_readable(store)
    check_baseline_params(name, params, store.dim)
    validation.validate()
    fingerprint = store.fingerprint  # as opened: checked again after the last read
    stream = stream_cfg.task_stream(store.shape.classes)
    source = source or CachedFeatures(store, device=device)
    labels = stream.remap(store.labels("train"))
    held = validation.carve(store.labels("train"), store.identity["dataset"].get("class_names"))
    train_y = labels.copy()
    train_y[held] = HELD_OUT  # never trained on
    test_y = stream.remap(store.labels("test"))
    train_x = source.clean("train", np.arange(len(train_y))).to(device)
    scored = {"test": (source.clean("test", np.arange(len(test_y))).to(device), test_y)}
    if len(held):
        scored["validation"] = (train_x[_index(held, train_x)], labels[held])
    estimator = BASELINES[name](device=device, **params)
    curves: dict[str, tuple[list[float], list[list[float]]]] = {split: ([], []) for split in scored}
    start = time.perf_counter()
    with single_threaded(torch.device(device)):
        for task in range(stream.num_tasks):
            if estimator.incremental:
                rows = stream.rows_of_task(train_y, task)
                estimator.partial_fit(train_x[_index(rows, train_x)], train_y[rows])
            else:
                rows = stream.rows_seen(train_y, task)
                estimator.fit(train_x[_index(rows, train_x)], train_y[rows])
            for split, (x, y) in scored.items():
                seen = stream.rows_seen(y, task)
                pred = checked_predictions(
                    name, estimator.predict(x[_index(seen, x)]), len(seen), task, stream
                )
                curves[split][0].append(accuracy(pred, y[seen]))
                curves[split][1].append(block_accuracies(pred, y[seen], stream.task_of(y[seen]), task + 1))
            if on_task:
                on_task(name, task, stream.num_tasks)
    check_not_replaced(store.path, fingerprint, f"baseline {name!r}")
    metrics = summarise(*curves["test"])
    if hasattr(estimator, "ridge_"):
        metrics["ridge"] = estimator.ridge_
    held_out = summarise(*curves["validation"]) if "validation" in curves else None
    reference = baseline_reference(name)
    return MethodResult(
        name,
        NO_ROUTING,
        metrics,
        estimator.num_parameters(),
        time.perf_counter() - start,
        held_out,
        reference,
    )


def baseline_reference(name: str) -> str:
    """What makes a registered baseline a reference, in words ("" for an honest continual method):
    its class's `reference` (True, or the words)."""
    declared = getattr(BASELINES[name], "reference", False)
    return declared if isinstance(declared, str) else ("a reference" if declared else "")


def check_baseline_params(name: str, params: dict[str, Any], dim: int) -> None:
    """A baseline's own parameters, checked once for the dry run and the real one: one line each."""
    if name != "ranpac":
        return
    m = params.get("projection_dim", 10_000)
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise UserError(f"RanPAC's projection size M must be an integer of at least 1, got {m!r}")
    seed = params.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise UserError(f"--ranpac-seed must be in [0, 2**32), got {seed!r}")
    check_ranpac_size(m, dim)


def checked_predictions(name: str, pred: Any, n: int, task: int, stream: TaskStream) -> np.ndarray:
    """A baseline's predictions as class ids, refused in one line unless they are what `predict` must
    give: n integers among the classes seen so far. A plug-in's [n, 1] or NaN would otherwise be
    scored as a plausible but meaningless accuracy."""
    seen = stream.init_cls + task * stream.increment
    values = pred.detach().cpu().numpy() if isinstance(pred, torch.Tensor) else pred
    if not isinstance(values, np.ndarray):
        raise UserError(
            f"baseline {name!r}: predict returned {type(pred).__name__}, not an array of class ids"
        )
    if values.shape != (n,):
        raise UserError(
            f"baseline {name!r}: predict returned shape {list(values.shape)}, not [{n}] (one class id per test sample)"
        )
    if not np.issubdtype(values.dtype, np.integer):
        raise UserError(f"baseline {name!r}: predict returned {values.dtype} values, not integer class ids")
    if n and (values.min() < 0 or values.max() >= seen):
        wrong = int(values.min()) if values.min() < 0 else int(values.max())
        raise UserError(
            f"baseline {name!r}: predicted class {wrong}; the classes seen so far are 0 to {seen - 1}"
        )
    return values


def baseline_params(method: str, ranpac_m: int, ranpac_seed: int) -> dict[str, Any]:
    """A baseline's own parameters as `tosca baselines` sets them (RanPAC: M and the projection's
    seed; the others have none and are deterministic)."""
    return {"projection_dim": ranpac_m, "seed": ranpac_seed} if method == "ranpac" else {}


def check_ranpac_size(m: int, dim: int) -> None:
    """RanPAC's M x M float64 Gram matrix (with its regularised copy and Cholesky factor) must fit."""
    require_memory(f"RanPAC with M = {m:,}", 3 * 8 * m * m + 4 * m * dim, "lower --ranpac-m")


def _index(rows: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(rows).to(like.device)


def tosca_results(run: RunResult) -> list[MethodResult]:
    """TOSCA's rows: one per router; parameters = all task modules plus the classifier."""
    metrics = run.metrics()
    tasks = metrics["finished_tasks"]
    classes = run.config["stream"]["init_cls"] + (tasks - 1) * run.config["stream"]["increment"]
    parameters = tasks * metrics["params_per_task"] + classes * run.config["feature_dim"] + 1
    train_s = sum(s.stats["seconds"] for s in run.stages)
    held = metrics.get("validation") or {}
    return [
        MethodResult("tosca", name, block, parameters, train_s, held.get(name), reference_text(name))
        for name, block in metrics["routers"].items()
    ]


def tosca_run(
    store: FeatureStore,
    stream_cfg: StreamConfig,
    run_dir: Path | None,
    source: FeatureSource | None = None,
    device: str | torch.device = "cpu",
    runs_root: Path = Path("runs"),
    validation: ValidationConfig = NO_VALIDATION,
) -> RunResult:
    """TOSCA on the same store, stream and validation split: a given run (all tasks finished), else
    the paper preset's default run under `runs_root`, fitted now unless it is already on disk."""
    if run_dir is None:
        train = PRESETS["paper"]
        config = runfiles.run_config(store, stream_cfg, train, validation)
        default = runfiles.default_run_dir(config, runs_root)
        return fit_run(
            store, stream_cfg, train, None, default, source=source, device=device, validation=validation
        )
    config = runfiles.read_run_config(
        run_dir
    )  # checked before evaluating: a run of another store is left alone
    if config["store_fingerprint"] != store.fingerprint:
        raise UserError(f"run {run_dir} was fitted on another store ({config['store']}); pass its --store")
    if config["stream"] != asdict(stream_cfg):
        raise UserError(
            f"run {run_dir} uses stream {config['stream']}, the baselines {asdict(stream_cfg)}; "
            "pass the same --init-cls/--increment"
        )
    if runfiles.validation_of(config, run_dir) != validation:
        raise UserError(
            f"run {run_dir} holds out another validation split ({config.get('validation', 'none')}) than the "
            f"baselines ({validation.record() if validation.enabled else 'none'}); pass the same --val-fraction"
        )
    result = evaluate_run(run_dir, source, device)
    tasks = stream_cfg.task_stream(store.shape.classes).num_tasks
    if len(result.stages) < tasks:
        raise UserError(
            f"run {run_dir} has {len(result.stages)} of {tasks} tasks; finish it with `tosca fit --run {run_dir}`"
        )
    return result


# ------------------------------------------------------------------------------------------ the folder


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


def check_baselines_folder(folder: Path) -> None:
    """Refuse now, before anything runs, a folder a baselines run may not write."""
    folders.check_claimable(folder, "baselines", "--out", written_before=is_baselines_dir)


def write_baseline(
    folder: Path,
    result: MethodResult,
    store: FeatureStore,
    stream_cfg: StreamConfig,
    params: dict[str, Any] | None = None,
    validation: ValidationConfig = NO_VALIDATION,
) -> None:
    """One baseline's folder inside a claimed baselines folder: metrics.json (with the baseline's
    own parameters, RanPAC's M and seed, and the validation split) and results.csv."""
    folders.claim(folder.parent, "baselines", "--out", written_before=is_baselines_dir)
    folder.mkdir(exist_ok=True)
    payload = {
        "format": FORMAT,
        "method": result.method,
        "store": str(store.path.resolve()),
        "store_fingerprint": store.fingerprint,
        "stream": asdict(stream_cfg),
        "params": params or {},
        "finished_tasks": len(result.metrics["A_t"]),
        "parameters": result.parameters,
        "seconds": result.seconds,
        "reference": result.reference,
        "routers": {NO_ROUTING: result.metrics},
    }
    if validation.enabled:
        payload["validation_split"] = runfiles.validation_record(store, validation)
    if result.validation is not None:
        payload["validation"] = {NO_ROUTING: result.validation}
    atomic.write_text(folder / "metrics.json", json.dumps(payload, indent=2) + "\n")
    with atomic.writing(folder / "results.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["format", "task", "split", "router", "A_t"])
        for split, block in (("test", result.metrics), ("validation", result.validation)):
            for task, a in enumerate((block or {}).get("A_t", [])):
                writer.writerow([FORMAT, task, split, NO_ROUTING, f"{a:.6f}"])


def read_baseline(path: Path) -> dict[str, Any] | None:
    """A baseline's metrics.json in this version's form (format 1 said "modes"), or None when the
    file is not one tosca wrote or was damaged (a scan for baselines passes it over)."""
    try:
        payload = read_json(path, "baseline metrics", "")
    except UserError:
        return None
    if not isinstance(payload, dict) or not isinstance(payload.get("method"), str):
        return None
    routers = payload.get("routers", payload.get("modes"))
    block = routers.get(NO_ROUTING) if isinstance(routers, dict) else None
    if not runfiles.valid_metrics_block(block):
        return None
    held = payload.get("validation")
    if held is not None and not (
        isinstance(held, dict) and runfiles.valid_metrics_block(held.get(NO_ROUTING))
    ):
        return None
    return {**payload, "routers": {NO_ROUTING: block}}


def comparison_frame(results: list[MethodResult]) -> pd.DataFrame:
    """One row per method (and TOSCA router), test figures; `val_A_last` on the validation split
    where one is held out; `reference` says why a row is no honest result ("" when it is one)."""
    rows = [
        {
            "method": r.method,
            "routing": r.routing,
            "A_bar": r.metrics["A_bar"],
            "A_last": r.metrics["A_last"],
            "forgetting": r.metrics["forgetting"],
            "routing_accuracy": r.metrics["routing_accuracy"],
            "parameters": r.parameters,
            "seconds": r.seconds,
            "A_t": json.dumps([round(a, 6) for a in r.metrics["A_t"]]),
            "val_A_last": None if r.validation is None else r.validation["A_last"],
            "reference": r.reference,
        }
        for r in results
    ]
    return pd.DataFrame(rows)


def comparison_markdown(frame: pd.DataFrame, title: str) -> str:
    header = ["method", "routing", "A_bar", "A_last", "forgetting", "routing acc", "parameters", "seconds"]
    header.append("reference")
    note = (
        "Accuracies in %, on the test split. A row marked as a reference is no honest result: a router "
        "told the task or letting a test batch vote, or a method that sees every task at once."
    )
    lines = [f"# {title}", "", note, "", "| " + " | ".join(header) + " |"]
    lines.append("|" + "|".join("---" for _ in header) + "|")
    for _, r in frame.iterrows():
        routing_acc = "–" if pd.isna(r["routing_accuracy"]) else f"{100 * r['routing_accuracy']:.2f}"
        cells = [
            r["method"],
            r["routing"],
            f"{100 * r['A_bar']:.2f}",
            f"{100 * r['A_last']:.2f}",
            f"{100 * r['forgetting']:.2f}",
            routing_acc,
            f"{int(r['parameters']):,}",
            f"{r['seconds']:.1f}",
            r["reference"] or "",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_comparison(out: Path, results: list[MethodResult], title: str) -> dict[str, Path]:
    folders.claim(out, "baselines", "--out", written_before=is_baselines_dir)
    frame = comparison_frame(results)
    atomic.write_text(out / "comparison.csv", frame.to_csv(index=False))
    atomic.write_text(out / "comparison.md", comparison_markdown(frame, title))
    plots.comparison(frame.to_dict("records"), title, out / "comparison.png")
    return {name: out / name for name in COMPARISON_FILES}


# ------------------------------------------------------------------------------------------ the command


def check_request(request: BaselinesRequest) -> None:
    """The flags alone, before any store is opened."""
    unknown = [m for m in request.methods if m not in BASELINES]
    if unknown or not request.methods:
        raise UserError(
            f"unknown --methods {','.join(unknown) or '(none)'!r}: use any of {', '.join(BASELINES)}"
        )
    if request.ranpac_m < 1:
        raise UserError(f"--ranpac-m must be at least 1, got {request.ranpac_m}")
    if not 0 <= request.ranpac_seed < 2**32:
        raise UserError(f"--ranpac-seed must be in [0, 2**32), got {request.ranpac_seed}")
    if "ranpac" in request.methods:
        check_ranpac_size(request.ranpac_m, 1)
    if request.run is not None and request.with_tosca and not (request.run / runfiles.CONFIG).is_file():
        raise UserError(
            f"not a run directory: {request.run} (no config.json); pass a folder made by `tosca fit`"
        )


@dataclass
class Comparison:
    """What `compare` made: the rows of the table, its title, and the files written."""

    results: list[MethodResult]
    title: str
    files: dict[str, Path]


def compare(
    request: BaselinesRequest,
    on_task: TaskCallback | None = None,
    on_tosca: Callable[[Path | None], None] | None = None,
    on_start: Callable[[ProtocolReport], None] | None = None,
) -> Comparison:
    """`tosca baselines`: TOSCA's rows (a given run, or the paper preset's, fitted if missing) and each
    baseline's, under the same protocol (said through `on_start`), written into the baselines folder."""
    check_request(request)
    validation = ValidationConfig(request.val_fraction, request.val_seed)
    validation.validate()
    device = resolve_device(request.device)
    store = resolve_store(request.store, request.model, request.dataset, request.cache_dir)
    check_readable(store)
    ident = store.identity
    stream, protocol = request_protocol(
        store, request.init_cls, request.increment, request.order_seed, validation
    )
    split = split_name(stream.init_cls, stream.increment)
    held = f"-val{validation.fraction:g}-seed{validation.seed}" if validation.enabled else ""
    name = f"baselines-{ident['dataset']['name']}-{ident['backbone']['alias']}-{split.replace(' ', '')}{held}"
    folder = request.out or request.runs_root / name
    check_baselines_folder(folder)
    # read once (every chunk checked), for TOSCA's evaluation and every baseline, before anything is said
    source = CachedFeatures(store, device=device).preload()
    if on_start:
        on_start(protocol)
    results = []
    if request.with_tosca:
        if on_tosca:
            on_tosca(request.run)
        run = tosca_run(store, stream, request.run, source, device, request.runs_root, validation)
        results += tosca_results(run)
    for method in request.methods:
        params = baseline_params(method, request.ranpac_m, request.ranpac_seed)
        result = run_baseline(method, store, stream, source, on_task, device, validation, **params)
        write_baseline(folder / method, result, store, stream, params, validation)
        results.append(result)
    title = f"{ident['dataset']['name']} / {ident['backbone']['alias']}, {split}"
    return Comparison(results, title, write_comparison(folder, results, title))
