"""A multi-task run: train tasks in order, evaluate every routing mode after each, keep it on disk.

runs/<name>/ holds config.json (resolved config, store path and fingerprint), task_NNN.safetensors
(the task's LuCA module plus the classifier snapshot after that task), head.safetensors (the
latest classifier), metrics.json, results.csv and accuracy.png. Finished tasks are reused when
the config and the store fingerprint match, so `fit --task 1` then `fit --task 3` equals
`fit --task 3` in one go.
"""

from __future__ import annotations

import csv
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from featcache.errors import UserError
from featcache.store import FeatureStore, canonical_json, identity_differences
from tosca_heads.features import CachedFeatures, FeatureSource
from tosca_heads.head import CosineClassifier
from tosca_heads.luca import LuCA
from tosca_heads.metrics import block_accuracies, summarise
from tosca_heads.router import MODES, module_outputs, predict, route
from tosca_heads.stream import DEFAULT_ORDER_SEED, PAPER_SPLITS, TaskStream
from tosca_heads.train import TaskStats, TrainConfig, train_task


@dataclass(frozen=True)
class StreamConfig:
    init_cls: int
    increment: int
    order_seed: int = DEFAULT_ORDER_SEED

    def task_stream(self, num_classes: int) -> TaskStream:
        """The tasks this split makes of num_classes classes (a clear error if it does not split)."""
        return TaskStream.build(num_classes, self.init_cls, self.increment, self.order_seed)


