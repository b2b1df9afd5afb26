"""Baselines under TOSCA's protocol (same store, class order, tasks, test rows, metrics), and the
one comparison table with TOSCA's routing modes beside them: comparison.csv, .md and .png.

Each baseline also gets a folder like a run's: metrics.json (the same metrics block as
`tosca fit` writes, under the routing mode "none") and results.csv.
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
from featcache.foundation.errors import UserError
from featcache.foundation.limits import require_memory
from featcache.store import FeatureStore, check_readable
from tosca_heads.experiments.runs import RunResult
from tosca_heads.method.baselines import BASELINES
from tosca_heads.method.features import CachedFeatures, FeatureSource
from tosca_heads.method.metrics import accuracy, block_accuracies, summarise
from tosca_heads.method.protocol import StreamConfig
from tosca_heads.routers.scores import MODES

NO_ROUTING = "none"


@dataclass
class MethodResult:
    """One row of the comparison: a baseline, or TOSCA under one routing mode."""

    method: str
    routing: str
    metrics: dict[str, Any]
    parameters: int
    seconds: float


TaskCallback = Callable[[str, int, int], None]


def run_baseline(
    name: str,
    store: FeatureStore,
    stream_cfg: StreamConfig,
    source: FeatureSource | None = None,
    on_task: TaskCallback | None = None,
    device: str | torch.device = "cpu",
    **params: Any,
) -> MethodResult:
    """Learn task by task (all seen classes at once for the joint probe); evaluate after each task."""
    if name not in BASELINES:
        raise UserError(f"unknown baseline {name!r}: use one of {', '.join(BASELINES)}")
    check_readable(store)
    if name == "ranpac":
        check_ranpac_size(int(params.get("projection_dim", 10_000)), store.dim)
    stream = stream_cfg.task_stream(int(store.identity["dataset"]["num_classes"]))
    source = source or CachedFeatures(store, device=device)
    train_y, test_y = stream.remap(store.labels("train")), stream.remap(store.labels("test"))
    train_x = source.clean("train", np.arange(len(train_y))).to(device)
    test_x = source.clean("test", np.arange(len(test_y))).to(device)
    estimator = BASELINES[name](device=device, **params)
    curve: list[float] = []
    matrix: list[list[float]] = []
    start = time.perf_counter()
    for task in range(stream.num_tasks):
        if estimator.incremental:
            rows = stream.rows_of_task(train_y, task)
            estimator.partial_fit(train_x[_index(rows, train_x)], train_y[rows])
        else:
            rows = stream.rows_seen(train_y, task)
            estimator.fit(train_x[_index(rows, train_x)], train_y[rows])
        seen = stream.rows_seen(test_y, task)
        pred = estimator.predict(test_x[_index(seen, test_x)])
        curve.append(accuracy(pred, test_y[seen]))
        matrix.append(block_accuracies(pred, test_y[seen], stream.task_of(test_y[seen]), task + 1))
        if on_task:
            on_task(name, task, stream.num_tasks)
    metrics = summarise(curve, matrix)
    if name == "ranpac":
        metrics["ridge"] = estimator.ridge_
    return MethodResult(name, NO_ROUTING, metrics, estimator.num_parameters(), time.perf_counter() - start)


def check_ranpac_size(m: int, dim: int) -> None:
    """RanPAC's M x M float64 Gram matrix (with its regularised copy and Cholesky factor) must fit."""
    require_memory(f"RanPAC with M = {m:,}", 3 * 8 * m * m + 4 * m * dim, "lower --ranpac-m")


