"""The one executor of stage 2's bulk work: a sweep's points, a suite's cells, a comparison's
baselines. Callers say what to run (`Work`: TOSCA configurations that train as one engine run,
or one baseline; or a work that runs itself, `RunsItself`) and what to do with each result (`on_done`); the executor runs the works here,
one after another, or as Dask tasks (a local cluster of `jobs` processes, or any `--scheduler`),
with one worker policy:

- plug-ins loaded in every process (a worker has not run the command line's start);
- freed memory kept (Dask's nanny sets a small malloc trim threshold that makes each SGD step
  page-fault its buffers in again: a step about twice as slow, docs/benchmarks.md);
- the store opened and its arrays loaded once per process, within the memory budget and half a
  Dask worker's memory limit (else read task by task), and kept for every later work on it;
- evaluation overlapped with training only in a process that has the machine to itself (a
  cluster's processes already fill the cores);
- the device decided where the work runs (`auto` on a remote worker is that worker's choice);
- the engine's thread plan (one BLAS thread: the same numbers in any process).

A worker that dies takes its works with it; Dask runs them again elsewhere, and each result is
handed to `on_done` once, when it arrives.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

import torch

from featcache.store import FeatureStore, open_unchanged
from tosca_foundation.devices import resolve_device
from tosca_foundation.limits import memory_budget
from tosca_foundation.plugins import load_plugins
from tosca_foundation.scheduler import SchedulerChoice, dask_client, parse_scheduler
from tosca_foundation.scheduler_link import each_finished, result_in_time
from tosca_heads.method.features import CachedFeatures
from tosca_heads.method.protocol import NO_VALIDATION, StreamConfig, ValidationConfig
from tosca_heads.method.recipe import TrainConfig
from tosca_heads.records import validation_record
from tosca_heads.records.baselines_folder import MethodResult, baseline_asked, write_baseline
from tosca_heads.records.run_folder import RunResult
from tosca_heads.requests.plan import FitPlan
from tosca_heads.running.baseline_runs import run_baseline
from tosca_heads.running.group import fit_group

T = TypeVar("T")


@dataclass(frozen=True)
class Work:
    """What one process runs: TOSCA configurations of one store, split and recipe family as one
    engine run (`trains`; written into `folders` when given, else returned only), or one baseline
    (`method` with its `params`; written into `baseline_folder` when given)."""

    store_path: str
    fingerprint: str
    stream: StreamConfig
    validation: ValidationConfig = NO_VALIDATION
    trains: tuple[TrainConfig, ...] = ()
    folders: tuple[str, ...] = ()
    method: str = ""
    params: tuple[tuple[str, Any], ...] = ()
    baseline_folder: str | None = None
    routers: tuple[str, ...] = ()  # on-request routers the TOSCA runs compute besides the others

    @property
    def kind(self) -> str:
        return "baseline" if self.method else "tosca"


class RunsItself(Protocol):
    """A work that runs itself in whichever process gets it (a sweep's point under a scenario:
    `applied.scenario_point`): plain values, so it travels to a Dask worker; `run` returns what the
    caller's `on_done` reads as `Outcome.value`. It follows the worker policy's plug-ins and memory
    rules here; its store and threads are its own."""

    def run(self) -> Any: ...


@dataclass
class Outcome:
    """What a work gave back: each configuration's run (TOSCA) or the baseline's result (or what a
    work that runs itself returned, `value`), its wall seconds, the device it ran on and how many
    times its process had read the store's arrays."""

    runs: list[RunResult] = field(default_factory=list)
    baseline: MethodResult | None = None
    value: Any = None
    seconds: float = 0.0
    device: str = "cpu"
    loads: int = 1
    pid: int = 0  # the process that ran it


# ------------------------------------------------------------------------------------------ a process

_SOURCES: dict[tuple[str, str, str], tuple[FeatureStore, CachedFeatures]] = {}
_SOURCES_LOCK = threading.Lock()
LOADS: dict[tuple[str, str, str], int] = {}  # times this process read each store's arrays (1 = once)


