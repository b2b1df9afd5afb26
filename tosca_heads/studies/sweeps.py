"""Sweeps: the Cartesian grid of fit flags, each point a full multi-task run on the cached features.

What to run: compatible points (same flow, epochs, batch size, task split and validation split)
are grouped, up to `group` at a time, each group one engine run (on a GPU hundreds of points step
together), handed to the executor (`running.executor`: here, or Dask processes). What to
write: each finished point is a cell (`records.sweep_points`: points/KEY/), written once by this
process as its group comes back, so a killed sweep resumes by reusing the points whose cells are
finished and whole (`reusable_point`); the views are drawn from the points: results.csv as they
finish and at the end (`records.sweep.ResultsView`), the tables, plots and what the sweep chose at
the end (`results`).
"""

from __future__ import annotations

import functools
import itertools
import math
import numbers
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from featcache.store import FeatureStore, check_readable, resolve_store
from tosca_foundation.devices import check_device_name, parse_device, resolve_device, worker_device
from tosca_foundation.errors import UserError, UserTypeError, UserValueError
from tosca_foundation.folders import refuse_planted, zarr_root
from tosca_foundation.limits import max_processes, require_at_most, usable_cores
from tosca_foundation.names import Spell, as_flag
from tosca_foundation.scheduler import check_scheduler, parse_scheduler
from tosca_foundation.time_estimates import Estimate, plan_works
from tosca_heads.engine.device import check_settings
from tosca_heads.engine.memory import default_group_size, require_room
from tosca_heads.method.metrics import RANKED
from tosca_heads.method.protocol import (
    NO_VALIDATION,
    StreamConfig,
    ValidationConfig,
    check_split_values,
    split_name,
    split_origin,
    stream_config,
)
from tosca_heads.method.recipe import RECIPE_FLAGS, TrainConfig, group_key, recipe, value_fault, wrong_type
from tosca_heads.records import claim, validation_record
from tosca_heads.records.cell import DONE as CELL_DONE
from tosca_heads.records.cell import machine as cell_machine
from tosca_heads.records.run_folder import RunResult, write_validation_ids
from tosca_heads.records.sweep import (
    RESULTS_FILE,
    SWEEP_FOLDER,
    ResultsView,
    find_sweep_dir,
    record_choice,
    sweep_config,
)
from tosca_heads.records.sweep_points import (
    point_asked,
    point_folder,
    point_key,
    read_point,
    read_points,
    reusable_point,
    write_point,
)
from tosca_heads.requests.command_requests import SweepRequest
from tosca_heads.requests.plan import FitPlan
from tosca_heads.routers import HEADLINE, ROUTERS, is_honest, on_request, reference_text
from tosca_heads.routers.learned import learners_of
from tosca_heads.running.executor import Executor, Outcome, Work, in_groups
from tosca_heads.studies.results import (
    by_point,
    flag_text,
    varying_flags,
    write_sweep_outputs,
)
from tosca_heads.trackers import Metric, TrackedGroup, Tracking, end_failed, open_tracking
from tosca_heads.trackers.events import rows_record, run_files
from tosca_heads.trackers.tracking import rows_file

# Every fit flag a sweep can vary, with its parser: the recipe's (method.recipe.RECIPE_FLAGS; seed
# is the flag `--seeds` fills) and the task split's.
TRAIN_FLAGS: dict[str, Callable[[str], Any]] = {flag.name: flag.kind for flag in RECIPE_FLAGS}
STREAM_FLAGS: dict[str, Callable[[str], Any]] = {"init_cls": int, "increment": int, "order_seed": int}
GRID_FLAGS = {**TRAIN_FLAGS, **STREAM_FLAGS}
MAX_GRID_POINTS = 100_000
CIL_RANK_BY = "entropy"  # the router a class-incremental sweep ranks by unless told: the paper's


def option_name(flag: str) -> str:
    """The command-line spelling of a grid flag (seed is given as --seeds)."""
    return "--seeds" if flag == "seed" else f"--{flag.replace('_', '-')}"


