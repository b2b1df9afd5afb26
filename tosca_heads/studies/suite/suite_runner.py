"""`run_suite`: every cell of a suite, resumably, then its tables, claims, figures and manifest.

The suite's folder holds `cells/` (one run or baselines folder per cell), the tables, and
`manifest.json`. Cells are computed in the order stores, class orders, seeds; TOSCA cells of one
store and recipe family train as one engine run where the device holds them (a GPU), baselines one
by one. With `jobs` > 1 or a `scheduler`, cells run as Dask tasks (the `--scheduler` forms of
tosca_foundation.scheduler); each writes only its own folder, so a killed suite loses at most
the cells in flight, and the same call continues it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from featcache.store import FeatureStore, check_readable, is_tosca_store, read_split
from featcache.store.object_store import is_remote
from tosca_foundation.arguments import check_types
from tosca_foundation.devices import check_device_name, resolve_device
from tosca_foundation.errors import UserError, UserTypeError, UserValueError
from tosca_foundation.limits import max_processes, require_at_most, usable_cores
from tosca_foundation.names import Spell, as_flag, as_keyword
from tosca_foundation.scheduler import check_scheduler, parse_scheduler
from tosca_foundation.time_estimates import Estimate, plan_works
from tosca_heads.engine.device import check_settings
from tosca_heads.engine.memory import default_group_size, require_room
from tosca_heads.method import baseline_registry
from tosca_heads.method.protocol import (
    ProtocolReport,
    StreamConfig,
    stream_config,
)
from tosca_heads.method.recipe import group_key
from tosca_heads.method.scenarios import DEFAULT_SCENARIO
from tosca_heads.records import claim
from tosca_heads.records import suite as records_suite
from tosca_heads.records.baselines_folder import BASELINES_FOLDER, NO_ROUTING, baseline_result
from tosca_heads.records.run_cell import read_run
from tosca_heads.records.suite import MANIFEST, SUITE_FOLDER, check_manifest
from tosca_heads.requests.command_requests import SuiteRequest
from tosca_heads.requests.plan import FitPlan
from tosca_heads.routers import on_request
from tosca_heads.running.executor import Executor, Outcome, Work, in_groups
from tosca_heads.studies.suite import cells as cellmod
from tosca_heads.studies.suite.cells import Cell, CellState
from tosca_heads.studies.suite.presets import preset
from tosca_heads.studies.suite.scenario_suite import (
    ScenarioSuiteResult,
    dry_run_scenario_suite,
    run_scenario_suite,
    with_scenario_only,
)
from tosca_heads.studies.suite.spec import StoreSpec, SuiteSpec, folder_name, load_suite, parse_suite
from tosca_heads.studies.suite.tables import SuiteTables, build_tables, write_tables
from tosca_heads.trackers import TrackedGroup, Tracking, end_failed, open_tracking
from tosca_heads.trackers.events import flat_params, run_files

# (model, dataset, data_root, store, limit_per_class) -> the store's path: stage 1, handed in
Extractor = Callable[[str, str, Path | None, Path, int | None], Path]
# (cell, finished, total, plan, seconds): the plan of the cells to run (their wall time and each
# one's seconds, by key) is the same on every call; `seconds` what the cell took in its worker (its
# share of its engine run); the first call, before any cell ends, has no cell (and 0 seconds)
CellCallback = Callable[[Cell | None, int, int], None]  # (the cell ended or None, cells ended, cells)
# a store's spec -> featcache.extraction_estimate.ExtractionGuess (seconds, images, classes, dim, missing): stage 1's
ExtractionEstimator = Callable[[StoreSpec], Any]


@dataclass
class OpenStore:
    spec: StoreSpec
    store: FeatureStore
    plans: dict[int, FitPlan]  # order seed -> the plan of its split (stream, validation rows, protocol)


@dataclass
class SuiteResult:
    """What `run_suite` made: the tables as pandas frames, the claims, every cell's state, the files."""

    spec: SuiteSpec
    out: Path
    cells: list[CellState]
    tables: SuiteTables | None
    files: dict[str, Path] = field(default_factory=dict)
    seconds: float = 0.0
    estimate_seconds: float | None = None
    estimate: Any = None  # a dry run's tosca_foundation.time_estimates.Estimate

    @property
    def missing(self) -> list[str]:
        return [c.cell.key for c in self.cells if c.status not in ("done", "reused", "ran")]

    def plan_rows(self) -> list[tuple[str, str, str, Path]]:
        """A dry run's table: each cell's store, key within it, status and folder."""
        return [(c.cell.store, c.cell.key.split("/", 1)[1], c.status, c.folder) for c in self.cells]