def _index(rows: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(rows).to(like.device)


def tosca_results(run: RunResult) -> list[MethodResult]:
    """TOSCA's rows: one per routing mode; parameters = all task modules plus the classifier."""
    metrics = run.metrics()
    tasks = metrics["finished_tasks"]
    classes = run.config["stream"]["init_cls"] + (tasks - 1) * run.config["stream"]["increment"]
    parameters = tasks * metrics["params_per_task"] + classes * run.config["feature_dim"] + 1
    train_s = sum(s.stats["seconds"] for s in run.stages)
    return [MethodResult("tosca", mode, metrics["modes"][mode], parameters, train_s) for mode in MODES]


COMPARISON_FILES = ("comparison.csv", "comparison.md", "comparison.png")
BASELINE_FILES = ("metrics.json", "results.csv")


def is_baselines_dir(folder: Path) -> bool:
    """A baselines folder written before folders carried tosca's marker: nothing but the comparison
    files (comparison.csv with tosca's header) and folders named after baselines, each holding a
    metrics.json that tosca wrote for that baseline (and its results.csv); at least one of those."""
    written = 0
    for entry in Path(folder).iterdir():
        if entry.is_file() and entry.name in COMPARISON_FILES:
            if entry.name == "comparison.csv" and not _starts_with(entry, "method,routing,A_bar,A_last,"):
                return False
            continue
        if not (entry.is_dir() and entry.name in BASELINES):
            return False
        if any(f.name not in BASELINE_FILES for f in entry.iterdir()):
            return False
        try:
            metrics = json.loads((entry / "metrics.json").read_text())
        except (OSError, ValueError):
            return False
        if not isinstance(metrics, dict) or metrics.get("method") != entry.name:
            return False
        written += 1
    return written > 0


def _starts_with(path: Path, text: str) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read(len(text)) == text
    except OSError:
        return False


def claim_baselines_folder(folder: Path) -> Path:
    """Create or take over a baselines folder (never a folder of someone else's files)."""
    return folders.claim(folder, "baselines", "--out", written_before=is_baselines_dir)


def check_baselines_folder(folder: Path) -> None:
    """Refuse now, before anything runs, a folder `claim_baselines_folder` would refuse."""
    folders.check_claimable(folder, "baselines", "--out", written_before=is_baselines_dir)


def write_baseline(folder: Path, result: MethodResult, store: FeatureStore, stream_cfg: StreamConfig) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    payload = {
        "method": result.method,
        "store": str(store.path.resolve()),
        "store_fingerprint": store.fingerprint,
        "stream": asdict(stream_cfg),
        "finished_tasks": len(result.metrics["A_t"]),
        "parameters": result.parameters,
        "seconds": result.seconds,
        "modes": {NO_ROUTING: result.metrics},
    }
    atomic.write_text(folder / "metrics.json", json.dumps(payload, indent=2) + "\n")
    with atomic.replacing(folder / "results.csv") as tmp, open(tmp, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["task", "mode", "A_t"])
        for task, a in enumerate(result.metrics["A_t"]):
            writer.writerow([task, NO_ROUTING, f"{a:.6f}"])


def comparison_frame(results: list[MethodResult]) -> pd.DataFrame:
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
        }
        for r in results
    ]
    return pd.DataFrame(rows)


def comparison_markdown(frame: pd.DataFrame, title: str) -> str:
    header = ["method", "routing", "A_bar", "A_last", "forgetting", "routing acc", "parameters", "seconds"]
    lines = [f"# {title}", "", "Accuracies in %.", "", "| " + " | ".join(header) + " |"]
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
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_comparison(frame: pd.DataFrame, title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for _, r in frame.iterrows():
        curve = json.loads(r["A_t"])
        label = r["method"] if r["routing"] == NO_ROUTING else f"{r['method']} ({r['routing']})"
        style = "-" if r["method"] == "tosca" else "--"
        ax.plot(range(len(curve)), [100 * a for a in curve], style, marker="o", markersize=3, label=label)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("task")
    ax.set_ylabel("accuracy on all seen classes (%)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    atomic.save_figure(fig, path, dpi=120)
    plt.close(fig)


def write_comparison(out: Path, results: list[MethodResult], title: str) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    frame = comparison_frame(results)
    atomic.write_text(out / "comparison.csv", frame.to_csv(index=False))
    atomic.write_text(out / "comparison.md", comparison_markdown(frame, title))
    plot_comparison(frame, title, out / "comparison.png")
    return {name: out / name for name in ("comparison.csv", "comparison.md", "comparison.png")}


def tosca_run(
    store: FeatureStore,
    stream_cfg: StreamConfig,
    run_dir: Path | None,
    source: FeatureSource | None = None,
    device: str | torch.device = "cpu",
) -> RunResult:
    """TOSCA on the same store and stream: a given run (all tasks finished), else the paper preset's
    default run, fitted now unless it is already on disk."""
    from tosca_heads.experiments.runfiles import read_run_config
    from tosca_heads.experiments.runs import evaluate_run, fit_run
    from tosca_heads.method.recipe import PRESETS

    if run_dir is None:
        return fit_run(store, stream_cfg, PRESETS["paper"], None, source=source, device=device)
    config = read_run_config(run_dir)  # checked before evaluating: a run of another store is left alone
    if config["store_fingerprint"] != store.fingerprint:
        raise UserError(f"run {run_dir} was fitted on another store ({config['store']}); pass its --store")
    if config["stream"] != asdict(stream_cfg):
        raise UserError(
            f"run {run_dir} uses stream {config['stream']}, the baselines {asdict(stream_cfg)}; "
            "pass the same --init-cls/--increment"
        )
    result = evaluate_run(run_dir, source, device)
    stream = stream_cfg.task_stream(int(store.identity["dataset"]["num_classes"]))
    if len(result.stages) < stream.num_tasks:
        raise UserError(
            f"run {run_dir} has {len(result.stages)} of {stream.num_tasks} tasks; "
            f"finish it with `tosca fit --run {run_dir}`"
        )
    return result
