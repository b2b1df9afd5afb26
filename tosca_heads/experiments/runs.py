"""A multi-task run: train tasks in order, evaluate every router after each, keep it on disk.

A run folder's format is `runfiles`. Finished tasks are reused when the config and the store
fingerprint match, so `fit --task 1` then `fit --task 3` equals `fit --task 3` in one go.

`fit(FitRequest)` is what `tosca fit` asks for; `fit_group` trains G recipes that share flow,
epochs and batch size in one engine run (`fit_run` is G = 1, a sweep's groups are G >= 1 writing
nothing); `GroupFit` is one such engine run, step by step; `evaluate_run` re-evaluates a run
from its files.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from featcache.foundation import atomic
from featcache.foundation.devices import resolve_device
from featcache.foundation.errors import UserError
from featcache.foundation.locks import folder_lock
from featcache.store import FeatureStore, check_not_replaced, check_readable, resolve_store
from tosca_heads.engine import native
from tosca_heads.engine.device import check_settings, plan_threads, step_mode
from tosca_heads.engine.evaluate import Snapshot, StageEvaluator, StageQueue
from tosca_heads.engine.layout import ParamLayout
from tosca_heads.engine.memory import require_room
from tosca_heads.engine.trainer import GroupTrainer
from tosca_heads.experiments.records import run as run_record
from tosca_heads.experiments.records.run import RunResult, StageResult
from tosca_heads.experiments.requests import FitRequest
from tosca_heads.experiments.trackers import TrackedRun, end_failed, open_tracking
from tosca_heads.experiments.trackers.events import flat_params, run_files
from tosca_heads.method.features import CachedFeatures, FeatureSource
from tosca_heads.method.protocol import (
    HELD_OUT,
    NO_VALIDATION,
    ProtocolReport,
    StreamConfig,
    TaskStream,
    ValidationConfig,
    describe_protocol,
    split_origin,
    stream_config,
)
from tosca_heads.method.recipe import TrainConfig, recipe
from tosca_heads.routers import ClassStatistics
from tosca_heads.routers.memo import shared_statistics

StageCallback = Callable[[int, StageResult, bool], None]  # (configuration, stage, trained now)
CPU = torch.device("cpu")


# ------------------------------------------------------------------------------------------ one engine run


class GroupFit:
    """One engine run of G recipes on one store and task split, in named steps: `resume` the tasks
    every run has finished (loaded, then evaluated), `train_task`, `snapshot` what evaluation reads,
    `finish` (wait for the evaluations, write the files). `run` does them in order."""

    def __init__(
        self,
        store: FeatureStore,
        stream: TaskStream,
        trains: list[TrainConfig],
        dirs: list[Path],
        configs: list[dict[str, Any]],
        source: FeatureSource,
        device: torch.device,
        overlap: bool | None,
        write_outputs: bool,
        on_stage: StageCallback | None,
        validation: ValidationConfig = NO_VALIDATION,
    ):
        self.store, self.stream, self.source, self.device = store, stream, source, device
        self.fingerprint = store.fingerprint  # as opened: checked again after the last read
        self.dirs, self.write_outputs, self.on_stage = dirs, write_outputs, on_stage
        self.threads = plan_threads(device, overlap, compiled=native.use_native(device))
        labels = stream.remap(store.labels("train"))
        held = validation.carve(store.labels("train"), store.identity["dataset"].get("class_names"))
        # held-out rows are marked HELD_OUT: no task's rows include them, so they never train, never
        # make a prototype and never enter the routers' statistics
        self.train_labels = labels.copy()
        self.train_labels[held] = HELD_OUT
        self.trainer = GroupTrainer(trains, store.dim, device, self.threads.step_threads)  # resolved recipes
        self.layouts = [ParamLayout(store.dim, c.r, c.s, c.flow) for c in self.trainer.configs]
        evaluators = {"test": StageEvaluator(stream, stream.remap(store.labels("test")), source, device)}
        if len(held):
            evaluators["validation"] = StageEvaluator(
                stream, labels[held], source, device, split="train", rows=held
            )
        self.queue = StageQueue(evaluators, self.threads.overlap)
        self.statistics = ClassStatistics(store.dim)
        # a run that writes nothing (a sweep point) takes the routers' statistics from the process's memo
        key = None if write_outputs else _statistics_key(store, stream, source, validation)
        self.memo = None if key is None else shared_statistics(key, store.dim)
        images = {split: evaluator.images() for split, evaluator in evaluators.items()}
        self.results = [RunResult(d, c, [], images=images) for d, c in zip(dirs, configs, strict=True)]
        self.digests = [run_record.config_digest(c) for c in configs]  # what each task file records

    def finished(self) -> int:
        """Tasks every run of the group has on disk (none when nothing is written)."""
        if not self.write_outputs:
            return 0
        return min(min(run_record.finished_tasks(d) for d in self.dirs), self.stream.num_tasks)

    def run(self, last: int) -> list[RunResult]:
        """Tasks 0..last: the finished ones resumed, the rest trained. A run's files describe all of
        its finished tasks, so `--task 2` on a run that has finished 5 evaluates the 5."""
        done = self.finished()
        last = max(last, done - 1)
        with step_mode(self.device, self.threads.matmul_threads):
            try:
                for task in range(min(done, last + 1)):
                    self.resume(task)
                for task in range(done, last + 1):
                    self._record()
                    self.train_task(task)
                self._record(wait=True)
            finally:
                self.queue.close()
        return self.finish()

    def resume(self, task: int) -> None:
        """Load a finished task of every run and queue its evaluation."""
        loaded = [
            run_record.load_task(d, task, layout, self.stream.seen_classes(task), digest)
            for d, layout, digest in zip(self.dirs, self.layouts, self.digests, strict=True)
        ]
        self.trainer.load_task(task, [m for m, _, _ in loaded], [h for _, h, _ in loaded])
        stats = [{k: s[k] for k in run_record.STAT_KEYS} for _, _, s in loaded]
        curves = [s.get("curve") for _, _, s in loaded]  # None: trained before curves were kept
        self.queue.submit(task, self.snapshot(task), (task, stats, False, curves))

    def train_task(self, task: int) -> None:
        """Train one task of every configuration, save it (when writing) and queue its evaluation."""
        self.trainer.partial_fit(task, self.stream, self.train_labels, self.source)
        stats = self.trainer.stats_[task]
        curves = [asdict(c) for c in self.trainer.curves_[task]]
        state = self.snapshot(task)
        if self.write_outputs:
            for g, run_dir in enumerate(self.dirs):
                module, head = self.trainer.module_state(task, g), self.trainer.head_state(g)
                flow = self.trainer.configs[g].flow
                run_record.save_task(
                    run_dir, task, module, head, flow, asdict(stats[g]), self.digests[g], curves[g]
                )
        rows = [{k: getattr(s, k) for k in run_record.STAT_KEYS} for s in stats]
        self.queue.submit(task, state, (task, rows, True, curves))

    def snapshot(self, task: int) -> Callable[[], Snapshot]:
        """The modules and classifier now; and, when called (on the evaluation thread, in task
        order), the frozen-feature routers' statistics with this task's classes added (from their
        clean features: sums and a scatter, no sample is kept). The features are read here: a
        source is only ever used from the training thread."""
        state = self.trainer.snapshot()
        rows = self.stream.rows_of_task(self.train_labels, task)
        known = self.memo is not None and len(self.memo.models) > task
        clean = None if known else self.source.clean("train", rows)
        classes = self.stream.task_classes(task)

        def read(t: int) -> tuple[torch.Tensor, np.ndarray, range]:
            if t != task or clean is None:
                raise RuntimeError(f"router statistics asked for task {t} out of order (at task {task})")
            return clean, self.train_labels[rows], classes

        def with_statistics() -> Snapshot:
            if self.memo is not None:
                return replace(state, frozen=self.memo.model_after(task, read))
            self.statistics.partial_fit(*read(task))
            return replace(state, frozen=self.statistics.model())

        return with_statistics

    def _record(self, wait: bool = False) -> None:
        for (task, stats, trained, curves), scored, eval_s in self.queue.ready(wait):
            validation = scored.get("validation")
            for g, result in enumerate(self.results):
                held = None if validation is None else validation[g]
                stage = StageResult(task, stats[g], scored["test"][g], eval_s, held, curves[g])
                result.stages.append(stage)
                if trained:
                    result.trained.append(task)
                if self.on_stage:
                    self.on_stage(g, stage, trained)

    def finish(self) -> list[RunResult]:
        """Sizes and group size into the results; when writing, the routers' statistics of exactly
        the finished tasks, metrics.json, results.csv and accuracy.png of every run."""
        check_not_replaced(self.store.path, self.fingerprint, "this fit")
        for result, layout in zip(self.results, self.layouts, strict=True):
            result.params_per_task = layout.size
            result.group_size = self.trainer.groups
            if self.write_outputs:
                atomic.write_safetensors(
                    result.run_dir / run_record.ROUTER_FILE, self.statistics.state_dict()
                )
                run_record.write_results(result)
        return self.results


def _statistics_key(
    store: FeatureStore, stream: TaskStream, source: FeatureSource, validation: ValidationConfig
) -> tuple | None:
    """What the routers' statistics depend on: the store's training features (its place, identity
    and chunk checksums), the task split and the rows held out for validation. None (no sharing)
    when the features come from elsewhere than the store's own cache."""
    sums = store.checksums("train")
    if sums is None or not isinstance(source, CachedFeatures) or source.store is not store:
        return None
    content = hashlib.sha256("\n".join(map(str, sums)).encode()).hexdigest()
    path = str(store.path.resolve())
    split = (stream.order.tobytes(), stream.init_cls, stream.increment, validation.fraction, validation.seed)
    return (path, store.fingerprint, content, *split)