def open_stores(
    spec: SuiteSpec, extract: Extractor | None, dry_run: bool = False, plans: bool = True
) -> dict[str, OpenStore]:
    """Every store of the suite, checked, with its task split per class order (`plans`; a
    scenario suite reads its own: none); a store given by model + dataset is extracted first when
    it is not on disk yet (a dry run leaves it out)."""
    opened = {}
    for s in spec.stores:
        path = s.path
        if is_remote(path) and not is_tosca_store(path):  # nothing is extracted into a bucket
            raise UserError(
                f"store {s.name!r}: no tosca store at {path}; extract it locally, then `tosca cache push "
                "STORE URL` copies it there"
            )
        if path is None or not is_tosca_store(path):
            if not (s.model and s.dataset):
                raise UserError(
                    f"store {s.name!r}: {path} is not a tosca store and the suite gives no model + dataset to make it"
                )
            if dry_run:
                continue
            if extract is None:
                raise UserError(
                    f"store {s.name!r} must be extracted first ({s.model} on {s.dataset}): run `tosca extract` or pass an extractor"
                )
            target = path or Path("cache") / s.dataset / f"{s.model}-suite.zarr"
            path = extract(s.model, s.dataset, s.data_root, target, s.limit_per_class)
        store = FeatureStore.open(path)
        check_readable(store)
        split = {}
        for order in spec.order_seeds if plans else ():
            try:
                split[order] = FitPlan.asked(store, s.init_cls, s.increment, order, spec.validation)
            except UserError as exc:
                raise UserError(f"store {s.name!r} ({store.shape.classes} classes): {exc}") from None
        opened[s.name] = OpenStore(s, store, split)
    return opened


def default_out(spec: SuiteSpec, runs_root: Path) -> Path:
    return Path(runs_root) / f"suite-{folder_name(spec.name)}"


def run_suite(
    spec: SuiteSpec | str | Path,
    out: Path | None = None,
    jobs: int | None = None,
    scheduler: str | None = None,
    device: str = "auto",
    dry_run: bool = False,
    extract: Extractor | None = None,
    on_cell: CellCallback | None = None,
    runs_root: Path = Path("runs"),
    tables_only: bool = False,
    on_start: Callable[[dict[str, ProtocolReport]], None] | None = None,
    estimate_extraction: ExtractionEstimator | None = None,
    log: Sequence[str] = (),
) -> SuiteResult | ScenarioSuiteResult:
    """Plan, run what is not done, and write the tables (see the module docstring); `spec` is a
    SuiteSpec or the path of a SUITE.toml. `on_start` is told each store's protocol (its first
    class order's) once every check has passed, before any cell runs. `dry_run`:
    the plan alone (which cells exist, an estimate of the time), nothing written; `tables_only`:
    the tables of the cells finished so far, the others marked missing, nothing run. `log`: the
    trackers (`--log`): one parent run, a child per cell run now.

    >>> spec = parse_suite({"seeds": [0], "tosca": {"flags": {"epochs": 1}}, "baselines": {"methods": ["simplecil"]},
    ...                     "stores": [{"name": "tiny", "path": str(STORE), "init_cls": 2, "increment": 2}]}, TMP)
    >>> result = run_suite(spec, TMP / "suite", device="cpu")
    >>> result.missing, sorted(set(result.tables.table["method"]))[:2]
    ([], ['simplecil', 'tosca:batch'])
    """
    check_types("run_suite", run_suite, {"out": out, "jobs": jobs, "scheduler": scheduler, "device": device})
    arguments = (spec, out, jobs, scheduler, device, dry_run, extract, on_cell, runs_root, tables_only)
    return _run_suite(*arguments, on_start, estimate_extraction, log, spell=as_keyword)


