"""Sweeps: the Cartesian grid of fit flags, each point a full multi-task run on the cached features.

Compatible points (same flow, epochs, batch size and task split) are grouped, up to `group` at a
time, and each group trains as one engine run (`fit_group`): on a GPU hundreds of points step
together. Groups run as Dask tasks (a LocalCluster of `jobs` single-threaded processes, or any
scheduler address); each worker process opens the store once and keeps its arrays for every
group it runs. Finished points are appended to results.csv as they arrive, so a killed sweep
resumes by skipping the points already there. The sweep folder's tables and plots are rebuilt
at the end.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import os
import shlex
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from featcache.foundation import atomic, folders
from featcache.foundation.devices import parse_device, resolve_device, worker_device
from featcache.foundation.errors import UserError
from featcache.foundation.files import read_json
from featcache.foundation.limits import max_processes, require_at_most, usable_cores
from featcache.foundation.locks import folder_lock
from featcache.foundation.plugins import load_plugins
from featcache.foundation.scheduler import SchedulerChoice, check_available, dask_client, parse_scheduler
from featcache.store import FeatureStore, check_readable, open_unchanged, resolve_store
from tosca_heads.engine.device import check_settings
from tosca_heads.engine.memory import default_group_size, require_room
from tosca_heads.experiments import runfiles
from tosca_heads.experiments.requests import SweepRequest
from tosca_heads.experiments.results import (
    ResultsTable,
    by_point,
    flag_text,
    point_key,
    point_rows,
    routers_in,
    summarise_points,
    varying_flags,
    write_sweep_outputs,
)
from tosca_heads.experiments.runs import RunResult, fit_group, protocol_of
from tosca_heads.method.features import MEMORY_BUDGET_BYTES, CachedFeatures
from tosca_heads.method.protocol import (
    NO_VALIDATION,
    ProtocolReport,
    StreamConfig,
    ValidationConfig,
    split_name,
    split_origin,
    stream_config,
)
from tosca_heads.method.recipe import RECIPE_FLAGS, TrainConfig, group_key, recipe
from tosca_heads.routers import ALIASES, HEADLINE, ROUTERS

# Every fit flag a sweep can vary, with its parser: the recipe's (method.recipe.RECIPE_FLAGS; seed
# is the flag `--seeds` fills) and the task split's.
TRAIN_FLAGS: dict[str, Callable[[str], Any]] = {flag.name: flag.kind for flag in RECIPE_FLAGS}
STREAM_FLAGS: dict[str, Callable[[str], Any]] = {"init_cls": int, "increment": int, "order_seed": int}
GRID_FLAGS = {**TRAIN_FLAGS, **STREAM_FLAGS}
MAX_GRID_POINTS = 100_000
FORMAT = 3  # sweep.json (3: the validation split and the choice; results.csv: experiments.results)


def option_name(flag: str) -> str:
    """The command-line spelling of a grid flag (seed is given as --seeds)."""
    return "--seeds" if flag == "seed" else f"--{flag.replace('_', '-')}"


def parse_values(flag: str, text: str) -> list[Any]:
    """'8,16,32' -> [8, 16, 32], in the order given, duplicates dropped."""
    parse = GRID_FLAGS[flag]
    values: list[Any] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        try:
            value = parse(item)
        except ValueError:
            kind = {int: "an integer", float: "a number", str: "a name"}[parse]  # type: ignore[index]
            raise UserError(
                f"{option_name(flag)}: {item!r} is not {kind}; give a comma-separated list such as 8,16,32"
            ) from None
        if value not in values:
            values.append(value)
    if not values:
        raise UserError(f"{option_name(flag)} is empty; give a comma-separated list such as 8,16,32")
    return values


@dataclass(frozen=True)
class SweepPoint:
    """One run of the grid: a resolved training recipe (r, s as numbers), a stream split and the
    validation split held out (the same for every point of a sweep)."""

    train: TrainConfig
    stream: StreamConfig
    validation: ValidationConfig = NO_VALIDATION

    def flags(self) -> dict[str, Any]:
        """Every flag; the validation split's only when one is held out (so a point without one
        keeps the key it had before validation splits existed)."""
        flags = {**asdict(self.train), **asdict(self.stream)}
        if self.validation.enabled:
            flags.update(val_fraction=self.validation.fraction, val_seed=self.validation.seed)
        return flags

    @property
    def key(self) -> str:
        """Identity of the point: every flag, so a grown grid re-uses the points it shares."""
        return point_key(self.flags())

    @property
    def group_key(self) -> tuple:
        """Points with equal group keys can train together in one engine run."""
        return (*group_key(self.train), *asdict(self.stream).values(), *asdict(self.validation).values())


def make_groups(points: Sequence[SweepPoint], size: int) -> list[list[SweepPoint]]:
    """Compatible points in runs of at most `size`, in the grid's order."""
    by_key: dict[tuple, list[SweepPoint]] = {}
    for point in points:
        by_key.setdefault(point.group_key, []).append(point)
    return [members[i : i + size] for members in by_key.values() for i in range(0, len(members), size)]


