"""One engine run: a plan's recipes trained task by task, every router evaluated after each, kept
on disk.

A run folder's format is `runfiles`. Finished tasks are reused when the config and the store
fingerprint match, so `fit --task 1` then `fit --task 3` equals `fit --task 3` in one go.

`fit_group` trains a plan's G recipes (they share flow, epochs and batch size) in one engine run
(`fit_run` is G = 1 on a store and split, a sweep's groups are G >= 1 writing nothing); `GroupFit`
is one such engine run, step by step; `evaluate_run` re-evaluates a run from its files. The plan
(`requests.plan`) was built at the edge: nothing here works it out again.
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

from featcache.store import FeatureStore, check_not_replaced, check_readable
from tosca_foundation import atomic
from tosca_foundation.errors import UserError
from tosca_heads.engine import native
from tosca_heads.engine.device import plan_threads, step_mode
from tosca_heads.engine.evaluate import Snapshot, StageEvaluator, StageQueue
from tosca_heads.engine.layout import ParamLayout
from tosca_heads.engine.memory import require_room
from tosca_heads.engine.trainer import GroupTrainer
from tosca_heads.method.class_names import named_classes
from tosca_heads.method.class_statistics import ClassStatistics
from tosca_heads.method.features import CachedFeatures, FeatureSource
from tosca_heads.method.protocol import StreamConfig
from tosca_heads.method.recipe import TrainConfig
from tosca_heads.records import cell
from tosca_heads.records import run_folder as run_record
from tosca_heads.records.claim import claim_folders
from tosca_heads.records.run_cell import write_run_cell
from tosca_heads.records.run_config import RUN_FOLDER
from tosca_heads.records.run_folder import RunResult, StageResult
from tosca_heads.requests.plan import FitPlan
from tosca_heads.routers.learned import RouterLearners, learners_of, on_request
from tosca_heads.routers.memo import shared_statistics

StageCallback = Callable[[int, StageResult, bool], None]  # (configuration, stage, trained now)


# ------------------------------------------------------------------------------------------ one engine run


class GroupFit:
    """One engine run of a plan's recipes on its store and task split, in named steps: set up (room
    checked, features read, every chunk checked, before any run folder is claimed), `resume` the
    tasks every run has finished (loaded, then evaluated), `train_task`, `snapshot` what evaluation
    reads, `finish` (wait for the evaluations, write the files). `run` does them in order. Where
    nothing is written (a sweep's points), the results still name the plan's folders."""

    def __init__(
        self,
        plan: FitPlan,
        source: FeatureSource | None = None,
        write_outputs: bool = True,
        overlap: bool | None = None,
        on_stage: StageCallback | None = None,
    ):
        store, stream, device = plan.store, plan.stream, plan.device.resolved
        # a run that writes nothing (a sweep point) takes the routers' statistics from the process's memo
        key = None if write_outputs else _statistics_key(plan, source)
        # before any work: one task over the memory budget, or the run over this device's memory, is refused
        given = source.in_memory if isinstance(source, CachedFeatures) else None if source is None else False
        task_rows = stream.largest_task_rows(plan.train_labels)
        room = require_room(
            store.shape,
            plan.trains,
            stream.num_tasks,
            device,
            task_rows,
            len(plan.held),
            given,
            fixed=plan.evaluates_only,
            spell=plan.spell,
        )
        if source is None:
            source = CachedFeatures(store, room.features_budget, device)
        elif not isinstance(source, CachedFeatures):
            check_readable(store)  # a cached source checks the store itself, chunk by chunk
        if isinstance(source, CachedFeatures):  # read (every chunk checked) before any run folder is claimed
            source.preload()
        self.plan, self.store, self.stream, self.source, self.device = plan, store, stream, source, device
        self.fingerprint = store.fingerprint  # as opened: checked again after the last read
        self.dirs, self.write_outputs, self.on_stage = plan.dirs, write_outputs, on_stage
        self.threads = plan_threads(device, overlap, compiled=native.use_native(device))
        self.trainer = GroupTrainer(plan.trains, store.dim, device, self.threads.step_threads)
        self.layouts = [ParamLayout(store.dim, c.r, c.s, c.flow) for c in plan.trains]
        evaluators = {"test": StageEvaluator(stream, plan.test_labels, source, device)}
        if len(plan.held):
            evaluators["validation"] = StageEvaluator(
                stream, plan.held_labels, source, device, split="train", rows=plan.held
            )
        self.queue = StageQueue(evaluators, self.threads.overlap)
        self.statistics = ClassStatistics(
            store.dim, learners=RouterLearners(plan.routers) if plan.routers else None
        )
        self.memo = None if key is None else shared_statistics((*key, plan.routers), store.dim, plan.routers)
        images = {split: evaluator.images() for split, evaluator in evaluators.items()}
        self.results = [
            RunResult(d, c, [], images=images) for d, c in zip(plan.dirs, plan.configs, strict=True)
        ]

    def finished(self) -> int:
        """Tasks every run of the group has on disk (none when nothing is written)."""
        if not self.write_outputs:
            return 0
        return min(min(run_record.finished_tasks(d) for d in self.dirs), self.stream.num_tasks)

    def run(self) -> list[RunResult]:
        """Tasks 0..the plan's last: the finished ones resumed, the rest trained. A run's files
        describe all of its finished tasks, so `--task 2` on a run that has finished 5 evaluates the 5."""
        done = self.finished()
        last = max(self.plan.last_task, done - 1)
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
        seen = self.stream.seen_classes(task)
        loaded = [
            run_record.load_task(d, task, layout, seen, digest)
            for d, layout, digest in zip(self.dirs, self.layouts, self.plan.digests, strict=True)
        ]
        self.trainer.load_task(task, [m for m, _, _ in loaded], [h for _, h, _ in loaded])
        stats = [{k: s[k] for k in run_record.STAT_KEYS} for _, _, s in loaded]
        curves = [s["curve"] for _, _, s in loaded]
        self.queue.submit(task, self.snapshot(task), (task, stats, False, curves))

    def train_task(self, task: int) -> None:
        """Train one task of every configuration, save it (when writing) and queue its evaluation."""
        self.trainer.partial_fit(task, self.stream, self.plan.train_labels, self.source)
        stats = self.trainer.stats_[task]
        curves = [asdict(c) for c in self.trainer.curves_[task]]
        state = self.snapshot(task)
        if self.write_outputs:
            for g, run_dir in enumerate(self.dirs):
                module, head = self.trainer.module_state(task, g), self.trainer.head_state(g)
                flow = self.trainer.configs[g].flow
                run_record.save_task(
                    run_dir, task, module, head, flow, asdict(stats[g]), self.plan.digests[g], curves[g]
                )
        rows = [{k: getattr(s, k) for k in run_record.STAT_KEYS} for s in stats]
        self.queue.submit(task, state, (task, rows, True, curves))

    def snapshot(self, task: int) -> Callable[[], Snapshot]:
        """The modules and classifier now; and, when called (on the evaluation thread, in task
        order), the frozen-feature routers' statistics with this task's classes added (from their
        clean features: sums and a scatter, no sample is kept). The features are read here: a
        source is only ever used from the training thread."""
        state = self.trainer.snapshot()
        rows = self.stream.rows_of_task(self.plan.train_labels, task)
        known = self.memo is not None and len(self.memo.models) > task
        clean = None if known else self.source.clean("train", rows)
        classes = self.stream.task_classes(task)

        def read(t: int) -> tuple[torch.Tensor, np.ndarray, range]:
            if t != task or clean is None:
                raise RuntimeError(f"router statistics asked for task {t} out of order (at task {task})")
            return clean, self.plan.train_labels[rows], classes

        def with_statistics() -> Snapshot:
            names = self.plan.store.identity["dataset"].get("class_names")
            with named_classes(self.stream.order, names):  # an on-request router's refusal
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
        the finished tasks, the views (metrics.json, results.csv, the plots) and, last, the cell of
        every run (`run_cell.write_run_cell`: measured.json, the answers, done.json)."""
        check_not_replaced(self.store.path, self.fingerprint, "this fit")
        for result, layout in zip(self.results, self.layouts, strict=True):
            result.params_per_task = layout.size
            result.group_size = self.trainer.groups
            if self.write_outputs:
                atomic.write_safetensors(
                    result.run_dir / run_record.ROUTER_FILE, self.statistics.state_dict()
                )
                run_record.write_results(result)  # the views, never read back
                write_run_cell(result, str(self.device))  # done.json last
        return self.results


def _statistics_key(plan: FitPlan, source: FeatureSource | None) -> tuple | None:
    """What the routers' statistics depend on: the store's training features (its place, identity
    and chunk checksums), the task split and the rows held out for validation. None (no sharing)
    when the features come from elsewhere than the store's own cache (None: that cache)."""
    store, stream, validation = plan.store, plan.stream, plan.validation
    sums = store.checksums("train")
    own = source is None or (isinstance(source, CachedFeatures) and source.store is store)
    if not own:
        return None
    content = hashlib.sha256("\n".join(map(str, sums)).encode()).hexdigest()
    path = str(store.path.resolve())
    split = (stream.order.tobytes(), stream.init_cls, stream.increment, validation.fraction, validation.seed)
    return (path, store.fingerprint, content, *split)


# ------------------------------------------------------------------------------------------ entry points


def fit_group(
    plan: FitPlan,
    *,
    source: FeatureSource | None = None,
    on_stage: StageCallback | None = None,
    write_outputs: bool = True,
    overlap: bool | None = None,
    on_start: Callable[[list[RunResult]], None] | None = None,
) -> list[RunResult]:
    """Train the plan's recipes (they share flow, epochs and batch size) up to its last task in one
    engine run; one RunResult each. The plan was checked where it was built: this trusts it and
    works out nothing of it again (its device is resolved once, when first asked for: here, where
    torch is loaded). `on_start` gets the results once the run folders are claimed, before the
    first task (a refusal is then the only line after the plan's).

    A group resumes from the tasks every one of its runs has finished. With write_outputs=False
    nothing touches the disk (a sweep's points: their numbers are returned, not saved). With a
    validation split, its rows never train and every router is scored on them too.
    """
    group = GroupFit(plan, source, write_outputs, overlap, on_stage)
    with contextlib.ExitStack() as locks:
        if write_outputs:
            # each folder checked, then locked (until the group is done), claimed for its config
            locks.enter_context(claim_folders(plan.dirs, RUN_FOLDER, plan.configs))
            for run_dir in plan.dirs:
                # first: a run written again is not finished until its done.json is written again
                (Path(run_dir) / cell.DONE).unlink(missing_ok=True)
                run_record.write_validation_ids(
                    Path(run_dir) / run_record.VALIDATION_FILE, plan.validation, plan.held_ids
                )
        if on_start:
            on_start(group.results)
        return group.run()


def fit_run(
    store: FeatureStore,
    stream: StreamConfig,
    train: TrainConfig,
    upto: int | None = None,
    run_dir: Path | None = None,
    **given: Any,
) -> RunResult:
    """One recipe on a store and split up to task `upto`, as a plan of G = 1: `validation` and
    `device` go into the plan (`FitPlan.build`), the other arguments to `fit_group`."""
    planned = {name: given.pop(name) for name in ("validation", "device") if name in given}
    plan = FitPlan.build(store, stream, trains=[train], dirs=[run_dir], upto=upto, **planned)
    return fit_group(plan, **given)[0]


def evaluate_run(
    run_dir: Path,
    source: FeatureSource | None = None,
    device: str | torch.device = "cpu",
    routers: tuple[str, ...] = (),
) -> RunResult:
    """Re-evaluate a run from its files (modules and per-task classifier snapshots); trains nothing.
    Every router is evaluated, and the on-request ones among `routers` (`routers.learned`)."""
    config = run_record.read_run_config(run_dir)
    run_record.check_whole_if_finished(run_dir)
    stream, train = run_record.stream_config_of(config, run_dir), run_record.train_config_of(config, run_dir)
    done = run_record.finished_tasks(run_dir)
    run_record.check_no_task_lost(run_dir, done)  # a deleted task file: refused, nothing rewritten
    if done == 0:
        raise UserError(f"run {run_dir} has no finished task yet; train one with `tosca fit --run {run_dir}`")
    validation = run_record.validation_of(config, run_dir)
    store = run_record.open_run_store(config, run_dir)
    plan = FitPlan.build(store, stream, validation, trains=[train], dirs=[run_dir], device=str(device))
    run_record.check_task_count(run_dir, done, plan.stream.num_tasks)
    plan.check_learners(learners_of(routers), "leave it out of the routers asked for")
    evaluated = replace(plan, upto=done - 1, routers=on_request(routers), evaluates_only=True)
    return fit_group(evaluated, source=source)[0]