# ------------------------------------------------------------------------------------------ entry points


def fit_group(
    store: FeatureStore,
    stream_cfg: StreamConfig,
    trains: list[TrainConfig],
    upto_task: int | None,
    run_dirs: list[Path | None] | None = None,
    source: FeatureSource | None = None,
    on_stage: StageCallback | None = None,
    write_outputs: bool = True,
    device: torch.device = CPU,
    overlap: bool | None = None,
    validation: ValidationConfig = NO_VALIDATION,
    protocol: ProtocolReport | None = None,
    on_start: Callable[[], None] | None = None,
) -> list[RunResult]:
    """Train G recipes that share flow, epochs and batch size in one engine run; one RunResult each.
    Everything handed in was checked where it came in (a request, a run's files, a suite file): this
    trusts it. `on_start` is called once the run folders are claimed, before the first task (a
    refusal is then the only line a command prints).

    A group resumes from the tasks every one of its runs has finished. With write_outputs=False
    nothing touches the disk (a sweep's points: their numbers are returned, not saved). With a
    validation split, its rows never train and every router is scored on them too.
    """
    device = torch.device(device)
    if source is None:
        source = CachedFeatures(store, device=device)
    elif not isinstance(source, CachedFeatures):
        check_readable(store)  # a cached source checks the store itself, chunk by chunk
    stream = stream_cfg.task_stream(store.shape.classes)
    if write_outputs:
        protocol = protocol or protocol_of(store, stream_cfg, validation)
    record = None if protocol is None else protocol.record()
    configs = [run_record.run_config(store, stream_cfg, train, validation, record) for train in trains]
    last = stream.num_tasks - 1 if upto_task is None else upto_task
    assert 0 <= last < stream.num_tasks, f"task {last} of {stream.num_tasks}"
    resolved = [t.resolved(store.dim) for t in trains]
    require_room(store.shape, resolved, stream.num_tasks, device)
    if isinstance(source, CachedFeatures):  # read (every chunk checked) before any run folder is claimed
        source.preload()
    dirs = [
        Path(d) if d is not None else run_record.default_run_dir(c)
        for d, c in zip(run_dirs or [None] * len(trains), configs, strict=True)
    ]
    with contextlib.ExitStack() as locks:
        if write_outputs:
            for run_dir in dirs:  # before its lock file is made beside it
                run_record.check_claimable(run_dir)
            for run_dir, config in zip(dirs, configs, strict=True):
                locks.enter_context(folder_lock(run_dir, "run", "pass another --run"))
                run_record.claim_run_dir(run_dir, config)
                run_record.write_validation_ids(run_dir, store, validation)
        group = GroupFit(
            store,
            stream,
            resolved,
            dirs,
            configs,
            source,
            device,
            overlap,
            write_outputs,
            on_stage,
            validation,
        )
        if on_start:
            on_start()
        return group.run(last)