def grid_points(
    grid: dict[str, list[Any]],
    base_train: TrainConfig,
    base_stream: StreamConfig,
    dim: int,
    num_classes: int,
    validation: ValidationConfig = NO_VALIDATION,
) -> list[SweepPoint]:
    """The Cartesian product in a fixed flag order, each point validated before anything runs."""
    unknown = set(grid) - set(GRID_FLAGS)
    if unknown:
        raise ValueError(f"not sweepable: {sorted(unknown)}")
    names = [name for name in GRID_FLAGS if name in grid]
    size = math.prod(len(grid[name]) for name in names)
    require_at_most("a grid of", size, MAX_GRID_POINTS, "points", "split the sweep into several")
    points = []
    for values in itertools.product(*(grid[name] for name in names)):
        chosen = dict(zip(names, values, strict=True))
        train = replace(base_train, **{k: v for k, v in chosen.items() if k in TRAIN_FLAGS})
        train.validate()
        stream = replace(base_stream, **{k: v for k, v in chosen.items() if k in STREAM_FLAGS})
        stream.task_stream(num_classes)  # refuses a split that does not divide the classes
        points.append(SweepPoint(train.resolved(dim), stream, validation))
    return points


# ------------------------------------------------------------------------------------------ worker side

_SOURCES: dict[tuple[str, str, str], tuple[FeatureStore, CachedFeatures]] = {}
_SOURCES_LOCK = threading.Lock()
LOADS: dict[tuple[str, str, str], int] = {}  # times this process read each store's arrays (1 = once)


def features_on_worker(
    store_path: str, fingerprint: str, device: torch.device
) -> tuple[tuple[str, str, str], FeatureStore, CachedFeatures]:
    """Open the store and load its arrays (onto the device) once per process; every later group
    reuses them."""
    key = (store_path, fingerprint, str(device))
    with _SOURCES_LOCK:
        if key not in _SOURCES:
            store = open_unchanged(
                store_path, fingerprint, "the sweep began", "rerun the sweep against the store as it is now"
            )
            _SOURCES.clear()  # a worker that moves on to another store frees the previous one's arrays
            budget = _memory_budget() if device.type == "cpu" else MEMORY_BUDGET_BYTES
            _SOURCES[key] = (store, CachedFeatures(store, budget, device).preload())
            LOADS[key] = LOADS.get(key, 0) + 1
        return (key, *_SOURCES[key])


# Dask's nanny starts workers with MALLOC_TRIM_THRESHOLD_=65536, so glibc hands freed memory
# back to the OS after nearly every SGD step and the next step page-faults it in again (a step
# about twice as slow: docs/benchmarks.md). A sweep worker keeps its memory.
DASK_TRIM_VARIABLE = "MALLOC_TRIM_THRESHOLD_"
KEEP_FREED_BYTES = 256 << 20
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's largest allowed value on 64-bit