def default_stream(dataset: str, num_classes: int) -> StreamConfig:
    init_cls, increment = PAPER_SPLITS.get(dataset, (max(1, num_classes // 10),) * 2)
    return StreamConfig(init_cls, increment)


@dataclass
class StageResult:
    """Evaluation after one task: per mode, A_t, block accuracies and routing accuracy."""

    task: int
    stats: dict[str, float]
    modes: dict[str, dict[str, Any]]
    eval_seconds: float


@dataclass
class RunResult:
    run_dir: Path
    config: dict[str, Any]
    stages: list[StageResult]
    trained: list[int] = field(default_factory=list)
    params_per_task: int = 0

    def metrics(self) -> dict[str, Any]:
        modes = {}
        for mode in MODES:
            curve = [s.modes[mode]["A_t"] for s in self.stages]
            matrix = [s.modes[mode]["blocks"] for s in self.stages]
            routing = [s.modes[mode]["routing"] for s in self.stages]
            modes[mode] = summarise(curve, matrix, routing)
        return {
            "finished_tasks": len(self.stages),
            "params_per_task": self.params_per_task,
            "modes": modes,
            "tasks": [{"task": s.task, **s.stats, "eval_seconds": s.eval_seconds} for s in self.stages],
        }


def run_config(store: FeatureStore, stream: StreamConfig, train: TrainConfig) -> dict[str, Any]:
    ident = store.identity
    return {
        "store": str(store.path.resolve()),
        "store_fingerprint": store.fingerprint,
        "dataset": ident["dataset"]["name"],
        "backbone": ident["backbone"]["alias"],
        "feature_dim": store.dim,
        "views": store.views,
        "stream": asdict(stream),
        "train": asdict(train.resolved(store.dim)),
        "routing_modes": list(MODES),
    }


def default_run_dir(config: dict[str, Any], runs_root: Path = Path("runs")) -> Path:
    train = config["train"]
    digest = hashlib.sha256(
        canonical_json({k: v for k, v in config.items() if k != "store"}).encode()
    ).hexdigest()
    name = f"{config['dataset']}-{config['backbone']}-{train['flow']}-r{train['r']}-l1{train['l1']:g}-{digest[:8]}"
    return runs_root / name


def _matching(existing: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Differences that matter: everything but the store's path (a moved store still matches)."""
    return identity_differences(
        {k: v for k, v in existing.items() if k != "store"}, {k: v for k, v in new.items() if k != "store"}
    )


def _task_file(run_dir: Path, task: int) -> Path:
    return run_dir / f"task_{task:03d}.safetensors"


def _save_task(run_dir: Path, task: int, module: LuCA, head: CosineClassifier, stats: TaskStats) -> None:
    tensors = {f"luca.{k}": v.detach().contiguous() for k, v in module.state_dict().items()}
    tensors.update(head.state())
    meta = {"task": str(task), "flow": module.flow, "stats": json.dumps(asdict(stats))}
    tmp = _task_file(run_dir, task).with_suffix(".tmp")
    save_file(tensors, str(tmp), metadata=meta)
    tmp.rename(_task_file(run_dir, task))  # a task file exists whole or not at all
    save_file(head.state(), str(run_dir / "head.safetensors"))


def _load_task(
    run_dir: Path, task: int, dim: int, train: TrainConfig
) -> tuple[LuCA, dict[str, torch.Tensor], dict]:
    from safetensors import safe_open

    path = _task_file(run_dir, task)
    tensors = load_file(str(path))
    with safe_open(str(path), "pt") as fh:
        stats = json.loads(fh.metadata()["stats"])
    module = LuCA(dim, train.r or dim // 16, train.s or dim // 16, train.flow)
    module.load_state_dict({k[5:]: v for k, v in tensors.items() if k.startswith("luca.")})
    module.eval()
    head_state = {k: v for k, v in tensors.items() if k.startswith("head.")}
    return module, head_state, stats


def evaluate_stage(
    task: int,
    stream: TaskStream,
    test_labels: np.ndarray,
    source: FeatureSource,
    modules: list[LuCA],
    head: CosineClassifier,
) -> tuple[dict[str, dict[str, Any]], float]:
    start = time.perf_counter()
    rows = stream.rows_seen(test_labels, task)
    labels = test_labels[rows]
    true_task = stream.task_of(labels)
    outputs = module_outputs(modules[: task + 1], head, source.clean("test", rows))
    modes = {}
    for mode in MODES:
        chosen = route(mode, outputs, labels, true_task, seed=task)
        pred = predict(outputs, chosen)
        modes[mode] = {
            "A_t": float((pred == labels).mean()),
            "blocks": block_accuracies(pred, labels, true_task, task + 1),
            "routing": float((chosen == true_task).mean()),
        }
    return modes, time.perf_counter() - start


def fit_run(
    store: FeatureStore,
    stream_cfg: StreamConfig,
    train: TrainConfig,
    upto_task: int | None,
    run_dir: Path | None = None,
    source: FeatureSource | None = None,
    on_stage: Callable[[StageResult, bool], None] | None = None,
    write_outputs: bool = True,
) -> RunResult:
    """Train tasks 0..upto_task (all when None), reusing finished tasks of a matching run.

    With write_outputs=False nothing touches the disk (no run directory, nothing reused): a sweep
    point is such a run, its numbers returned rather than saved.
    """
    train.validate()
    store.require_complete()
    config = run_config(store, stream_cfg, train)
    num_classes = int(store.identity["dataset"]["num_classes"])
    stream = stream_cfg.task_stream(num_classes)
    last = stream.num_tasks - 1 if upto_task is None else upto_task
    if not 0 <= last < stream.num_tasks:
        raise UserError(
            f"--task {last} is past the last task: this stream has tasks 0..{stream.num_tasks - 1}"
        )
    run_dir = Path(run_dir) if run_dir is not None else default_run_dir(config)
    if write_outputs:
        _claim_run_dir(run_dir, config)
    resolved = train.resolved(store.dim)
    source = source or CachedFeatures(store)
    train_labels, test_labels = stream.remap(store.labels("train")), stream.remap(store.labels("test"))
    head = CosineClassifier(store.dim)
    modules: list[LuCA] = []
    result = RunResult(run_dir, config, [])
    finished = min(finished_tasks(run_dir), stream.num_tasks) if write_outputs else 0
    for task in range(min(finished, last + 1)):
        module, head_state, stats = _load_task(run_dir, task, store.dim, resolved)
        modules.append(module)
        head.load(head_state)
        modes, eval_s = evaluate_stage(task, stream, test_labels, source, modules, head)
        stage = StageResult(task, {k: stats[k] for k in ("loss", "train_acc", "seconds")}, modes, eval_s)
        result.stages.append(stage)
        if on_stage:
            on_stage(stage, False)
    for task in range(finished, last + 1):
        module, stats = train_task(task, stream, train_labels, source, head, resolved, store.dim)
        modules.append(module)
        if write_outputs:
            _save_task(run_dir, task, module, head, stats)
        modes, eval_s = evaluate_stage(task, stream, test_labels, source, modules, head)
        stage = StageResult(
            task, {"loss": stats.loss, "train_acc": stats.train_acc, "seconds": stats.seconds}, modes, eval_s
        )
        result.stages.append(stage)
        result.trained.append(task)
        if on_stage:
            on_stage(stage, True)
    result.params_per_task = modules[0].num_parameters() if modules else 0
    if write_outputs:
        write_results(result)
    return result


def _claim_run_dir(run_dir: Path, config: dict[str, Any]) -> None:
    """Create the run directory, or check that an existing one was made by the same config and store."""
    run_dir.mkdir(parents=True, exist_ok=True)
    config_path = run_dir / "config.json"
    if config_path.exists():
        diffs = _matching(json.loads(config_path.read_text()), config)
        if diffs:
            shown = "; ".join(diffs[:3]) + (f"; and {len(diffs) - 3} more" if len(diffs) > 3 else "")
            raise UserError(
                f"run {run_dir} was made with another config or store ({shown}); pass another --run"
            )
    else:
        config_path.write_text(json.dumps(config, indent=2) + "\n")


def write_results(result: RunResult) -> None:
    run_dir = result.run_dir
    (run_dir / "metrics.json").write_text(json.dumps(result.metrics(), indent=2) + "\n")
    with open(run_dir / "results.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(
            ["task", "mode", "A_t", "routing_accuracy", "loss", "train_acc", "train_seconds", "eval_seconds"]
        )
        for stage in result.stages:
            for mode in MODES:
                m = stage.modes[mode]
                writer.writerow(
                    [
                        stage.task,
                        mode,
                        f"{m['A_t']:.6f}",
                        f"{m['routing']:.6f}",
                        f"{stage.stats['loss']:.6f}",
                        f"{stage.stats['train_acc']:.6f}",
                        f"{stage.stats['seconds']:.4f}",
                        f"{stage.eval_seconds:.4f}",
                    ]
                )
    plot_curves(result, run_dir / "accuracy.png")


def plot_curves(result: RunResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(6, 4))
    tasks = [s.task for s in result.stages]
    for mode in MODES:
        ax.plot(tasks, [100 * s.modes[mode]["A_t"] for s in result.stages], marker="o", label=mode)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("task")
    ax.set_ylabel("accuracy on all seen classes (%)")
    ax.set_title(
        f"{result.config['dataset']} / {result.config['backbone']} / {result.config['train']['flow']}"
    )
    ax.grid(alpha=0.3)
    ax.legend(title="routing")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def finished_tasks(run_dir: Path) -> int:
    n = 0
    while _task_file(Path(run_dir), n).exists():
        n += 1
    return n


def evaluate_run(run_dir: Path, source: FeatureSource | None = None) -> RunResult:
    """Re-evaluate a run from its files (modules and per-task classifier snapshots); trains nothing."""
    config_path = Path(run_dir) / "config.json"
    if not config_path.exists():
        raise UserError(f"not a run directory: {run_dir} (no config.json)")
    done = finished_tasks(run_dir)
    if done == 0:
        raise UserError(f"run {run_dir} has no finished task yet; train one with `tosca fit --run {run_dir}`")
    config = json.loads(config_path.read_text())
    store = FeatureStore.open(config["store"])
    if store.fingerprint != config["store_fingerprint"]:
        raise UserError(
            f"the store at {config['store']} changed since run {run_dir} was made (fingerprint differs)"
        )
    return fit_run(
        store, StreamConfig(**config["stream"]), TrainConfig(**config["train"]), done - 1, run_dir, source
    )