def protocol_of(
    store: FeatureStore,
    stream_cfg: StreamConfig,
    validation: ValidationConfig = NO_VALIDATION,
    origin: str = "as given",
) -> ProtocolReport:
    """The protocol of a fit, a sweep or a baseline on this store (said, and recorded)."""
    ident = store.identity["dataset"]
    return describe_protocol(
        ident["name"],
        store.shape.classes,
        ident.get("class_names"),
        stream_cfg,
        origin,
        validation,
        store.labels("train"),
        store.labels("test"),
    )


def fit_run(
    store: FeatureStore,
    stream_cfg: StreamConfig,
    train: TrainConfig,
    upto_task: int | None,
    run_dir: Path | None = None,
    source: FeatureSource | None = None,
    on_stage: Callable[[StageResult, bool], None] | None = None,
    write_outputs: bool = True,
    device: torch.device = CPU,
    validation: ValidationConfig = NO_VALIDATION,
    protocol: ProtocolReport | None = None,
    on_start: Callable[[], None] | None = None,
) -> RunResult:
    """Train tasks 0..upto_task (all when None), reusing finished tasks of a matching run: the engine
    with G = 1."""
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
        validation=validation,
        protocol=protocol,
        on_start=on_start,
    )[0]


def fit_recipe(request: FitRequest) -> TrainConfig:
    """The recipe a fit request asks for, checked with its other flags before any store is opened
    (a bad flag is then the only line a command prints)."""
    if request.task is not None and request.task < 0:
        raise UserError(f"--task must be 0 or more, got {request.task}")
    if request.run is not None and request.run.exists() and not request.run.is_dir():
        raise UserError(f"--run {request.run} is a file, not a run folder")
    return recipe(request.preset, request.recipe)