def _keep_freed_memory() -> None:
    """On a worker started with a small trim threshold (a remote cluster's), raise it in-process."""
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
    """Hold the store in memory only within half this Dask worker's memory limit: its nanny kills a
    worker at 95% of the limit, and many jobs split the machine's memory between them. Above that,
    features are read task by task (slower, same numbers)."""
    try:
        from distributed import get_worker

        limit = get_worker().memory_manager.memory_limit
    except (ImportError, ValueError, AttributeError):  # not on a Dask worker (the serial path)
        return MEMORY_BUDGET_BYTES
    return min(MEMORY_BUDGET_BYTES, limit // 2) if limit else MEMORY_BUDGET_BYTES


def run_group(
    store_path: str, fingerprint: str, points: Sequence[SweepPoint], device: str = "cpu"
) -> list[list[dict[str, Any]]]:
    """Runs on a worker: one engine run of compatible points (all tasks, every router), nothing
    written; each point's results.csv rows. Seconds are the point's share of the group's wall time."""
    load_plugins()  # a worker process has not run the CLI's start: its plug-in routers
    _keep_freed_memory()
    resolved = resolve_device(device)
    key, store, source = features_on_worker(store_path, fingerprint, resolved)
    start = time.perf_counter()
    results = fit_group(
        store,
        points[0].stream,
        [p.train for p in points],
        None,
        source=source,
        write_outputs=False,
        device=resolved,
        overlap=False,  # the sweep's worker processes (--jobs, default: the cores) already use every core
        validation=points[0].validation,
    )
    seconds = time.perf_counter() - start
    return [
        _rows(p, r, seconds, len(points), str(resolved), LOADS[key])
        for p, r in zip(points, results, strict=True)
    ]


def _rows(
    point: SweepPoint, result: RunResult, group_seconds: float, group_size: int, device: str, loads: int
) -> list[dict[str, Any]]:
    metrics = result.metrics()
    columns: dict[str, Any] = {"key": point.key, **point.flags()}
    columns.update(val_fraction=point.validation.fraction, val_seed=point.validation.seed)
    columns.update(
        dataset=result.config["dataset"],
        backbone=result.config["backbone"],
        tasks=metrics["finished_tasks"],
        params_per_task=metrics["params_per_task"],
        train_seconds=sum(s.stats["seconds"] for s in result.stages) / group_size,
        eval_seconds=sum(s.eval_seconds for s in result.stages) / group_size,
        run_seconds=group_seconds / group_size,
        worker_pid=os.getpid(),
        feature_loads=loads,
        group_size=group_size,
        group_seconds=group_seconds,
        device=device,
    )
    return point_rows(columns, metrics["routers"], metrics.get("validation"))


# ------------------------------------------------------------------------------------------ driver side


@dataclass
class SweepOutcome:
    out: Path
    points: int
    already_done: int
    ran: int
    seconds: float
    files: dict[str, Path]
    frame: Any  # every row of results.csv (a pandas DataFrame: one row per point and router)
    group: int = 1  # most points trained in one engine run
    rank_by: str = "entropy"
    shown: list[str] = field(default_factory=lambda: list(HEADLINE))
    summary: Any = None  # per configuration, mean and std over seeds, best first (empty: no results)
    varying: list[str] = field(default_factory=list)  # the flags that take more than one value
    chosen: dict[str, Any] | None = None  # what was chosen, on which split (`results.choices`)


PointCallback = Callable[[list[dict[str, Any]], int, int], None]  # (a point's rows, finished, total)


def grid_digest(points: Sequence[SweepPoint]) -> str:
    """Identity of a grid (its set of points), recorded so the same command finds its folder again."""
    return hashlib.sha256("\n".join(sorted(p.key for p in points)).encode()).hexdigest()[:16]


def find_sweep_dir(runs_root: Path, store: FeatureStore, points: Sequence[SweepPoint]) -> Path | None:
    """The newest sweep folder under runs_root made by this grid on this store, if any: rerunning
    a sweep command without --out resumes it instead of starting a new runs/sweep-<time>."""
    digest = grid_digest(points)
    for meta_path in sorted(Path(runs_root).glob("sweep-*/sweep.json"), reverse=True):
        try:
            meta = read_json(meta_path, "sweep file", "")
        except UserError:
            continue  # a damaged folder is not this grid's: it is never resumed by accident
        if not isinstance(meta, dict) or not isinstance(meta.get("grids", []), list):
            continue
        grids = [meta.get("grid"), *meta.get("grids", [])]
        if meta.get("store_fingerprint") == store.fingerprint and digest in grids:
            return meta_path.parent
    return None


def is_sweep_dir(folder: Path) -> bool:
    """A sweep folder written before folders carried tosca's marker: it holds a sweep.json."""
    return (Path(folder) / "sweep.json").is_file()


def check_room(store: FeatureStore, points: Sequence[SweepPoint], device: torch.device) -> None:
    """Refuse, before anything runs, a grid whose most demanding point cannot fit one process here
    (each point trains in at least a group of its own)."""
    classes = store.shape.classes
    for point in points:
        require_room(store.shape, [point.train], point.stream.task_stream(classes).num_tasks, device)


def read_sweep_file(path: Path) -> dict[str, Any]:
    """A sweep.json, refused in one line when damaged, edited or of a newer format."""
    meta = read_json(path, "sweep file", "it was edited or damaged; pass another --out")
    written = meta.get("format", 1)
    if isinstance(written, bool) or not isinstance(written, int) or written < 1:
        raise UserError(f"sweep file {path} records format {written!r}; it was edited or damaged")
    if written > FORMAT:
        raise UserError(f"sweep file {path} was written by a newer tosca (format {written}): upgrade tosca")
    if not isinstance(meta.get("grids", []), list):
        raise UserError(f"sweep file {path} was edited: its grids are not a list; pass another --out")
    return meta


def check_sweep_folder(out: Path, validation: ValidationConfig | None = None) -> None:
    """Refuse now, before anything runs or is written, a folder a sweep may not write, one whose
    files (sweep.json, results.csv) were damaged, or (given `validation`) one made with another
    validation split."""
    if folders.check_claimable(out, "sweep", "--out", written_before=is_sweep_dir):
        if (out / "sweep.json").exists():
            recorded = read_sweep_file(out / "sweep.json").get("validation")
            if validation is not None and not _same_validation(recorded, validation):
                raise UserError(f"sweep folder {out} {_validation_mismatch(recorded)}")
        ResultsTable(out / "results.csv", check_only=True)


def _same_validation(recorded: Any, validation: ValidationConfig) -> bool:
    """A sweep.json's validation split (None: none) is this one."""
    if not validation.enabled:
        return recorded is None
    return isinstance(recorded, dict) and validation.record() == {
        k: recorded.get(k) for k in ("fraction", "seed")
    }


def _claim_sweep_dir(
    out: Path, store: FeatureStore, points: Sequence[SweepPoint], protocol: dict[str, Any] | None = None
) -> None:
    """A sweep folder belongs to one store: resuming it on another store would mix their rows."""
    folders.claim(out, "sweep", "--out", written_before=is_sweep_dir)
    atomic.remove_stale(out)  # what a killed sweep left half-written (its process is gone)
    meta_path = out / "sweep.json"
    ident = store.identity
    meta = {
        "format": FORMAT,
        "store": str(store.path.resolve()),
        "store_fingerprint": store.fingerprint,
        "dataset": ident["dataset"]["name"],
        "backbone": ident["backbone"]["alias"],
        "grid": grid_digest(points),
    }
    validation = points[0].validation if points else NO_VALIDATION
    if validation.enabled:
        meta["validation"] = runfiles.validation_record(store, validation)
        runfiles.write_validation_ids(out, store, validation)
    if protocol is not None:
        meta["protocol"] = protocol
    if meta_path.exists():
        existing = read_sweep_file(meta_path)
        if not isinstance(existing.get("store_fingerprint"), str):
            raise UserError(
                f"{meta_path} records no store fingerprint: it was edited or damaged; pass another --out"
            )
        if existing.get("store_fingerprint") != store.fingerprint:
            raise UserError(
                f"sweep folder {out} holds results of another store ({existing.get('store')}); pass another --out"
            )
        if existing.get("validation") != meta.get("validation"):
            raise UserError(f"sweep folder {out} {_validation_mismatch(existing.get('validation'))}")
        known = [existing.get("grid"), *existing.get("grids", [])]
        if meta["grid"] in known:
            return
        # a grown grid resumed with --out: the same command without --out finds this folder again
        meta = {
            **existing,
            **meta,
            "grid": existing.get("grid"),
            "grids": [*existing.get("grids", []), meta["grid"]],
        }
    atomic.write_text(meta_path, json.dumps(meta, indent=2) + "\n")


def _validation_mismatch(recorded: Any) -> str:
    """Why a sweep folder cannot take this sweep's points: it was made with another validation split
    (one folder, one split: its points are ranked together)."""
    if not isinstance(recorded, dict):
        return (
            "holds points without a validation split (ranked on test); pass --val-fraction 0 to resume it, "
            "or another --out"
        )
    return (
        f"holds points of another validation split ({recorded.get('fraction')!r} of each class, seed "
        f"{recorded.get('seed')!r}); pass --val-fraction {recorded.get('fraction')} --val-seed "
        f"{recorded.get('seed')} to resume it, or another --out"
    )


def record_choice(out: Path, chosen: dict[str, Any] | None) -> None:
    """sweep.json keeps what the sweep chose, on which split, and the command that refits it."""
    meta_path = out / "sweep.json"
    meta = read_sweep_file(meta_path)
    if meta.get("chosen") != chosen:
        atomic.write_text(meta_path, json.dumps({**meta, "chosen": chosen}, indent=2) + "\n")


def fit_command(store: FeatureStore, config: dict[str, Any], seed: int, validation: ValidationConfig) -> str:
    """The `tosca fit` command that refits one configuration of a sweep (at one of its seeds)."""
    args = ["tosca", "fit", "--store", str(store.path.resolve())]
    for name in [*STREAM_FLAGS, *TRAIN_FLAGS]:
        value = seed if name == "seed" else config.get(name)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        args.append(f"{option_name(name) if name != 'seed' else '--seed'}={flag_text(value)}")
    if validation.enabled:
        args += [f"--val-fraction={validation.fraction:g}", f"--val-seed={validation.seed}"]
    return shlex.join(args)


def run_sweep(
    store: FeatureStore,
    points: Sequence[SweepPoint],
    out: Path,
    jobs: int = 1,
    scheduler: str | None = None,
    rank_by: str = "entropy",
    on_point: PointCallback | None = None,
    group: int | None = None,
    device: str = "cpu",
    shown: Sequence[str] | None = None,
    protocol: dict[str, Any] | None = None,
    on_start: Callable[[], None] | None = None,
) -> SweepOutcome:
    """Run the points not yet in out/results.csv, up to `group` compatible points per engine run
    (None: 1 on the CPU, as many as fit the GPU's memory on CUDA); rebuild the tables and plots,
    and record what the sweep chose (on its validation split where it has one). `on_start` is
    called once the folder is claimed, before the first point (a refusal is the only line)."""
    if rank_by not in ROUTERS:
        raise UserError(f"unknown --rank-by {rank_by!r}: use one of {', '.join(ROUTERS)}")
    if jobs < 1:
        raise UserError(f"--jobs must be at least 1, got {jobs}")
    require_at_most(
        "--jobs", jobs, max_processes(), "processes", "at most 4 per usable core, and 64 anywhere"
    )
    if group is not None and group < 1:
        raise UserError(f"--group must be at least 1, got {group}")
    check_settings()  # the points would each fail on it, after the sweep folder is claimed
    remote = scheduler is not None and parse_scheduler(scheduler).kind in ("address", "file")
    if remote:
        # the workers decide `auto` and own the GPUs: this machine (perhaps a head node without
        # one) only checks the name, and sizes groups by its own device unless --group is given
        named = parse_device(device)
        local = named if named is not None and named.type == "cpu" else resolve_device("auto")
        resolved, sent = local, worker_device(device)
    else:
        resolved = resolve_device(device)
        sent = str(resolved)
    check_readable(store)  # each worker checks every chunk as it loads the arrays
    if not remote:
        check_room(store, points, resolved)
    out = Path(out)
    check_sweep_folder(
        out, points[0].validation if points else None
    )  # before its lock file is made beside it
    with folder_lock(out, "sweep folder", "pass another --out"):
        return _run_sweep_locked(
            store,
            points,
            out,
            jobs,
            scheduler,
            rank_by,
            on_point,
            group,
            resolved,
            sent,
            shown,
            protocol,
            on_start,
        )


def _run_sweep_locked(
    store: FeatureStore,
    points: Sequence[SweepPoint],
    out: Path,
    jobs: int,
    scheduler: str | None,
    rank_by: str,
    on_point: PointCallback | None,
    group: int | None,
    resolved: torch.device,
    worker_device: str,
    shown: Sequence[str] | None,
    protocol: dict[str, Any] | None,
    on_start: Callable[[], None] | None,
) -> SweepOutcome:
    _claim_sweep_dir(out, store, points, protocol)
    if on_start:
        on_start()
    table = ResultsTable(out / "results.csv")
    done = table.keys()
    pending = [p for p in points if p.key not in done]
    start = time.perf_counter()
    total = len(pending)
    path, fingerprint = str(store.path.resolve()), store.fingerprint
    size = group or default_group_size(store.shape, pending, resolved, _processes_per_device(jobs, scheduler))
    groups = make_groups(pending, size)
    finished = 0

    def record(group_rows: list[list[dict[str, Any]]]) -> None:
        nonlocal finished
        for rows in group_rows:
            table.append(rows)
            finished += 1
            if on_point:
                on_point(rows, finished, total)

    workers = min(jobs, len(groups))  # no idle processes for a short remainder
    if groups and workers == 1 and scheduler is None:
        for members in groups:  # one process: no cluster to start
            record(run_group(path, fingerprint, members, worker_device))
    elif groups:
        _run_on_dask(groups, path, fingerprint, workers, scheduler, worker_device, record)
    frame = table.frame()
    validation = points[0].validation if points else NO_VALIDATION
    seed = min((p.train.seed for p in points), default=0)
    files, chosen = write_sweep_outputs(
        out, frame, rank_by, shown, lambda config: fit_command(store, config, seed, validation)
    )
    record_choice(out, chosen)
    outcome = SweepOutcome(
        out, len(points), len(points) - total, total, time.perf_counter() - start, files, frame, size
    )
    outcome.rank_by, outcome.shown, outcome.chosen = rank_by, list(shown or HEADLINE), chosen
    if not frame.empty:
        points_frame = by_point(frame)
        outcome.summary = summarise_points(points_frame, rank_by, routers_in(frame))
        outcome.varying = varying_flags(points_frame)
    return outcome


def _processes_per_device(jobs: int, scheduler: str | None) -> int:
    """How many worker processes of this machine train on its one device at once: `jobs` local
    processes, or N for local:N; dask-cuda's local-cuda gives each GPU one worker, and a remote
    cluster's workers are sized by this machine's device alone (pass --group there)."""
    if scheduler is None:
        return jobs
    choice = parse_scheduler(scheduler)
    return choice.workers if choice.kind == "local" and choice.workers else 1


def _run_on_dask(
    groups: Sequence[Sequence[SweepPoint]],
    path: str,
    fingerprint: str,
    jobs: int,
    scheduler: str | None,
    device: str,
    record: Callable[[list[list[dict[str, Any]]]], None],
) -> None:
    """Groups as Dask tasks on `scheduler` (featcache.foundation.scheduler's forms: local:N, local-cuda, an
    address or a scheduler file), or on a local cluster of `jobs` processes. A worker that dies
    takes its groups with it; Dask runs them again elsewhere, and a row is recorded once, when
    its group's result arrives."""
    from distributed import as_completed

    choice = parse_scheduler(scheduler) if scheduler else SchedulerChoice("local", workers=jobs)
    with _keep_freed_memory_on_local_workers(), dask_client(choice) as client:
        futures = [client.submit(run_group, path, fingerprint, g, device, pure=False) for g in groups]
        for future in as_completed(futures):
            record(future.result())


@contextlib.contextmanager
def _keep_freed_memory_on_local_workers() -> Iterator[None]:
    """Local workers start without Dask's small malloc trim threshold (see _keep_freed_memory)."""
    import dask

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


# ------------------------------------------------------------------------------------------ the command


@dataclass
class SweepPlan:
    """A checked sweep, ready to run: what `sweep` tells `on_start` before it runs anything."""

    store: FeatureStore
    points: list[SweepPoint]
    swept: list[str]  # the flags with more than one value
    out: Path
    resuming: bool  # out is this grid's folder from before
    workers: int | None  # None: a remote cluster's
    device: str  # what the workers are told
    remote: bool
    rank_by: str
    request: SweepRequest
    protocol: ProtocolReport | None = None  # the first point's split (`splits` says whether it is swept)
    splits: list[str] = field(default_factory=list)  # every split of the grid ('B0 Inc2', ...)

    def shape(self) -> str:
        """'2 r x 3 l1' or 'one configuration'."""
        counts = {flag: len({p.flags()[flag] for p in self.points}) for flag in self.swept}
        parts = [f"{n} {flag}" for flag, n in counts.items() if n > 1]
        return " x ".join(parts) if parts else "one configuration"


def _new_folder(path: Path) -> Path:
    """path, or path-2, path-3, ... if a sweep started in the same second already took it."""
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate


def plan_sweep(request: SweepRequest) -> SweepPlan:
    """Every check of a sweep before anything is written: the flags, the grid, the store (every
    chunk against its checksum), the folder, the memory of the most demanding point."""
    base_train = recipe(request.preset)
    rank_by = ALIASES.get(request.rank_by, request.rank_by)
    if rank_by not in ROUTERS:
        raise UserError(f"unknown --rank-by {request.rank_by!r}: use one of {', '.join(ROUTERS)}")
    for name in request.shown or ():
        if name not in ROUTERS:
            raise UserError(f"unknown --router {name!r}: use any of {', '.join(ROUTERS)}")
    if request.jobs is not None:
        if request.jobs < 1:
            raise UserError(f"--jobs must be at least 1, got {request.jobs}")
        require_at_most(
            "--jobs", request.jobs, max_processes(), "processes", "at most 4 per usable core, and 64 anywhere"
        )
    if request.group is not None and request.group < 1:
        raise UserError(f"--group must be at least 1, got {request.group}")
    check_settings()
    remote = False
    if request.scheduler is not None:
        choice = parse_scheduler(request.scheduler)
        check_available(choice)  # a malformed address now, not after a timeout
        remote = choice.kind in ("address", "file")
    if request.out is not None and request.out.exists() and not request.out.is_dir():
        raise UserError(f"--out {request.out} is a file, not a sweep folder")
    # on a remote cluster the workers decide `auto` and own the GPUs: only the name is checked here
    resolved = (
        (parse_device(request.device) or resolve_device("cpu")) if remote else resolve_device(request.device)
    )
    grid = {flag: parse_values(flag, text) for flag, text in request.grid.items() if text is not None}
    for flag in ("init_cls", "increment"):
        for value in grid.get(flag, []):
            if value < 1:
                raise UserError(f"--{flag.replace('_', '-')} must be at least 1, got {value}")
    store = resolve_store(request.store, request.model, request.dataset, request.cache_dir)
    check_readable(store, values=True)  # before the sweep's first line, so the refusal is the only one
    ident = store.identity["dataset"]
    classes = store.shape.classes
    for value in grid.get("init_cls", []):
        if value > classes:
            raise UserError(f"--init-cls {value} is more than the store's {classes} classes")
    validation = ValidationConfig(request.val_fraction, request.val_seed)
    validation.validate()
    given = {
        flag: grid[flag][0] if len(grid.get(flag, [])) == 1 else None for flag in ("init_cls", "increment")
    }
    if "init_cls" in grid and "increment" in grid:  # every point's split is given
        base_stream = StreamConfig(grid["init_cls"][0], grid["increment"][0])
    else:
        base_stream = stream_config(ident["name"], classes, given["init_cls"], given["increment"])
    points = grid_points(grid, base_train, base_stream, store.dim, classes, validation)
    origin = split_origin(ident["name"], given["init_cls"], given["increment"])
    protocol = protocol_of(store, points[0].stream, validation, origin)
    splits = list(dict.fromkeys(split_name(p.stream.init_cls, p.stream.increment) for p in points))
    found = None if request.out else find_sweep_dir(request.runs_root, store, points)
    out = request.out or found or _new_folder(request.runs_root / time.strftime("sweep-%Y%m%d-%H%M%S"))
    check_sweep_folder(out, validation)
    if not remote:
        check_room(store, points, resolved)
    workers = (
        None if request.scheduler else request.jobs or (1 if resolved.type == "cuda" else usable_cores())
    )
    sent = request.device if remote else str(resolved)
    return SweepPlan(
        store,
        points,
        list(grid),
        out,
        found is not None,
        workers,
        sent,
        remote,
        rank_by,
        request,
        protocol,
        splits,
    )


def sweep(
    request: SweepRequest,
    on_start: Callable[[SweepPlan], None] | None = None,
    on_point: PointCallback | None = None,
) -> SweepOutcome:
    """`tosca sweep`: plan (every check), claim the folder, tell `on_start`, then run the points not
    yet done."""
    plan = plan_sweep(request)
    shown = list(request.shown or HEADLINE)
    return run_sweep(
        plan.store,
        plan.points,
        plan.out,
        plan.workers or 1,
        request.scheduler,
        plan.rank_by,
        on_point,
        request.group,
        plan.device,
        shown,
        None if plan.protocol is None else plan.protocol.record(),
        None if on_start is None else lambda: on_start(plan),
    )