def parse_values(flag: str, given: str | Sequence[Any]) -> list[Any]:
    """'8,16,32' (the command line) or [8, 16, 32] (Python) -> [8, 16, 32], in the order given,
    duplicates dropped. Text is parsed, each value of the flag's type; Python's values are values: a
    number becomes the flag's kind (numpy's too: 0 for `l1` is 0.0, as '0' is), anything else is
    kept as given, for the point's checks to refuse naming its keyword (`grid_points`)."""
    parse = GRID_FLAGS[flag]
    values: list[Any] = []
    if not isinstance(given, str):
        for value in (_python_value(parse, v) for v in given):
            if value not in values:
                values.append(value)
        return values
    items = given.split(",")
    for item in (part.strip() for part in items):
        if not item:
            continue
        try:
            if parse is int and not item.lstrip("-").isdigit():
                raise ValueError(item)
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


def _python_value(kind: Callable[[str], Any], value: Any) -> Any:
    """A grid value from Python as the flag's kind where it is a number of it (a float flag takes an
    integer), else as given. A number goes through its text, as the command line's does: numpy's
    float32 5e-4 is 0.0005, the point `--l1 5e-4` names, not 0.000500000023."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return value
    if kind is float:
        return float(str(value))
    return int(value) if kind is int and isinstance(value, numbers.Integral) else value


def grid_faults(
    grid: dict[str, list[Any]], base_stream: StreamConfig, spell: Spell = option_name
) -> list[str]:
    """Every value of the grid that is wrong on its own, each naming its own flag and value as
    `spell` does (`--r must be at least 1, got 0; --l1 must be >= 0, got -0.0005`), before any
    point is made: never a flag that was not given, never only the first fault."""
    faults: list[str] = []
    for flag in (name for name in GRID_FLAGS if name in grid):
        for value in grid[flag]:
            if flag in TRAIN_FLAGS:
                fault = value_fault(flag, value, spell(flag))
            else:
                try:
                    replace(base_stream, **{flag: value}).validate(spell)
                    fault = ""
                except UserError as exc:
                    fault = str(exc)
            if fault and fault not in faults:
                faults.append(fault)
    return faults


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

    def work(
        self,
        members: Sequence[SweepPoint],
        store: FeatureStore,
        keep: Path | None = None,
        routers: tuple[str, ...] = (),
    ) -> Work:
        """The engine run of these compatible points (this one first): nothing written, or with
        `keep` each point's run folder under it (`module_folder`); `routers`: the on-request routers
        the sweep ranks by or shows, computed besides the others."""
        path = str(store.path.resolve())
        folders = () if keep is None else tuple(str(module_folder(keep, p)) for p in members)
        trains = tuple(p.train for p in members)
        return Work(path, store.fingerprint, self.stream, self.validation, trains, folders, routers=routers)

    @property
    def group_key(self) -> tuple:
        """Points with equal group keys can train together in one engine run."""
        return (*group_key(self.train), *asdict(self.stream).values(), *asdict(self.validation).values())


def check_keep_folder(keep: Path) -> None:
    """--keep-modules, before anything is claimed: outside any zarr store (that it is a folder, or
    one that can be made, is checked where the request comes in: `check_outputs`); each point's run
    folder in it is then claimed like `--run`'s."""
    inside = zarr_root(keep)
    if inside is not None:
        raise UserError(
            f"--keep-modules {keep} lies inside the zarr store {inside}: pass a folder of its own"
        )
    if keep.is_dir():  # a link planted at a point's folder would have it written elsewhere
        refuse_planted(keep, "--keep-modules")


def module_folder(keep: Path, point: SweepPoint) -> Path:
    """Where `--keep-modules` keeps a point's run folder: point-KEY, the key of its results.csv rows."""
    return Path(keep) / f"point-{point.key}"


def point_label(point: SweepPoint, swept: Sequence[str]) -> str:
    """A point by the flags the grid varies ("r=8, l1=0.001, seed=0"), for a tracker's run name."""
    flags = point.flags()
    shown = ", ".join(f"{f}={flag_text(flags[f])}" for f in swept if f in flags)
    return shown or f"point {point.key}"