def features_in_process(
    store_path: str, fingerprint: str, device: torch.device
) -> tuple[tuple[str, str, str], FeatureStore, CachedFeatures]:
    """Open the store and load its arrays (onto the device) once per process; every later work on
    it reuses them. The store must still be the one the work was planned on."""
    key = (store_path, fingerprint, str(device))
    with _SOURCES_LOCK:
        if key not in _SOURCES:
            store = open_unchanged(
                store_path,
                fingerprint,
                "the work was planned",
                "run the same command against the store as it is now",
            )
            _SOURCES.clear()  # a process that moves on to another store frees the previous one's arrays
            budget = _memory_budget() if device.type == "cpu" else memory_budget()
            _SOURCES[key] = (store, CachedFeatures(store, budget, device).preload())
            LOADS[key] = LOADS.get(key, 0) + 1
        return (key, *_SOURCES[key])


def share_features(store: FeatureStore, source: CachedFeatures, device: torch.device) -> None:
    """Hand this process's cache a store's arrays already loaded (a command that evaluates TOSCA and
    then runs baselines here reads the store once)."""
    key = (str(store.path.resolve()), store.fingerprint, str(torch.device(device)))
    with _SOURCES_LOCK:
        if key not in _SOURCES:
            _SOURCES.clear()
            _SOURCES[key] = (store, source)
            LOADS[key] = LOADS.get(key, 0) + 1


Progress = Callable[[str, int, int], None]  # (what, task ended (-1: started), tasks): a baseline's tasks


def run_work(work: Work | RunsItself, device: str, alone: bool, progress: Progress | None = None) -> Outcome:
    """Run one work in this process under the worker policy (the module docstring). `alone`: this
    process has the machine to itself, so evaluation may overlap training on a spare core."""
    load_plugins()
    keep_freed_memory()
    if not isinstance(work, Work):
        start = time.perf_counter()
        value = work.run()
        return Outcome(value=value, seconds=time.perf_counter() - start, pid=os.getpid())
    resolved = resolve_device(device)
    key, store, source = features_in_process(work.store_path, work.fingerprint, resolved)
    # the plan of the work's split (its stream, validation rows and protocol), at this process's edge
    plan = FitPlan.build(store, work.stream, work.validation, device=resolved)
    start = time.perf_counter()
    outcome = Outcome(device=str(resolved), loads=LOADS[key], pid=os.getpid())
    if work.method:
        params = dict(work.params)
        result = run_baseline(work.method, plan, source, progress, **params)
        if work.baseline_folder is not None:
            held = validation_record(work.validation, plan.held_ids) if work.validation.enabled else None
            asked = baseline_asked(work.method, store, work.stream, params, held)
            result = write_baseline(Path(work.baseline_folder), result, asked, str(resolved))
        outcome.baseline = result
    else:
        outcome.runs = fit_group(
            replace(plan.with_trains(work.trains, [Path(f) for f in work.folders]), routers=work.routers),
            source=source,
            write_outputs=bool(work.folders),
            overlap=None if alone else False,
        )
    outcome.seconds = time.perf_counter() - start
    return outcome


# Dask's nanny starts workers with MALLOC_TRIM_THRESHOLD_=65536 (see the module docstring).
DASK_TRIM_VARIABLE = "MALLOC_TRIM_THRESHOLD_"
KEEP_FREED_BYTES = 256 << 20
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's largest allowed value on 64-bit


def keep_freed_memory() -> None:
    """On a process started with a small trim threshold (a remote cluster's worker), raise it."""
    value = os.environ.get(DASK_TRIM_VARIABLE, "")
    if value.isdigit() and int(value) < KEEP_FREED_BYTES and sys.platform.startswith("linux"):
        import ctypes

        try:
            libc = ctypes.CDLL("libc.so.6")
        except OSError:  # not glibc: nothing to tune
            return
        # both: the variable also froze the mmap threshold at 128 KiB, and a 48 x 768 batch is 144 KiB
        libc.mallopt(-1, KEEP_FREED_BYTES)  # M_TRIM_THRESHOLD
        libc.mallopt(-3, MMAP_THRESHOLD_BYTES)  # M_MMAP_THRESHOLD
        os.environ[DASK_TRIM_VARIABLE] = str(KEEP_FREED_BYTES)