def _run_suite(
    spec: SuiteSpec | str | Path,
    out: Path | None,
    jobs: int | None,
    scheduler: str | None,
    device: str,
    dry_run: bool,
    extract: Extractor | None,
    on_cell: CellCallback | None,
    runs_root: Path,
    tables_only: bool,
    on_start: Callable[[dict[str, ProtocolReport]], None] | None,
    estimate_extraction: ExtractionEstimator | None,
    log: Sequence[str],
    spell: Spell,
) -> SuiteResult | ScenarioSuiteResult:
    """`run_suite`, each of its values named in a refusal as `spell` does (the command line's flag
    for `tosca suite`, the keyword for Python)."""
    start = time.perf_counter()
    if isinstance(spec, (str, os.PathLike)):  # a SUITE.toml
        spec = load_suite(Path(spec))
    if not isinstance(spec, SuiteSpec):
        raise UserTypeError(
            f"run_suite() keyword spec must be a SuiteSpec or the path of a SUITE.toml, not {type(spec).__name__}"
        )
    check_settings()
    check_device_name(device, spell("device"))
    resolved = resolve_device(device)
    if jobs is None:  # as a sweep: every usable core on the CPU, one process per GPU
        jobs = 1 if resolved.type == "cuda" or scheduler else min(usable_cores(), max_processes())
    if jobs < 1:
        raise UserValueError(f"{spell('jobs')} must be at least 1, got {jobs}")
    require_at_most(
        spell("jobs"), jobs, max_processes(), "processes", "at most 4 per usable core, and 64 anywhere"
    )
    if scheduler is not None:  # a running scheduler answers now, before the suite's folder is made
        check_scheduler(parse_scheduler(scheduler))
    out = Path(out) if out is not None else default_out(spec, runs_root)
    if spec.scenario != DEFAULT_SCENARIO:  # every store's table under another scenario
        return _scenario_suite(
            spec,
            out,
            jobs,
            scheduler,
            device,
            dry_run,
            extract,
            on_cell,
            tables_only,
            log,
            runs_root,
            spell,
            estimate_extraction,
        )
    if dry_run:
        stores = open_stores(spec, None, dry_run=True)
        check_room(spec, stores, resolved)  # the real run's check, on the stores there already
        states = _states(spec, stores, out, runs_root)
        result = SuiteResult(spec, out, states, None)
        result.estimate = estimate_plan(spec, stores, states, resolved, jobs, estimate_extraction)
        result.estimate_seconds = result.estimate.wall
        unread = [
            s for s in spec.stores if s.name not in stores and s.data_root and not Path(s.data_root).exists()
        ]
        if spec.name == "paper" and unread and not os.environ.get("TOSCA_PAPER_DATA"):
            where = unread[0].data_root.parent if unread[0].data_root else "data"
            result.estimate.missing.insert(
                0, f"$TOSCA_PAPER_DATA is unset: the paper suite looks for its data folders in {where}"
            )
        return result
    claim.check(out, SUITE_FOLDER)
    check_manifest(out)  # a manifest written before the first release: one line, before any store opens
    tracking = open_tracking(log, runs_root, spell("log")) if not tables_only else Tracking()
    stores = open_stores(spec, extract)
    check_room(spec, stores, resolved)
    with claim.claim_folder(out, SUITE_FOLDER):
        states = _states(spec, stores, out, runs_root)
        changed = [s for s in states if s.status == "changed"]
        if changed and not tables_only:
            raise UserError(
                f"suite folder {out}: cell {changed[0].cell.key} was made with another configuration "
                f"({changed[0].reason}; {len(changed)} such cell(s)): the suite file or a store changed "
                f"since; pass another --out, or delete {changed[0].folder} (and the others) to recompute"
            )
        if on_start:
            on_start({name: next(iter(o.plans.values())).protocol for name, o in stores.items()})
        # the parent its folder's trackers logged before, continued (`trackers.ledger`), or a new one
        parent = tracking.group(
            out, f"suite {spec.name}", {"command": "suite", "out": str(out), **flat_params(asdict(spec))}
        )
        try:
            if parent is not None:  # the cells found finished: their children too (logged before, or now)
                for state in states:
                    if state.status in ("done", "reused"):
                        _log_cell(parent, spec, state)
            if not tables_only:
                executor = Executor(jobs, scheduler, str(resolved))
                _run_missing(spec, stores, states, executor, resolved, on_cell, parent)
            result = _write_outputs(spec, stores, states, out, start)
        except BaseException:
            end_failed(parent)
            raise
        if parent is not None:
            parent.finish([], sorted(set(result.files.values())))
        return result


