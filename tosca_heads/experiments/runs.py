"""A multi-task run: train tasks in order, evaluate every routing mode after each, keep it on disk.

runs/<name>/ holds config.json (resolved config, store path and fingerprint), task_NNN.safetensors
(the task's LuCA module plus the classifier snapshot after that task), head.safetensors (the
latest classifier), metrics.json, results.csv and accuracy.png. Finished tasks are reused when
the config and the store fingerprint match, so `fit --task 1` then `fit --task 3` equals
`fit --task 3` in one go.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from featcache.foundation import atomic
from featcache.foundation.errors import UserError
from featcache.foundation.locks import store_lock
from featcache.store import FeatureStore, check_readable
from tosca_heads.engine import native
from tosca_heads.engine.device import overlap_evaluation, resolve_device, step_mode, step_threads
from tosca_heads.engine.evaluate import Snapshot, StageEvaluator, StageQueue
from tosca_heads.engine.layout import ParamLayout
from tosca_heads.engine.memory import require_room
from tosca_heads.experiments import runfiles
from tosca_heads.method.features import CachedFeatures, FeatureSource
from tosca_heads.method.metrics import summarise
from tosca_heads.method.protocol import StreamConfig, TaskStream
from tosca_heads.method.recipe import TrainConfig, group_key, make_trainer
from tosca_heads.routers import ClassStatistics
from tosca_heads.routers.memo import shared_statistics
from tosca_heads.routers.scores import MODES


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
    group_size: int = 1  # configurations trained together in its engine run

    def metrics(self) -> dict[str, Any]:
        modes = {}
        for mode in (m for m in MODES if self.stages and m in self.stages[0].modes):
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


def fit_run(
    store: FeatureStore,
    stream_cfg: StreamConfig,
    train: TrainConfig,
    upto_task: int | None,
    run_dir: Path | None = None,
    source: FeatureSource | None = None,
    on_stage: Callable[[StageResult, bool], None] | None = None,
    write_outputs: bool = True,
    device: str | torch.device = "cpu",
) -> RunResult:
    """Train tasks 0..upto_task (all when None), reusing finished tasks of a matching run.

    The engine with G = 1. With write_outputs=False nothing touches the disk (no run directory,
    nothing reused).
    """
    return fit_group(
        store,
        stream_cfg,
        [train],
        upto_task,
        [run_dir],
        source,
        None if on_stage is None else lambda g, stage, trained: on_stage(stage, trained),
        write_outputs,
        device,
    )[0]


def fit_group(
    store: FeatureStore,
    stream_cfg: StreamConfig,
    trains: list[TrainConfig],
    upto_task: int | None,
    run_dirs: list[Path | None] | None = None,
    source: FeatureSource | None = None,
    on_stage: Callable[[int, StageResult, bool], None] | None = None,
    write_outputs: bool = True,
    device: str | torch.device = "cpu",
    overlap: bool | None = None,
) -> list[RunResult]:
    """Train G recipes that share flow, epochs and batch size in one engine run; one RunResult each.

    A group resumes from the tasks every one of its runs has finished. A sweep's points are such
    groups with write_outputs=False: their numbers are returned, not saved.
    """
    for train in trains:
        train.validate()
    native.check_settings()  # a bad TOSCA_STEP(_THREADS) stops before any run directory is claimed
    if len({group_key(t) for t in trains}) > 1:
        raise ValueError("recipes of one group must share flow, epochs and batch size")
    check_readable(store)
    device = resolve_device(device) if isinstance(device, str) else device
    overlap = overlap_evaluation(device) if overlap is None else overlap
    threads = step_threads(device, overlap)
    configs = [runfiles.run_config(store, stream_cfg, train) for train in trains]
    num_classes = int(store.identity["dataset"]["num_classes"])
    stream = stream_cfg.task_stream(num_classes)
    last = stream.num_tasks - 1 if upto_task is None else upto_task
    if not 0 <= last < stream.num_tasks:
        raise UserError(
            f"--task {last} is past the last task: this stream has tasks 0..{stream.num_tasks - 1}"
        )
    require_room(store.shape, [t.resolved(store.dim) for t in trains], stream.num_tasks, device)
    # read (every chunk checked against its checksum) before any run folder is claimed
    source = source or CachedFeatures(store, device=device).preload()
    dirs = [
        Path(d) if d is not None else runfiles.default_run_dir(c)
        for d, c in zip(run_dirs or [None] * len(trains), configs, strict=True)
    ]
    with contextlib.ExitStack() as locks:
        if write_outputs:
            for run_dir in dirs:  # before its lock file is made beside it
                runfiles.check_claimable(run_dir)
            for run_dir, config in zip(dirs, configs, strict=True):
                locks.enter_context(store_lock(run_dir, "run", "pass another --run"))
                runfiles.claim_run_dir(run_dir, config)
        return _fit_group_locked(
            store,
            stream,
            trains,
            last,
            dirs,
            configs,
            source,
            on_stage,
            write_outputs,
            device,
            overlap,
            threads,
        )


def _fit_group_locked(
    store: FeatureStore,
    stream: TaskStream,
    trains: list[TrainConfig],
    last: int,
    dirs: list[Path],
    configs: list[dict[str, Any]],
    source: FeatureSource,
    on_stage: Callable[[int, StageResult, bool], None] | None,
    write_outputs: bool,
    device: torch.device,
    overlap: bool,
    threads: int,
) -> list[RunResult]:
    train_labels, test_labels = stream.remap(store.labels("train")), stream.remap(store.labels("test"))
    trainer = make_trainer(trains, store.dim, device, threads)
    layouts = [ParamLayout(store.dim, c.r, c.s, c.flow) for c in trainer.configs]
    evaluator = StageEvaluator(stream, test_labels, source, device)
    statistics = ClassStatistics(store.dim)
    # a run that writes nothing (a sweep point) takes the routers' statistics from the process's memo
    key = None if write_outputs else _statistics_key(store, stream, source)
    memo = None if key is None else shared_statistics(key, store.dim)

    def snapshot(task: int) -> Callable[[], Snapshot]:
        """The modules and classifier now; and, when called (on the evaluation thread, in task
        order), the frozen-feature routers' statistics with this task's classes added (from their
        clean features: sums and a scatter, no sample is kept). The features are read here: a
        source is only ever used from the training thread."""
        state = trainer.snapshot()
        rows = stream.rows_of_task(train_labels, task)
        known = memo is not None and len(memo.models) > task
        clean = None if known else source.clean("train", rows)
        classes = stream.task_classes(task)

        def read(t: int) -> tuple[torch.Tensor, np.ndarray, range]:
            if t != task or clean is None:
                raise RuntimeError(f"router statistics asked for task {t} out of order (at task {task})")
            return clean, train_labels[rows], classes

        def with_statistics() -> Snapshot:
            if memo is not None:
                return replace(state, frozen=memo.model_after(task, read))
            statistics.partial_fit(*read(task))
            return replace(state, frozen=statistics.model())

        return with_statistics

    results = [RunResult(d, c, []) for d, c in zip(dirs, configs, strict=True)]
    finished = min(min(runfiles.finished_tasks(d) for d in dirs), stream.num_tasks) if write_outputs else 0
    # A run's files describe all of its finished tasks: `--task 2` on a run that has finished 5
    # evaluates the 5 (training nothing), so metrics, router statistics and task files agree.
    last = max(last, finished - 1)

    queue = StageQueue(evaluator, overlap=overlap)

    def record(wait: bool = False) -> None:
        for (task, stats, trained), modes, eval_s in queue.ready(wait):
            for g, result in enumerate(results):
                stage = StageResult(task, stats[g], modes[g], eval_s)
                result.stages.append(stage)
                if trained:
                    result.trained.append(task)
                if on_stage:
                    on_stage(g, stage, trained)

    # one matmul thread with evaluation on a second thread (it takes the other core), and always
    # for the compiled step: MKL's fork-join over two cores made its tiny matmuls slower (1.84 ms
    # per step against 1.26-1.30 ms on one thread, CIFAR-100 shape, 2-core machine)
    one_thread = overlap or native.use_native(device)
    with step_mode(device, matmul_threads=1 if one_thread else None):
        try:
            for task in range(min(finished, last + 1)):
                loaded = [
                    runfiles.load_task(d, task, layout) for d, layout in zip(dirs, layouts, strict=True)
                ]
                trainer.load_task(task, [m for m, _, _ in loaded], [h for _, h, _ in loaded])
                stats = [{k: s[k] for k in ("loss", "train_acc", "seconds")} for _, _, s in loaded]
                queue.submit(task, snapshot(task), (task, stats, False))
            for task in range(finished, last + 1):
                record()
                trainer.partial_fit(task, stream, train_labels, source)
                stats = trainer.stats_[task]
                state = snapshot(task)
                if write_outputs:
                    for g, run_dir in enumerate(dirs):
                        module, head = trainer.module_state(task, g), trainer.head_state(g)
                        runfiles.save_task(run_dir, task, module, head, trains[g].flow, asdict(stats[g]))
                rows = [{"loss": s.loss, "train_acc": s.train_acc, "seconds": s.seconds} for s in stats]
                queue.submit(task, state, (task, rows, True))
            record(wait=True)
        finally:
            queue.close()
    for result, config in zip(results, trainer.configs, strict=True):
        result.params_per_task = ParamLayout(store.dim, config.r, config.s, config.flow).size
        result.group_size = trainer.groups
        if write_outputs:
            # the router statistics of exactly the run's finished tasks (also after a resume or eval)
            atomic.write_safetensors(result.run_dir / runfiles.ROUTER_FILE, statistics.state_dict())
            write_results(result)
    return results


def _statistics_key(store: FeatureStore, stream: TaskStream, source: FeatureSource) -> tuple | None:
    """What the routers' statistics depend on: the store's training features (its place, identity
    and chunk checksums) and the task split. None (no sharing) when the features come from
    elsewhere than the store's own cache, or the store records no checksums to tell its versions
    apart."""
    sums = store.checksums("train")
    if sums is None or not isinstance(source, CachedFeatures) or source.store is not store:
        return None
    content = hashlib.sha256("\n".join(map(str, sums)).encode()).hexdigest()
    path = str(store.path.resolve())
    return (path, store.fingerprint, content, stream.order.tobytes(), stream.init_cls, stream.increment)


def write_results(result: RunResult) -> None:
    run_dir = result.run_dir
    atomic.write_text(run_dir / "metrics.json", json.dumps(result.metrics(), indent=2) + "\n")
    with atomic.replacing(run_dir / "results.csv") as tmp, open(tmp, "w", newline="") as fh:
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
    atomic.save_figure(fig, path, dpi=120)
    plt.close(fig)


def evaluate_run(
    run_dir: Path, source: FeatureSource | None = None, device: str | torch.device = "cpu"
) -> RunResult:
    """Re-evaluate a run from its files (modules and per-task classifier snapshots); trains nothing."""
    config = runfiles.read_run_config(run_dir)
    stream, train = runfiles.stream_config_of(config, run_dir), runfiles.train_config_of(config, run_dir)
    done = runfiles.finished_tasks(run_dir)
    if done == 0:
        raise UserError(f"run {run_dir} has no finished task yet; train one with `tosca fit --run {run_dir}`")
    store = FeatureStore.open(config["store"])
    check_readable(store)  # a damaged store is named as such, not as "changed"
    if store.fingerprint != config["store_fingerprint"]:
        raise UserError(
            f"the store at {config['store']} changed since run {run_dir} was made (fingerprint differs)"
        )
    return fit_run(
        store,
        stream,
        train,
        done - 1,
        run_dir,
        source,
        device=device,
    )