def _memory_budget() -> int:
    """The memory budget (`TOSCA_MEMORY_BUDGET`, else half the available memory), within half this
    Dask worker's memory limit: its nanny kills a worker at 95% of the limit, and many jobs split the
    machine's memory between them. Above that, features are read task by task (slower, same numbers)."""
    budget = memory_budget()
    try:
        from distributed import get_worker

        limit = get_worker().memory_manager.memory_limit
    except (ImportError, ValueError, AttributeError):  # not on a Dask worker (the serial path)
        return budget
    return min(budget, limit // 2) if limit else budget


@contextlib.contextmanager
def _local_workers_keep_freed_memory() -> Iterator[None]:
    """Local workers start without Dask's small malloc trim threshold."""
    import dask
    import distributed  # noqa: F401 (its settings: were they loaded only within this block, the
    # variable would stay, and leaving the block would delete them all: KeyError 'comm' next time)

    environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ", {}))
    environ.pop(DASK_TRIM_VARIABLE, None)
    # a nanny also writes its pre-spawn variables into this process's environment, so an earlier
    # local cluster (an extraction's) would hand the small threshold down to these workers
    inherited = os.environ.pop(DASK_TRIM_VARIABLE, None)
    try:
        with dask.config.set({"distributed.nanny.pre-spawn-environ": environ}):
            yield
    finally:
        if inherited is not None:
            os.environ[DASK_TRIM_VARIABLE] = inherited


# ------------------------------------------------------------------------------------------ many processes


@dataclass(frozen=True)
class Executor:
    """Where works run: here, one after another (`jobs` 1, no scheduler), or as Dask tasks on a
    local cluster of `jobs` processes or on `scheduler` (tosca_foundation.scheduler's forms).
    `device` is what each process is told (`auto` is decided where the work runs)."""

    jobs: int = 1
    scheduler: str | None = None
    device: str = "cpu"

    @property
    def serial(self) -> bool:
        return self.jobs == 1 and self.scheduler is None

    def processes_per_device(self) -> int:
        """How many processes of this machine train on its one device at once (for group sizes):
        `jobs` local processes, N for local:N; local-cuda gives each GPU one process, and a remote
        cluster's are sized by this machine's device alone (pass --group there)."""
        if self.scheduler is None:
            return self.jobs
        choice = parse_scheduler(self.scheduler)
        return choice.workers if choice.kind == "local" and choice.workers else 1

    def run(
        self,
        works: Sequence[Work] | Sequence[RunsItself],
        on_done: Callable[[Any, Outcome], None],
        progress: Progress | None = None,
    ) -> None:
        """Run every work; `on_done(work, outcome)` once per work (the object given), in the order
        they finish. `progress` hears of each baseline task here (Dask tasks report when done)."""
        if not works:
            return
        if self.serial:
            for work in works:
                on_done(work, run_work(work, self.device, True, progress))
            return
        workers = min(self.jobs, len(works))  # no idle processes for a short remainder
        choice = (
            parse_scheduler(self.scheduler) if self.scheduler else SchedulerChoice("local", workers=workers)
        )
        with _local_workers_keep_freed_memory(), dask_client(choice) as client:
            futures = {client.submit(run_work, work, self.device, False, pure=False): work for work in works}
            for future in each_finished(client, futures):  # bounded: scheduler_link
                on_done(futures[future], result_in_time(client, future))


def in_groups(items: Sequence[T], key: Callable[[T], Hashable], size: int) -> list[list[T]]:
    """Items that may train together (equal keys) in runs of at most `size`, in their order."""
    by_key: dict[Hashable, list[T]] = {}
    for item in items:
        by_key.setdefault(key(item), []).append(item)
    return [members[i : i + size] for members in by_key.values() for i in range(0, len(members), size)]