def make_groups(points: Sequence[SweepPoint], size: int) -> list[list[SweepPoint]]:
    """Compatible points in runs of at most `size`, in the grid's order."""
    return in_groups(points, lambda p: p.group_key, size)


def grid_points(
    grid: dict[str, list[Any]],
    base_train: TrainConfig,
    base_stream: StreamConfig,
    dim: int,
    num_classes: int,
    validation: ValidationConfig = NO_VALIDATION,
    spell: Spell = as_flag,
) -> list[SweepPoint]:
    """The Cartesian product in a fixed flag order, each point validated before anything runs (a
    refusal names the value as `spell` does). The grid's flags were checked where it came in (the
    command line offers only these; the Python API checks its grid's keys)."""
    unknown = set(grid) - set(GRID_FLAGS)
    if unknown:
        raise ValueError(f"not sweepable: {sorted(unknown)}")  # a bug: the faces let none in
    names = [name for name in GRID_FLAGS if name in grid]
    named = option_name if spell is as_flag else spell  # the command line gives seeds as --seeds
    faults = grid_faults(grid, base_stream, named)
    if faults:
        typed = any(wrong_type(f, v) for f in names if f in TRAIN_FLAGS for v in grid[f])
        raise (UserTypeError if typed else UserValueError)("; ".join(faults))
    size = math.prod(len(grid[name]) for name in names)
    require_at_most("a grid of", size, MAX_GRID_POINTS, "points", "split the sweep into several")
    points = []
    for values in itertools.product(*(grid[name] for name in names)):
        chosen = dict(zip(names, values, strict=True))
        train = replace(base_train, **{k: v for k, v in chosen.items() if k in TRAIN_FLAGS})
        train.validate(named)
        stream = replace(base_stream, **{k: v for k, v in chosen.items() if k in STREAM_FLAGS})
        stream.validate(named)
        stream.task_stream(num_classes)  # refuses a split that does not divide the classes
        points.append(SweepPoint(train.resolved(dim), stream, validation))
    return points


# ------------------------------------------------------------------------------------------ what to write


def point_measured(run: RunResult, done: Outcome, group_size: int) -> dict[str, Any]:
    """What a finished point measured (its cell's measured.json): its seconds, its share of its
    group's wall time, training and evaluation, the group's, the worker and the machine."""
    return {
        "seconds": done.seconds / group_size,
        "train_seconds": sum(s.stats["seconds"] for s in run.stages) / group_size,
        "eval_seconds": sum(s.eval_seconds for s in run.stages) / group_size,
        "group_seconds": done.seconds,
        "group_size": group_size,
        "worker_pid": done.pid,
        "feature_loads": done.loads,
        "device": done.device,
        "machine": cell_machine(done.device),
    }


@dataclass
class SweepOutcome:
    out: Path
    points: int
    already_done: int
    ran: int
    seconds: float
    files: dict[str, Path]
    frame: Any  # every row of results.csv (a pandas DataFrame: one row per point, split and router)
    group: int = 1  # most points trained in one engine run
    rank_by: str = "entropy"
    shown: list[str] = field(default_factory=lambda: list(HEADLINE))
    summary: Any = None  # per configuration, mean and std over seeds, best first (empty: no results)
    varying: list[str] = field(default_factory=list)  # the flags that take more than one value
    chosen: dict[str, Any] | None = None  # what was chosen, on which split (`results.choices`)


PointCallback = Callable[[list[dict[str, Any]], int, int], None]  # (a point's rows, finished, total)


def check_room(
    store: FeatureStore, points: Sequence[SweepPoint], device: torch.device, spell: Spell = as_flag
) -> None:
    """Refuse, before anything runs, a grid whose most demanding point cannot fit one process here
    (each point trains in at least a group of its own)."""
    classes, labels = store.shape.classes, store.labels("train")
    for point in points:
        stream = point.stream.task_stream(classes)
        rows = stream.largest_task_rows(stream.remap(labels))
        require_room(store.shape, [point.train], stream.num_tasks, device, rows, spell=spell)


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


# ------------------------------------------------------------------------------------------ the command


