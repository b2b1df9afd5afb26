"""What stage 2's works cost here, before they run: the cost models a plan
(`tosca_foundation.time_estimates.plan_works`, which owns plans, rates and their words) takes its
works' seconds from. Each is measured on this machine rather than assumed, because the same plan
takes minutes on one machine and an hour on a busy one:
- TOSCA: the SGD steps of each run, counted, times one step, plus each task's own cost and its
  evaluations, all timed at the store's dimension and recipe (tiny fits on random features, on the
  step threads a worker gets: `step_cost`);
- baselines: the arithmetic each declares on its class (`work`: RanPAC's float64 projection, Gram
  matrix and Cholesky solve of M x M; the joint probe's L-BFGS passes and calls), divided by this
  machine's single-thread rate, timed on a matrix product (baselines run on one BLAS thread), plus
  its optimizer's calls at the seconds one call takes here.
Extraction is stage 1, estimated there (featcache.extraction_estimate) and handed in by the caller.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from featcache.store import FeatureStore
from featcache.store.format import made_up_identity
from tosca_foundation.time_estimates import cpu_share
from tosca_heads.method.baseline_registry import BASELINES
from tosca_heads.method.protocol import StreamConfig

# ------------------------------------------------------------------------------------------ this machine


PROBE_BATCHES = 20  # batches of the probe's one task: its epochs at 1 (warm-up), 2 and 4 timed


@dataclass(frozen=True)
class StepCost:
    """What one TOSCA run costs here, by part: `step` the seconds of one SGD step (the marginal
    cost: what two probe fits of different lengths differ by, over the steps they differ by),
    `task` the seconds each task costs besides its steps (its modules set up, its routers fitted),
    `scored` the seconds of one test row through one task's module (the evaluation after each
    task scores every test row seen so far through every module trained so far)."""

    step: float
    task: float
    scored: float


@functools.lru_cache(maxsize=32)
def step_cost(
    dim: int, flow: str, r: int, s: int, batch_size: int, device: str, alone: bool = True
) -> StepCost:
    """One TOSCA run's costs here at this dimension and recipe (`StepCost`), from tiny fits on
    random features, on the step threads the runs will get (`alone`: a run with the machine to
    itself may take two; a worker among others, one). The first fit warms the process (its
    compiled step, its caches: a worker's first run, planned apart) and is not read; a third of a
    step's time used to be added for the evaluation, which measured 4% of a run (docs/benchmarks.md)."""
    import tempfile

    from tosca_heads.method.recipe import recipe
    from tosca_heads.requests.plan import FitPlan
    from tosca_heads.running.group import fit_group

    with tempfile.TemporaryDirectory() as tmp:
        rows, classes = PROBE_BATCHES * batch_size, 2
        store = _random_store(Path(tmp) / "probe.zarr", rows, dim, classes, test=rows)
        timed = {}
        for epochs in (1, 2, 4):
            probe = recipe(
                "paper", {"epochs": epochs, "flow": flow, "r": r, "s": s, "batch_size": batch_size}
            )
            plan = FitPlan.build(store, StreamConfig(classes, classes), trains=[probe], device=device)
            (result,) = fit_group(plan, write_outputs=False, overlap=None if alone else False)
            (stage,) = result.stages
            timed[epochs] = (stage.stats["seconds"], stage.eval_seconds)
        batches = int(np.ceil(rows / batch_size))
        step = max(0.0, (timed[4][0] - timed[2][0]) / (2 * batches))
        return StepCost(step, max(0.0, timed[2][0] - 2 * batches * step), timed[4][1] / rows)


@functools.lru_cache(maxsize=2)
def flops_per_second(dtype: str) -> float:
    """This machine's single-thread rate of a matrix product (float64 or float32) per second of
    wall time now: its rate per CPU second (0.3 s of CPU time, which a busy moment does not skew)
    times the share of a core this process gets (`cpu_share`, which it does)."""
    kind = torch.float64 if dtype == "float64" else torch.float32
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a, b = torch.randn(512, 512, dtype=kind), torch.randn(512, 512, dtype=kind)
        a @ b
        start, n = time.process_time(), 0
        while time.process_time() - start < 0.3:
            a @ b
            n += 1
        return 2 * 512**3 * n / (time.process_time() - start) * cpu_share()
    finally:
        torch.set_num_threads(threads)


@functools.lru_cache(maxsize=1)
def call_seconds() -> float:
    """Seconds of one optimizer call here besides its arithmetic (autograd's graph, the line
    search's bookkeeping): an L-BFGS closure on a tiny problem, timed on one thread, per call."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        x, y = torch.randn(16, 8), torch.arange(16) % 2
        weight = torch.zeros(2, 8, requires_grad=True)
        calls = [0]

        def closure() -> torch.Tensor:
            calls[0] += 1
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(x @ weight.T, y)
            loss.backward()
            return loss

        optimizer = torch.optim.LBFGS([weight], max_iter=5, line_search_fn="strong_wolfe")
        optimizer.step(closure)  # warm-up
        start, calls[0] = time.perf_counter(), 0
        for _ in range(4):
            weight.data.normal_()
            optimizer = torch.optim.LBFGS(
                [weight], max_iter=20, tolerance_grad=0, tolerance_change=0, line_search_fn="strong_wolfe"
            )
            optimizer.step(closure)
        return (time.perf_counter() - start) / max(1, calls[0])
    finally:
        torch.set_num_threads(threads)


def _random_store(path: Path, rows: int, dim: int, classes: int, test: int) -> FeatureStore:
    rng = np.random.default_rng(0)
    labels = {"train": np.arange(rows) % classes, "test": np.arange(test) % classes}
    identity = made_up_identity("probe", "probe", classes, labels, dim)
    ids = {k: [str(i) for i in range(len(v))] for k, v in labels.items()}
    store = FeatureStore.create(path, identity, {}, ids, labels, dim, 0, rows, "float32")
    for split, y in labels.items():
        store.write_chunk(split, 0, rng.normal(size=(len(y), dim)).astype(np.float32))
    return store


# ------------------------------------------------------------------------------------------ one work


@dataclass(frozen=True)
class TaskShape:
    """What the cost of a run reads of its store and split: rows of each task (train, test), the
    feature dimension and the classes."""

    train: tuple[int, ...]
    test: tuple[int, ...]
    dim: int
    classes: int


def shape_of(store: FeatureStore, stream: StreamConfig) -> TaskShape:
    """A store's rows per task of this split."""
    tasks = stream.task_stream(store.shape.classes)

    def rows(split: str) -> tuple[int, ...]:
        labels = tasks.remap(store.labels(split))
        return tuple(len(tasks.rows_of_task(labels, t)) for t in range(tasks.num_tasks))

    return TaskShape(rows("train"), rows("test"), store.dim, store.shape.classes)


def guessed_shape(train: int, test: int, classes: int, dim: int, stream: StreamConfig) -> TaskShape:
    """A store not extracted yet: its images spread evenly over its classes."""
    tasks = stream.task_stream(classes)
    sizes = [len(tasks.task_classes(t)) for t in range(tasks.num_tasks)]
    return TaskShape(
        tuple(round(train * n / classes) for n in sizes),
        tuple(round(test * n / classes) for n in sizes),
        dim,
        classes,
    )


def tosca_seconds(shape: TaskShape, train: Any, device: torch.device, alone: bool = True) -> float:
    """One TOSCA run: its steps (every task, every epoch), each task's own cost, and its evaluations
    (after task t, every test row seen so far through t + 1 modules), each timed here (`step_cost`;
    `alone`: in a process with the machine to itself, else one worker among others)."""
    scored = sum(sum(shape.test[: t + 1]) * (t + 1) for t in range(len(shape.test)))
    return stream_seconds(shape.dim, shape.train, scored, train, device, alone)


def stream_seconds(
    dim: int, module_rows: Sequence[int], scored: int, train: Any, device: torch.device, alone: bool = True
) -> float:
    """TOSCA over any stream: a module learnt on each of `module_rows` rows (every epoch), each
    module's own cost, and `scored` (evaluation row, module) pairs, each timed here (`step_cost`).
    A class-incremental run is one such stream (`tosca_seconds`); a scenario's is read off its plan
    (`applied.scenario_cost`)."""
    resolved = train.resolved(dim)
    cost = step_cost(dim, resolved.flow, resolved.r, resolved.s, resolved.batch_size, str(device), alone)
    steps = sum(-(-rows // resolved.batch_size) for rows in module_rows) * resolved.epochs
    return steps * cost.step + len(module_rows) * cost.task + scored * cost.scored


def baseline_seconds(method: str, shape: TaskShape, params: dict[str, Any]) -> float:
    """One baseline cell: the arithmetic its class declares (`work(shape, **params)`: its flops,
    their precision and, where it has them, its optimizer's Python-level calls) over this
    machine's rates; `params` its keywords (`baseline_registry.arguments`). A baseline that declares
    nothing is planned as class means (next to nothing)."""
    work = getattr(BASELINES[method], "work", None)
    if work is None:
        return 2 * sum(shape.train) * shape.dim / flops_per_second("float32")
    flops, precision, *calls = work(shape, **params)
    return flops / flops_per_second(precision) + sum(calls) * call_seconds()