def _scenario_suite(
    spec: SuiteSpec,
    out: Path,
    jobs: int,
    scheduler: str | None,
    device: str,
    dry_run: bool,
    extract: Extractor | None,
    on_cell: CellCallback | None,
    tables_only: bool,
    log: Sequence[str],
    runs_root: Path,
    spell: Spell,
    estimate_extraction: ExtractionEstimator | None = None,
) -> ScenarioSuiteResult:
    """A suite of another scenario than `cil` (`studies.suite.scenario_suite`): what it does not do
    refused, the folder checked, the stores opened (extracted where asked), then its cells (a dry
    run: their plan and estimate, the stores not extracted yet left out)."""
    with_scenario_only(spec, device, spell)
    claim.check(out, SUITE_FOLDER)
    check_manifest(out)
    if dry_run:
        there = open_stores(spec, None, dry_run=True, plans=False)
        stores = {name: opened.store for name, opened in there.items()}
        return dry_run_scenario_suite(spec, stores, out, jobs, estimate_extraction)
    tracking = open_tracking(log, runs_root, spell("log")) if not tables_only else Tracking()
    stores = {name: opened.store for name, opened in open_stores(spec, extract, plans=False).items()}
    executor = None if tables_only else Executor(jobs, scheduler, "cpu")
    return run_scenario_suite(spec, stores, out, executor, on_cell, tracking)


def _write_outputs(
    spec: SuiteSpec, stores: dict[str, OpenStore], states: list[CellState], out: Path, start: float
) -> SuiteResult:
    """The finished cells read back, the tables, claims, figures and manifest written."""
    features = {}  # each store's test features, read (and checked) once, for the modules' similarity
    for state in states:
        if state.status in ("done", "reused", "ran"):
            store = stores[state.cell.store].store
            if state.cell.kind == "tosca" and state.cell.store not in features:
                features[state.cell.store] = read_split(store, "test")[0]
            _read(state, features.get(state.cell.store))
    tables = build_tables(spec, states)
    files = write_tables(out, spec, tables)
    result = SuiteResult(spec, out, states, tables, files, time.perf_counter() - start)
    files[MANIFEST] = write_manifest(out, spec, stores, states)
    return result


def check_room(spec: SuiteSpec, stores: dict[str, OpenStore], device: torch.device) -> None:
    """What the suite's cells would allocate, checked before anything runs (a dry run checks the same,
    on the stores there already): each TOSCA cell trains at least alone, so the largest must fit
    here; each baseline's own needs must fit (its class's `check_fits`: RanPAC's M x M matrices)."""
    for opened in stores.values():
        shape = opened.store.shape
        tasks = max(p.stream.num_tasks for p in opened.plans.values())
        rows = max(p.stream.largest_task_rows(p.train_labels) for p in opened.plans.values())
        held = max(len(p.held) for p in opened.plans.values())
        for flow in {"tosca", *spec.flows}:
            train = spec.train(spec.seeds[0], flow).resolved(shape.dim)
            require_room(shape, [train], tasks, device, rows, held)
    dim = max([opened.store.dim for opened in stores.values()] or [1])
    classes = max([max(p.stream.num_classes for p in o.plans.values()) for o in stores.values()] or [0])
    for method in spec.baselines:
        values = baseline_registry.arguments(method, spec.baseline_params)
        baseline_registry.check_fits(method, values, dim, classes)


