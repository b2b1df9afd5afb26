"""What a plan will cost here, before it runs: `suite --dry-run`, `sweep --dry-run`, and the
estimate a sweep's or a suite's progress shows until its units end at a steady rate.

Each part is measured on this machine rather than assumed, because the same plan takes minutes on
one machine and an hour on a busy one:
- TOSCA: the SGD steps of each run, counted, times one step timed at the store's dimension and
  recipe (a tiny fit on random features, on the step threads a worker gets), plus a third for the
  evaluation after each task;
- baselines: their arithmetic, counted per task (RanPAC's float64 projection, Gram matrix and
  Cholesky solve of M x M; the joint probe's L-BFGS passes), divided by this machine's single-thread
  rate, timed on a matrix product (baselines run on one BLAS thread);
- what is no arithmetic: the command's own start (the interpreter, torch and tosca imported, the
  store checked, this plan), each local Dask worker's start, each worker's first run (its kernels
  and caches warmed), the tables and figures at the end. Each is the CPU time it takes on a quiet
  machine (measured on the 2-core dev machine) over the share of a core this process gets now
  (`cpu_share`, timed): on a machine four processes share, four times as long;
- the cells or points share the workers: the wall time is the longest worker's load when the
  longest works are handed out first.
Extraction is stage 1, estimated there (featcache.estimate) and handed in by the caller.
`plan_works` puts the parts together, for sweeps and suites alike.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from featcache.foundation.limits import usable_cores
from featcache.store import FeatureStore
from tosca_heads.method.protocol import StreamConfig

# CPU seconds on a quiet machine (the 2-core dev VM, from CPU times taken under load, 2026-12-02):
COMMAND_CPU = 6.0  # a command's start: interpreter, torch and tosca, the store's checks, the plan's timings
WORKER_START_CPU = 5.0  # a local Dask worker: its nanny and process, torch and tosca imported
FIRST_RUN_CPU = 2.5  # a process's first run: the compiled step loaded, kernels and caches warmed
FINISH_CPU = 3.0  # tables, figures (matplotlib), summary, manifest
PER_WORK_SECONDS = 0.5  # dispatch, result transfer, the first read of a store in a process
LBFGS_ITERATIONS = 125  # the joint probe: 100 iterations, about 1.25 closure calls each
LBFGS_CALL_SECONDS = 0.02  # the Python overhead of one closure call (line search, bookkeeping)


@dataclass
class Estimate:
    """Seconds per part (`extract`, `train`, `baselines`, `start-up`, `finish`), the wall total
    once the works are shared between workers, each work's own seconds by its key (a suite's cell,
    a sweep's point: what a running job's progress weighs its units by), and a line per thing that
    could not be estimated or is missing."""

    parts: dict[str, float] = field(default_factory=dict)
    wall: float = 0.0
    missing: list[str] = field(default_factory=list)
    how: list[str] = field(default_factory=list)
    works: dict[str, float] = field(default_factory=dict)
    shared: float = 0.0  # the works' own wall time, shared by the workers (part of `wall`)

    def minutes(self) -> float:
        return self.wall / 60

    def running(self) -> float:
        """Seconds from the first unit's dispatch on: the wall less the command's own start (what a
        progress line says before any unit ended, the command having started already)."""
        return max(0.0, self.wall - self.parts.get("command", 0.0))


# ------------------------------------------------------------------------------------------ this machine


@functools.lru_cache(maxsize=32)
def step_seconds(
    dim: int, flow: str, r: int, s: int, batch_size: int, device: str, alone: bool = True
) -> float:
    """Seconds of one SGD step at this dimension and recipe, from a tiny fit on random features, on
    the step threads the runs will get (`alone`: a run with the machine to itself may take two; a
    worker among others, one)."""
    import tempfile

    from tosca_heads.experiments.group import fit_group
    from tosca_heads.experiments.plan import FitPlan
    from tosca_heads.method.recipe import recipe

    with tempfile.TemporaryDirectory() as tmp:
        rows, classes = 40 * batch_size, 2
        store = _random_store(Path(tmp) / "probe.zarr", rows, dim, classes)
        probe = recipe("paper", {"epochs": 3, "flow": flow, "r": r, "s": s, "batch_size": batch_size})
        plan = FitPlan.build(store, StreamConfig(classes, classes), trains=[probe], device=device)
        (result,) = fit_group(plan, write_outputs=False, overlap=None if alone else False)
        seconds = sum(stage.stats["seconds"] for stage in result.stages)
        return seconds / (3 * int(np.ceil(rows / batch_size)))


@functools.lru_cache(maxsize=1)
def cpu_share() -> float:
    """The share of one core this process gets now: its CPU time over the wall time of 0.3 s of
    busy work (1 on a quiet machine; about 0.25 where four processes want each core), at least 0.05."""
    start, cpu, n = time.perf_counter(), time.process_time(), 0
    while time.perf_counter() - start < 0.3:
        n += sum(range(1000))
    wall = time.perf_counter() - start
    return min(1.0, max(0.05, (time.process_time() - cpu) / wall))


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


def _random_store(path: Path, rows: int, dim: int, classes: int) -> FeatureStore:
    rng = np.random.default_rng(0)
    labels = {"train": np.arange(rows) % classes, "test": np.arange(classes) % classes}
    identity = {
        "dataset": {
            "name": "probe",
            "num_classes": classes,
            "samples": {k: len(v) for k, v in labels.items()},
        },
        "backbone": {"alias": "probe", "feature_dim": dim},
        "views": 0,
    }
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
    """One TOSCA run: its steps (every task, every epoch) times one step here (`alone`: in a process
    with the machine to itself, else one worker among others), plus a third."""
    resolved = train.resolved(shape.dim)
    per_step = step_seconds(
        shape.dim, resolved.flow, resolved.r, resolved.s, resolved.batch_size, str(device), alone
    )
    steps = sum(-(-rows // resolved.batch_size) for rows in shape.train)
    return steps * resolved.epochs * per_step * 4 / 3


def baseline_seconds(method: str, shape: TaskShape, params: dict[str, Any]) -> float:
    """One baseline cell: its arithmetic per task over this machine's single-thread rate; `params`
    as `experiments.baselines.baseline_params` gives them (RanPAC's M is `projection_dim`)."""
    train, test, dim = shape.train, shape.test, shape.dim
    tasks = len(train)
    per_class = shape.classes / max(tasks, 1)
    if method == "ranpac":
        m = int(params["projection_dim"])  # experiments.baselines.baseline_params' name
        rate = flops_per_second("float64")
        flops = 0.0
        for t, rows in enumerate(train):
            seen_test = sum(test[: t + 1])
            flops += 2 * rows * dim * m + 2 * rows * m * m  # projection, Gram matrix
            flops += 2 * m**3 / 3  # Cholesky (at about half a product's rate) and its solve
            flops += 2 * seen_test * dim * m + 2 * seen_test * m * per_class * (t + 1)  # scored
        fit_rows = int(0.8 * train[0])  # the ridge, chosen on the first task
        flops += 6 * fit_rows**2 * m if fit_rows < m else 10 * m**3 / 3
        return flops / rate
    if method == "joint_probe":
        rate = flops_per_second("float32")
        flops, calls = 0.0, 0
        for t in range(tasks):
            seen_rows, seen_classes = sum(train[: t + 1]), per_class * (t + 1)
            flops += LBFGS_ITERATIONS * 6 * seen_rows * dim * seen_classes
            calls += LBFGS_ITERATIONS
        return flops / rate + calls * LBFGS_CALL_SECONDS
    return 2 * sum(train) * dim / flops_per_second("float32") + 0.2  # class means: next to nothing


# ------------------------------------------------------------------------------------------ many works


def wall_seconds(works: Sequence[float], workers: int) -> float:
    """Works shared between workers, longest first, each to the least loaded: the longest load."""
    loads = [0.0] * max(1, min(workers, len(works) or 1))
    for seconds in sorted(works, reverse=True):
        loads[loads.index(min(loads))] += seconds + PER_WORK_SECONDS
    return max(loads)


def startup_seconds(workers: int, works: int) -> float:
    """Before the first work ends: a local cluster's workers start when more than one process runs
    the works (as many at once as there are cores), and each process's first run warms up."""
    if not works:
        return 0.0
    started = WORKER_START_CPU * -(-workers // usable_cores()) if workers > 1 and works > 1 else 0.0
    return (started + FIRST_RUN_CPU) / cpu_share()


def plan_works(
    train: dict[str, float], baselines: dict[str, float], workers: int, extract: float = 0.0
) -> Estimate:
    """The wall time of a command whose works (TOSCA runs in `train`, baselines in `baselines`,
    each's seconds by its key) are shared by `workers`, after `extract` seconds of extraction: the
    command's start, the workers' start, the works, the tables at the end."""
    works = {**train, **baselines}
    share = cpu_share()
    plan = Estimate(works=works)
    plan.parts = {
        "command": COMMAND_CPU / share if works or extract else 0.0,
        "extract": extract,
        "start-up": startup_seconds(workers, len(works)),
        "train": sum(train.values()),
        "baselines": sum(baselines.values()),
        "finish": FINISH_CPU / share if works else 0.0,
    }
    plan.shared = wall_seconds(list(works.values()), workers) if works else 0.0
    plan.wall = plan.shared + sum(v for k, v in plan.parts.items() if k not in ("train", "baselines"))
    if share < 0.9:
        plan.how.append(
            f"this process gets {share:.0%} of a core now: what is not arithmetic takes {1 / share:.1f}x"
        )
    return plan