def fit(
    request: FitRequest,
    on_stage: Callable[[StageResult, bool], None] | None = None,
    on_start: Callable[[ProtocolReport, Path | None], None] | None = None,
) -> RunResult:
    """`tosca fit` and `tosca_heads.fit`: every value of the request checked here, once (the recipe,
    the validation split, the settings, the device, the store, the task split), the protocol said
    (`on_start` gets it and the run folder once the folder is claimed), then tasks 0..task trained
    (reusing a matching run's finished tasks) and every router evaluated. A request that does not
    `write` keeps everything in memory."""
    train = fit_recipe(request)
    validation = ValidationConfig(request.val_fraction, request.val_seed)
    validation.validate()
    check_settings()
    tracking = open_tracking(request.log, request.runs_root)  # a missing extra: said before any work
    device = resolve_device(request.device)
    store = resolve_store(request.store, request.model, request.dataset, request.cache_dir)
    stream, protocol = request_protocol(
        store, request.init_cls, request.increment, request.order_seed, validation
    )
    tasks = stream.task_stream(store.shape.classes).num_tasks
    if request.task is not None and request.task >= tasks:
        raise UserError(f"--task {request.task} is past the last task: this stream has tasks 0..{tasks - 1}")
    config = run_record.run_config(store, stream, train, validation)
    run_dir = request.run if request.write else None
    if request.write and run_dir is None:
        run_dir = run_record.default_run_dir(config, request.runs_root)
    tracked: list[TrackedRun | None] = [None]  # the tracked run, once the run folder is claimed

    def started() -> None:
        name = run_dir.name if run_dir is not None else run_record.default_run_dir(config).name
        tracked[0] = tracking.start(name, {"command": "fit", "run": str(run_dir), **flat_params(config)})
        if on_start is not None:
            on_start(protocol, run_dir)

    def stage_done(stage: StageResult, trained: bool) -> None:
        if tracked[0] is not None:
            tracked[0].stage(stage)
        if on_stage is not None:
            on_stage(stage, trained)

    try:
        result = fit_run(
            store,
            stream,
            train,
            request.task,
            run_dir,
            on_stage=stage_done if tracking or on_stage else None,
            write_outputs=request.write,
            device=device,
            validation=validation,
            protocol=protocol,
            on_start=started,
        )
    except BaseException:
        end_failed(tracked[0])
        raise
    if tracked[0] is not None:
        tracked[0].run_result(result, run_files(run_dir) if run_dir is not None else [])
    return result


def request_protocol(
    store: FeatureStore,
    init_cls: int | None,
    increment: int | None,
    order_seed: int,
    validation: ValidationConfig = NO_VALIDATION,
) -> tuple[StreamConfig, ProtocolReport]:
    """The split a command's flags ask for on this store (the dataset's default where not given,
    refused in one line where none fits) and the protocol it makes, in words. The store is checked
    first (complete, attrs and labels that fit its arrays): the protocol reads its labels."""
    check_readable(store)
    ident = store.identity["dataset"]
    stream = stream_config(ident["name"], store.shape.classes, init_cls, increment, order_seed)
    origin = split_origin(ident["name"], init_cls, increment)
    return stream, protocol_of(store, stream, validation, origin)


def evaluate_run(run_dir: Path, source: FeatureSource | None = None, device: torch.device = CPU) -> RunResult:
    """Re-evaluate a run from its files (modules and per-task classifier snapshots); trains nothing."""
    config = run_record.read_run_config(run_dir)
    stream, train = run_record.stream_config_of(config, run_dir), run_record.train_config_of(config, run_dir)
    done = run_record.finished_tasks(run_dir)
    if done == 0:
        raise UserError(f"run {run_dir} has no finished task yet; train one with `tosca fit --run {run_dir}`")
    validation = run_record.validation_of(config, run_dir)
    store = run_record.open_run_store(config, run_dir)
    run_record.check_task_count(run_dir, done, stream.task_stream(store.shape.classes).num_tasks)
    return fit_run(store, stream, train, done - 1, run_dir, source, device=device, validation=validation)


# ------------------------------------------------------------------------------------------ files