def _states(spec: SuiteSpec, stores: dict[str, OpenStore], out: Path, runs_root: Path) -> list[CellState]:
    states = []
    for cell in cellmod.plan_cells(spec):
        folder = cell.folder(out)
        if cell.store not in stores:  # a dry run, before the store is extracted
            states.append(CellState(cell, folder, "", "to extract"))
            continue
        opened = stores[cell.store]
        plan = opened.plans[cell.order_seed]
        stream = plan.stream_config
        status, reason = "missing", ""
        if cellmod.finished(spec, cell, folder, plan):
            status = "done"
        else:
            found = cellmod.find_finished_run(spec, cell, runs_root, plan)
            if found is not None:
                folder, status = found, "reused"
            else:
                reason = cellmod.made_otherwise(spec, cell, folder, plan) or ""
                status = "changed" if reason else "missing"
        command = cellmod.command(spec, cell, cell.folder(out), opened.store.path, stream)
        states.append(CellState(cell, folder, command, status, reason=reason))
    return states


def _read(state: CellState, test_features: Any | None = None) -> None:
    state.result = cellmod.read_result(state.cell, state.folder)
    state.seconds = state.result["seconds"]
    if state.cell.kind == "tosca":
        state.similarity = cellmod.module_similarity(state.folder, test_features)


# ------------------------------------------------------------------------------------------ running


def works_of(
    spec: SuiteSpec,
    stores: dict[str, OpenStore],
    missing: Sequence[CellState],
    executor: Executor,
    device: torch.device,
) -> list[tuple[Work, list[CellState]]]:
    """What to run for the missing cells: each baseline cell alone; TOSCA cells of one store, class
    order and recipe family as engine runs of as many as the device holds (1 on a CPU)."""
    works: list[tuple[Work, list[CellState]]] = []
    tosca = []
    for state in missing:
        cell, opened = state.cell, stores[state.cell.store]
        path, stream = str(opened.store.path.resolve()), opened.plans[cell.order_seed].stream_config
        if cell.kind == "baseline":
            params = tuple(sorted(cellmod.cell_params(spec, cell).items()))
            work = Work(
                path,
                opened.store.fingerprint,
                stream,
                spec.validation,
                method=cell.method,
                params=params,
                baseline_folder=str(state.folder),
            )
            works.append((work, [state]))
        else:
            tosca.append(state)

    def family(state: CellState) -> tuple:
        return (state.cell.store, state.cell.order_seed, group_key(cellmod.cell_train(spec, state.cell)))

    sharing = executor.processes_per_device()
    for members in in_groups(tosca, family, len(tosca) or 1):
        opened = stores[members[0].cell.store]
        stream = opened.plans[members[0].cell.order_seed].stream_config
        trains = [cellmod.cell_train(spec, s.cell) for s in members]
        size = default_group_size(opened.store.shape, [_Point(t, stream) for t in trains], device, sharing)
        for i in range(0, len(members), size):
            part = members[i : i + size]
            work = Work(
                str(opened.store.path.resolve()),
                opened.store.fingerprint,
                stream,
                spec.validation,
                tuple(trains[i : i + size]),
                tuple(str(s.folder) for s in part),
                routers=on_request([*spec.routers, spec.primary]),
            )
            works.append((work, part))
    return works


@dataclass(frozen=True)
class _Point:
    """What the engine's group sizing reads of a cell: its recipe and task split."""

    train: Any
    stream: StreamConfig