@dataclass
class SweepPlan:
    """A checked sweep, ready to run (every value checked once, here): what `sweep` tells
    `on_start` once the folder is claimed."""

    fit: FitPlan  # the store, the validation rows and the first point's split and protocol (`splits`: is it swept?)
    points: list[SweepPoint]
    swept: list[str]  # the flags with more than one value
    out: Path
    resuming: bool  # out is this grid's folder from before
    executor: Executor
    sizing_device: torch.device  # the device this machine sizes groups and memory by
    remote: bool
    rank_by: str
    shown: list[str]
    group: int | None
    splits: list[str] = field(default_factory=list)  # every split of the grid ('B0 Inc2', ...)
    pending: list[SweepPoint] | None = None  # points not reusable in the folder, known once it is claimed
    keep_modules: Path | None = None  # each point's run folder under it (None: nothing kept)
    tracking: Tracking = field(default_factory=Tracking)  # the trackers of --log
    # what its sweep.json records (`records.sweep.sweep_config`): compared where planned, written where claimed
    sweep_json: dict[str, Any] = field(default_factory=dict)

    def estimate(self, points: Sequence[SweepPoint] | None = None) -> Estimate:
        """What the points (default: all) take here: their training (tosca_heads.running.cost_models),
        shared by the workers, plus the workers' start (tosca_foundation.time_estimates)."""
        from tosca_heads.running import cost_models as est

        chosen = list(self.points if points is None else points)
        workers = 1 if self.remote else self.executor.jobs
        alone = workers == 1
        seconds = {
            p.key: est.tosca_seconds(
                est.shape_of(self.fit.store, p.stream), p.train, self.sizing_device, alone
            )
            for p in chosen
        }
        said = f"{len(seconds)} point(s), {sum(seconds.values()) / 60:.1f} min of training (one SGD step timed here)"
        plan = plan_works(seconds, {}, workers, what=said)
        if self.remote:
            plan.missing.append("the cluster's workers are not timed: the estimate is this machine's")
        return plan

    @functools.cached_property
    def validation_split(self) -> dict[str, Any] | None:
        """The validation split every point holds out, as its asked.json records it (None: none)."""
        validation = self.fit.validation
        return validation_record(validation, self.fit.held_ids) if validation.enabled else None

    def asked(self, point: SweepPoint) -> dict[str, Any]:
        """What the point's cell is asked (`sweep_points.point_asked`): it is reused only when this
        is what its asked.json holds."""
        return point_asked(self.fit.store, asdict(point.train), asdict(point.stream), self.validation_split)

    def to_run(self) -> list[SweepPoint]:
        """The points whose cells are not in the folder to reuse (`sweep_points.reusable_point`)."""
        return [p for p in self.points if not reusable_point(self.out, p.key, self.asked(p))]

    @property
    def workers(self) -> int | None:
        """Local worker processes (None: a remote cluster's)."""
        return None if self.remote else self.executor.jobs

    @property
    def device(self) -> str:
        return self.executor.device

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
    chunk against its checksum), the folder, the memory of the most demanding point. Each value is
    named in a refusal as the request spells it (`request.spell`: the flag, the Python keyword)."""
    spell = request.spell
    base_train = recipe(request.preset, spell=spell)
    rank_by = ROUTERS.pick(request.rank_by or CIL_RANK_BY, spell("rank_by"))
    honest = [name for name in ROUTERS if is_honest(name)]
    if not is_honest(rank_by):
        raise UserValueError(
            f"{spell('rank_by')} {rank_by} is a reference router ({reference_text(rank_by)}): a reference never ranks or "
            f"chooses; use an honest router: {', '.join(honest)}"
        )
    for name in request.shown or ():
        ROUTERS.pick(name)
    for name in ("jobs", "group"):
        value = getattr(request, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise UserTypeError(f"{spell(name)} must be an integer, got {value!r}")
        if value is not None and value < 1:
            raise UserValueError(f"{spell(name)} must be at least 1, got {value}")
    if request.jobs is not None:
        require_at_most(
            spell("jobs"),
            request.jobs,
            max_processes(),
            "processes",
            "at most 4 per usable core, and 64 anywhere",
        )
    validation = ValidationConfig(request.val_fraction, request.val_seed)
    validation.validate(spell)
    check_settings()
    remote = False
    if request.scheduler is not None:
        choice = parse_scheduler(request.scheduler)
        check_scheduler(choice)  # dask-cuda missing, no scheduler answering: now, before the folder is made
        remote = choice.kind in ("address", "file")
    if request.keep_modules is not None:
        check_keep_folder(request.keep_modules)
    tracking = open_tracking(request.log, request.runs_root, spell("log"))
    check_device_name(request.device, spell("device"))
    # on a remote cluster the workers decide `auto` and own the GPUs: this machine (perhaps a head
    # node without one) only checks the name, and sizes groups by its own device unless --group
    if remote:
        named = parse_device(request.device)
        sizing = named if named is not None and named.type == "cpu" else resolve_device("auto")
        sent = worker_device(request.device)
    else:
        sizing = resolve_device(request.device)
        sent = str(sizing)
    grid = {flag: parse_values(flag, given) for flag, given in request.grid.items() if given is not None}
    for flag in ("init_cls", "increment", "order_seed"):
        for value in grid.get(flag, []):
            check_split_values(**{flag: value}, spell=spell)
    store = resolve_store(request.store, request.model, request.dataset, request.cache_dir)
    check_readable(store, values=True)  # before the sweep's first line, so the refusal is the only one
    ident = store.identity["dataset"]
    classes = store.shape.classes
    for value in grid.get("init_cls", []):
        if value > classes:
            raise UserValueError(f"{spell('init_cls')} {value} is more than the store's {classes} classes")
    given = {
        flag: grid[flag][0] if len(grid.get(flag, [])) == 1 else None for flag in ("init_cls", "increment")
    }
    if "init_cls" in grid and "increment" in grid:  # every point's split is given
        base_stream = StreamConfig(grid["init_cls"][0], grid["increment"][0])
    else:
        base_stream = stream_config(
            ident["name"], classes, given["init_cls"], given["increment"], spell=spell
        )
    points = grid_points(grid, base_train, base_stream, store.dim, classes, validation, spell)
    origin = split_origin(ident["name"], given["init_cls"], given["increment"])
    fit = FitPlan.build(store, points[0].stream, validation, origin)
    fit.check_learners(learners_of([rank_by, *(request.shown or ())]), "choose another router")
    splits = list(dict.fromkeys(split_name(p.stream.init_cls, p.stream.increment) for p in points))
    found = None if request.out else find_sweep_dir(request.runs_root, store, [p.key for p in points])
    out = request.out or found or _new_folder(request.runs_root / time.strftime("sweep-%Y%m%d-%H%M%S"))
    sweep_json = sweep_config(store, [p.key for p in points], validation, fit.held_ids, fit.protocol.record())
    claim.check(out, SWEEP_FOLDER, sweep_json)  # before anything runs: its sweep.json and results checked
    if not remote:
        check_room(store, points, sizing, request.spell)
    jobs = request.jobs or (1 if request.scheduler or sizing.type == "cuda" else usable_cores())
    return SweepPlan(
        fit=fit,
        points=points,
        swept=list(grid),
        out=out,
        resuming=found is not None,
        executor=Executor(jobs, request.scheduler, sent),
        sizing_device=sizing,
        remote=remote,
        rank_by=rank_by,
        shown=list(request.shown or HEADLINE),
        group=request.group,
        splits=splits,
        keep_modules=request.keep_modules,
        tracking=tracking,
        sweep_json=sweep_json,
    )


def run_sweep(
    plan: SweepPlan, on_point: PointCallback | None = None, on_start: Callable[[], None] | None = None
) -> SweepOutcome:
    """Run the plan's points not yet in its results.csv, up to `group` compatible points per engine
    run (None: 1 on the CPU, as many as fit the GPU's memory on CUDA), through the executor; then
    rebuild the tables and plots and record what the sweep chose (on its validation split where it
    has one). `on_start` is called once the folder is claimed, before the first point."""
    with claim.claim_folder(plan.out, SWEEP_FOLDER, plan.sweep_json):
        fit = plan.fit
        write_validation_ids(plan.out / "validation.json", fit.validation, fit.held_ids)
        return _run_locked(plan, on_point, on_start)


def _run_locked(
    plan: SweepPlan, on_point: PointCallback | None, on_start: Callable[[], None] | None
) -> SweepOutcome:
    out = plan.out
    # the parent its folder's trackers logged before, continued (`trackers.ledger`), or a new one
    parent = plan.tracking.group(out, f"sweep {out.name}", sweep_params(plan))
    try:
        outcome = _run_points(plan, on_point, on_start, parent)
    except BaseException:
        end_failed(parent)
        raise
    if parent is not None:
        chosen = outcome.chosen["chosen"] if outcome.chosen else {}
        figures = [
            Metric(f"chosen/{name}", float(chosen[name]), 0)
            for name in (RANKED, f"val_{RANKED}")
            if name in chosen
        ]
        parent.finish(figures, run_files(out))
    return outcome


def sweep_params(plan: SweepPlan) -> dict[str, Any]:
    """A sweep's parent run's params: where, what is swept, how it ranks, the store."""
    params: dict[str, Any] = {
        "command": "sweep",
        "out": str(plan.out),
        "points": len(plan.points),
        "rank_by": plan.rank_by,
        "val_fraction": plan.fit.validation.fraction,
        "val_seed": plan.fit.validation.seed,
        "store": str(plan.fit.store.path.resolve()),
        "store_fingerprint": plan.fit.store.fingerprint,
    }
    for flag in plan.swept:
        values = dict.fromkeys(flag_text(p.flags()[flag]) for p in plan.points)
        params[f"grid.{flag}"] = ",".join(values)
    return params


def _run_points(
    plan: SweepPlan,
    on_point: PointCallback | None,
    on_start: Callable[[], None] | None,
    parent: TrackedGroup | None,
) -> SweepOutcome:
    store, out = plan.fit.store, plan.out
    varying = [  # in the grid's flag order, as the tables show them
        f for f in GRID_FLAGS if f in plan.swept and len({flag_text(p.flags()[f]) for p in plan.points}) > 1
    ]
    pending = plan.to_run()
    plan.pending = pending
    waiting = {p.key for p in pending}
    # the finished points kept (this grid's and any other the folder holds), their rows drawn once
    view = ResultsView(out, [p for p in read_points(out) if p.key not in waiting])
    if on_start:
        on_start()
    if parent is not None:  # the points found finished: their children too (logged before, or now)
        _log_earlier(plan, parent, view, [p for p in plan.points if p.key not in waiting], varying)
    start = time.perf_counter()
    size = plan.group or default_group_size(
        store.shape, pending, plan.sizing_device, plan.executor.processes_per_device()
    )
    groups: dict[int, tuple[Work, list[SweepPoint]]] = {}  # the executor hands back each work itself
    for members in make_groups(pending, size):
        work = members[0].work(members, store, plan.keep_modules, on_request([plan.rank_by, *plan.shown]))
        groups[id(work)] = (work, members)
    finished = 0

    def record_group(work: Work, outcome: Outcome) -> None:
        nonlocal finished
        members = groups[id(work)][1]
        for point, run in zip(members, outcome.runs, strict=True):
            measured = point_measured(run, outcome, len(members))
            write_point(out, point.key, plan.asked(point), measured, run.outcomes())
        # what a rerun reuses is what is shown: the cells read back, the group's figures on one bootstrap
        drawn = view.add([read_point(point_folder(out, point.key)) for point in members])
        for point, run, found in zip(members, outcome.runs, drawn, strict=True):
            finished += 1
            if parent is not None:  # logged here, in the command's process, never from a worker
                _log_point(plan, parent, point, varying, found, run)
            if on_point:
                on_point(found, finished, len(pending))

    plan.executor.run([work for work, _ in groups.values()], record_group)
    points = read_points(out)  # the one reader: every view below is drawn from these points
    frame = view.final(points)
    seed = min((p.train.seed for p in plan.points), default=0)
    files, chosen, summary = write_sweep_outputs(
        out,
        frame,
        plan.rank_by,
        plan.shown,
        lambda config: fit_command(store, config, seed, plan.fit.validation),
        None if plan.keep_modules is None else lambda config: kept_folder(plan, config, seed),
        {p.key: p.answers for p in points},
    )
    record_choice(out, chosen)
    outcome = SweepOutcome(
        out,
        len(plan.points),
        len(plan.points) - len(pending),
        len(pending),
        time.perf_counter() - start,
        files,
        frame,
        size,
    )
    outcome.rank_by, outcome.shown, outcome.chosen = plan.rank_by, plan.shown, chosen
    if not frame.empty:
        outcome.summary = summary
        outcome.varying = varying_flags(by_point(frame))
    return outcome


@dataclass
class SweepDryRun:
    """`sweep --dry-run`: the checked plan, the points a run would compute (the others are in the
    folder's results already) and what they should take here (worked out when first asked: it
    times a training step, so what is known already can be said first). Under a scenario the plan
    is a `scenario_sweep.ScenarioSweepPlan` and the points its keys: each plan prices its own."""

    plan: Any  # SweepPlan | ScenarioSweepPlan: what `plan.estimate(to_run)` prices
    to_run: list[Any]

    @property
    def pending(self) -> int:
        return len(self.to_run)

    @functools.cached_property
    def estimate(self) -> Estimate:
        return self.plan.estimate(self.to_run)


def dry_run(request: SweepRequest) -> SweepDryRun:
    """Every check of the sweep, nothing written: what would run and for how long."""
    plan = plan_sweep(request)
    return SweepDryRun(plan, plan.to_run())


def point_params(point: SweepPoint, row: dict[str, Any]) -> dict[str, Any]:
    """A point's child run's params: its flags, its key (results.csv's), dataset and backbone."""
    return {
        "key": point.key,
        "dataset": row["dataset"],
        "backbone": row["backbone"],
        **{k: v for k, v in point.flags().items() if v is not None},
    }


def _log_point(
    plan: SweepPlan,
    parent: TrackedGroup,
    point: SweepPoint,
    varying: Sequence[str],
    rows: list[dict[str, Any]],
    run: RunResult | None,
) -> None:
    """A point's child run, unless every tracker holds it already: its figures (the run's, curves
    included, when it was just trained; its results.csv rows' otherwise), its rows as its own
    results.csv and, with --keep-modules, its run folder's files."""
    child = parent.child(point.key, point_label(point, varying), point_params(point, rows[0]))
    if child is None:
        return
    kept = [] if plan.keep_modules is None else run_files(module_folder(plan.keep_modules, point))
    with rows_file(rows, RESULTS_FILE) as table:
        if run is not None:
            child.run_result(run, [table, *kept])
        else:
            child.finish(rows_record(rows), [table, *kept])


def _log_earlier(
    plan: SweepPlan,
    parent: TrackedGroup,
    view: ResultsView,
    earlier: list[SweepPoint],
    varying: Sequence[str],
) -> None:
    """The points the folder held finished before this command, each a child of the parent unless
    its trackers hold it already (a rerun after a kill, or the first with --log)."""
    for point in earlier:
        _log_point(plan, parent, point, varying, view.rows(point.key), None)


def kept_folder(plan: SweepPlan, config: dict[str, Any], seed: int) -> str | None:
    """The kept run folder of the point of `config` (a configuration's flags, as the summary reads
    them) at `seed`, when --keep-modules kept it (None when it is not there)."""
    for point in plan.points:
        flags = point.flags()
        same = all(
            value is None or flag_text(flags.get(name)) == flag_text(value)
            for name, value in config.items()
            if name in flags
        )
        if same and point.train.seed == seed and plan.keep_modules is not None:
            folder = module_folder(plan.keep_modules, point)
            return str(folder) if (folder / CELL_DONE).is_file() else None
    return None


def sweep(
    request: SweepRequest,
    on_start: Callable[[SweepPlan], None] | None = None,
    on_point: PointCallback | None = None,
) -> SweepOutcome:
    """`tosca sweep`: plan (every check), claim the folder, tell `on_start`, then run the points not
    yet done."""
    plan = plan_sweep(request)
    return run_sweep(plan, on_point, None if on_start is None else lambda: on_start(plan))
