"""What stage 2's works cost here, before they run: the cost models a plan
(`featcache.foundation.estimate.plan_works`, which puts every command's plan together) takes its
works' seconds from. Each is measured on this machine rather than assumed, because the same plan
takes minutes on one machine and an hour on a busy one:
- TOSCA: the SGD steps of each run, counted, times one step timed at the store's dimension and
  recipe (a tiny fit on random features, on the step threads a worker gets), plus a third for the
  evaluation after each task;
- baselines: their arithmetic, counted per task (RanPAC's float64 projection, Gram matrix and
  Cholesky solve of M x M; the joint probe's L-BFGS passes), divided by this machine's single-thread
  rate, timed on a matrix product (baselines run on one BLAS thread).
Extraction is stage 1, estimated there (featcache.estimate) and handed in by the caller.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from featcache.foundation.estimate import cpu_share
from featcache.store import FeatureStore
from tosca_heads.method.baseline_names import BASELINES
from tosca_heads.method.protocol import StreamConfig

LBFGS_ITERATIONS = 125  # the joint probe: 100 iterations, about 1.25 closure calls each
LBFGS_CALL_SECONDS = 0.02  # the Python overhead of one closure call (line search, bookkeeping)


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
    its keywords (`baseline_names.arguments`). A baseline whose class declares `work(shape,
    **params)` (RanPAC: its M) says its own arithmetic and precision."""
    train, dim = shape.train, shape.dim
    tasks = len(train)
    per_class = shape.classes / max(tasks, 1)
    work = getattr(BASELINES[method], "work", None)
    if work is not None:
        flops, precision = work(shape, **params)
        return flops / flops_per_second(precision)
    if method == "joint_probe":
        rate = flops_per_second("float32")
        flops, calls = 0.0, 0
        for t in range(tasks):
            seen_rows, seen_classes = sum(train[: t + 1]), per_class * (t + 1)
            flops += LBFGS_ITERATIONS * 6 * seen_rows * dim * seen_classes
            calls += LBFGS_ITERATIONS
        return flops / rate + calls * LBFGS_CALL_SECONDS
    return 2 * sum(train) * dim / flops_per_second("float32") + 0.2  # class means: next to nothing