def _run_missing(
    spec: SuiteSpec,
    stores: dict[str, OpenStore],
    states: list[CellState],
    executor: Executor,
    device: torch.device,
    on_cell: CellCallback | None,
    parent: TrackedGroup | None = None,
) -> None:
    """The missing cells through the executor, each writing its own folder (and, with trackers, a
    child run of `parent` per cell, logged here as its result arrives)."""
    missing = [s for s in states if s.status == "missing"]
    for state in missing:  # one folder holds a seed's baselines: claimed here, before they run at once
        if state.cell.kind == "baseline":
            claim.mark(state.folder.parent, BASELINES_FOLDER)
    planned = works_of(spec, stores, missing, executor, device)
    members_of = {id(work): members for work, members in planned}
    finished = 0
    if on_cell and missing:  # the total, before the first cell ends (no cell yet: None)
        on_cell(None, 0, len(missing))

    def record(work: Work, outcome: Outcome) -> None:
        nonlocal finished
        for state in members_of[id(work)]:
            state.status = "ran"
            finished += 1
            if parent is not None:
                _log_cell(parent, spec, state)
            if on_cell:
                on_cell(state.cell, finished, len(missing))

    executor.run([work for work, _ in planned], record)


def _log_cell(parent: TrackedGroup, spec: SuiteSpec, state: CellState) -> None:
    """A finished cell as a child of the suite's run, unless its trackers hold it already: its
    configuration, and what its folder holds (every figure of its metrics.json, its training
    curves, its files), the same whether it ran now, before, or as a reused run."""
    cell = state.cell
    params = {"cell": cell.key, "folder": str(state.folder), **flat_params(asdict(cell))}
    if cell.kind == "tosca":
        params.update(flat_params({"train": asdict(cellmod.cell_train(spec, cell))}))
    else:
        params.update(flat_params({"params": cellmod.cell_params(spec, cell)}))
    child = parent.child(cell.key, cell.key, params)
    if child is None:
        return
    files = run_files(state.folder)
    if cell.kind == "tosca":
        run = read_run(state.folder)
        child.finish(run.metrics, files, run.curves)
    else:
        result = baseline_result(state.folder)
        record = {
            "routers": {NO_ROUTING: result.metrics},
            "validation": {} if result.validation is None else {NO_ROUTING: result.validation},
        }
        child.finish(record, files, names={NO_ROUTING: cell.method})


# ------------------------------------------------------------------------------------------ estimate


def estimate_plan(
    spec: SuiteSpec,
    stores: dict[str, OpenStore],
    states: Sequence[CellState],
    device: torch.device,
    jobs: int,
    estimate_extraction: ExtractionEstimator | None,
) -> Estimate:
    """The wall time of the cells to run here (tosca_foundation.time_estimates, each cell's cost from
    tosca_heads.running.cost_models): extraction of the stores not on disk yet (by
    `estimate_extraction`, stage 1's), every missing TOSCA and baseline cell, the workers' start,
    the tables; and one line per thing that is missing."""
    from tosca_heads.running import cost_models as est

    plan = Estimate()
    shapes: dict[tuple[str, int], est.TaskShape] = {}
    extract_seconds: list[float] = []
    unknown: list[str] = []
    for s in spec.stores:
        if s.name in stores:
            for order, p in stores[s.name].plans.items():
                shapes[(s.name, order)] = est.shape_of(stores[s.name].store, p.stream_config)
            continue
        if estimate_extraction is None:
            plan.missing.append(f"store {s.name}: not extracted yet, and no extraction estimate here")
            continue
        guess = estimate_extraction(s)
        for line in guess.missing:  # a backbone's weights: one line for every store that needs them
            said = line if line.startswith("weights") else f"store {s.name}: {line}"
            if said not in plan.missing:
                plan.missing.append(said)
        if guess.seconds is None or not (guess.classes and guess.dim):
            unknown.append(s.name)
            continue
        extract_seconds.append(guess.seconds)
        plan.how.append(f"store {s.name}: extraction {guess.seconds / 60:.1f} min ({guess.how})")
        for order in spec.order_seeds:
            try:
                stream = stream_config(s.dataset or "", guess.classes, s.init_cls, s.increment, order)
            except UserError:
                continue
            shapes[(s.name, order)] = est.guessed_shape(
                guess.train_images or 0, guess.test_images or 0, guess.classes, guess.dim, stream
            )
    if unknown:
        plan.missing.append(
            f"not in the estimate: {len(unknown)} store(s) that cannot be extracted as things are "
            f"({', '.join(unknown)}) and their cells"
        )
    tosca: dict[str, float] = {}
    baselines: dict[str, float] = {}
    for state in states:
        if state.status not in ("missing", "to extract"):
            continue
        shape = shapes.get((state.cell.store, state.cell.order_seed))
        if shape is None:
            continue
        if state.cell.kind == "tosca":
            train = cellmod.cell_train(spec, state.cell)
            tosca[state.cell.key] = est.tosca_seconds(shape, train, device, alone=jobs == 1)
        else:
            params = cellmod.cell_params(spec, state.cell)
            baselines[state.cell.key] = est.baseline_seconds(state.cell.method, shape, params)
    said = (
        f"{len(tosca)} TOSCA cell(s) {sum(tosca.values()) / 60:.1f} min and {len(baselines)} baseline cell(s) "
        f"{sum(baselines.values()) / 60:.1f} min of work"
    )
    planned = plan_works(tosca, baselines, jobs, sum(extract_seconds), said)
    planned.how[:0] = plan.how
    planned.missing[:0] = plan.missing
    return planned


# ------------------------------------------------------------------------------------------ manifest


def write_manifest(out: Path, spec: SuiteSpec, stores: dict[str, OpenStore], states: list[CellState]) -> Path:
    """The suite's cells and stores as records.suite writes them: each store's identity, streams
    and protocols; each cell with its full configuration, folder, seconds and rerun command."""
    store_records = {
        name: {
            "path": str(o.store.path),
            "fingerprint": o.store.fingerprint,
            "samples_sha256": o.store.identity["dataset"].get("ids_sha256"),
            "dataset": o.store.identity["dataset"]["name"],
            "backbone": o.store.identity["backbone"].get("alias"),
            "weights": o.store.identity["backbone"].get("weights_source"),
            "weights_label": o.spec.weights,
            "streams": {str(k): asdict(p.stream_config) for k, p in o.plans.items()},
            "protocols": {str(k): p.protocol.record() for k, p in o.plans.items()},
        }
        for name, o in stores.items()
    }
    cells = [
        {
            "key": s.cell.key,
            **asdict(s.cell),
            "config": _cell_config(spec, s.cell, stores[s.cell.store].store.dim),
            "folder": str(s.folder),
            "status": s.status,
            "seconds": s.seconds,
            "command": s.command,
        }
        for s in states
    ]
    return records_suite.write_manifest(out, spec.name, asdict(spec), store_records, cells)


def _cell_config(spec: SuiteSpec, cell: Cell, dim: int) -> dict[str, Any]:
    if cell.kind == "tosca":
        return {"train": asdict(cellmod.cell_train(spec, cell).resolved(dim))}
    return {"baseline": cell.method, "params": cellmod.cell_params(spec, cell)}


def spec_of(request: SuiteRequest) -> SuiteSpec:
    """The suite a request names: a SUITE.toml or a preset, exactly one."""
    if (request.suite is None) == (request.preset is None):
        raise UserError("give a suite file (tosca suite SUITE.toml) or --preset NAME, not both or neither")
    if request.suite is not None:
        return load_suite(request.suite)
    return parse_suite(preset(request.preset or ""), Path.cwd(), f"preset {request.preset!r}")


def suite(
    request: SuiteRequest,
    extract: Extractor | None = None,
    on_cell: CellCallback | None = None,
    on_start: Callable[[dict[str, ProtocolReport]], None] | None = None,
    estimate_extraction: ExtractionEstimator | None = None,
) -> SuiteResult | ScenarioSuiteResult:
    """`tosca suite`."""
    return _run_suite(
        spec_of(request),
        request.out,
        request.jobs,
        request.scheduler,
        request.device,
        request.dry_run,
        extract,
        on_cell,
        request.runs_root,
        request.tables_only,
        on_start,
        estimate_extraction,
        request.log,
        spell=as_flag,
    )
