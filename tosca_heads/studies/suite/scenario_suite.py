"""A suite of another scenario than `cil` (`scenario = "fscil"` in SUITE.toml; issue 56): every
store's table under that one scenario, TOSCA (each honest router of `tosca.routers`, from one
training) beside the suite's baselines, over its seeds.

A cell is one store and seed (`cells/STORE/seed-K/`, a scenario folder): each method, and each of
TOSCA's routers, a cell of it (`records.scenario_folder`: its answers at each step, asked.json
naming the store, the scenario and its values, the method and its parameters with the seed),
reused when asked the same. A cell runs itself (`ScenarioCell`, through the one executor: here or
on Dask workers) and writes only its own folder. Every figure is worked out from the kept answers
when the suite ends, on the plan made again from the store: `table-SCENARIO.csv` (each store, method and
figure: the mean over seeds, their standard deviation and count) and `table-SCENARIO.md` (A_last
per store) are views, named by the scenario so that a class-incremental suite's tables in the same
folder are never taken for them. A deterministic baseline (its class says so) runs at the first seed only.

manifest.json says which store and which commands made each cell (`scenario_manifest`). What the
class-incremental suite adds (claims, ablation, bold entries chosen on validation, the modules'
similarity) is not made here: a scenario suite chooses
nothing, and its table shows every row with its spread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from featcache.store import FeatureStore, open_unchanged
from tosca_foundation.errors import UserValueError
from tosca_foundation.text import tell
from tosca_foundation.time_estimates import Estimate, plan_works
from tosca_heads.applied import scenario_cost
from tosca_heads.applied.scenario_runs import (
    TOSCA,
    CheckedScenario,
    ScenarioResult,
    checked_scenario,
    result_of,
    run_checked,
)
from tosca_heads.applied.tosca_scenario import TOLD, TOSCA_DEFAULTS
from tosca_heads.method import baseline_registry
from tosca_heads.records import claim
from tosca_heads.records.scenario_folder import SCENARIO_FOLDER, kept_answers, scenario_asked, write_result
from tosca_heads.records.suite import MANIFEST, SUITE_FOLDER
from tosca_heads.records.table import Table
from tosca_heads.routers import is_honest
from tosca_heads.running.executor import Executor, Outcome
from tosca_heads.studies.suite.scenario_manifest import write_scenario_manifest
from tosca_heads.studies.suite.spec import SuiteSpec, folder_name
from tosca_heads.trackers import Tracking, end_failed
from tosca_heads.trackers.events import flat_params, run_files


@dataclass(frozen=True)
class Answering:
    """One row of a store's table at one seed: a method (TOSCA: with one router, or told the task)
    and the cell folder's name its answers are kept under."""

    method: str
    router: str = ""

    @property
    def name(self) -> str:
        return f"{self.method}-{self.router.replace(' ', '-')}" if self.router else self.method

    @property
    def label(self) -> str:
        return f"{self.method} ({self.router})" if self.router else self.method


@dataclass(frozen=True)
class ScenarioCell:
    """One store and seed as the executor runs it (plain values, so it travels to a worker): the
    store (its path and the fingerprint it was planned on), the scenario with its values and
    reading, the methods to run (those whose cells were not all kept), each method's parameters,
    and the folder it alone writes."""

    key: str  # STORE/seed-K: what the progress names
    store_path: str
    fingerprint: str
    scenario: str
    values: tuple[tuple[str, Any], ...]
    read_as: str
    methods: tuple[str, ...]
    params: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]
    folder: str

    def method_params(self) -> dict[str, dict[str, Any]]:
        return {method: dict(pairs) for method, pairs in self.params}

    def run(self) -> None:
        """Each method learnt and answered (TOSCA once, for every router), each answer list written
        as its cell (done.json last)."""
        store = open_unchanged(
            self.store_path,
            self.fingerprint,
            "the suite was planned",
            "run the suite again against the store as it is now",
        )
        params = self.method_params()
        ready = checked_scenario(
            store, self.scenario, self.methods, dict(self.values), self.read_as, "scenario", params
        )
        folder = Path(self.folder)
        with claim.claim_folder(folder, SCENARIO_FOLDER):
            for result in run_checked(ready, params):
                row = Answering(result.method, result.router)
                asked = cell_asked(
                    store, self.scenario, dict(self.values), self.read_as, row, params[result.method]
                )
                write_result(folder / row.name, result.answers, result.seconds, asked)


def cell_asked(
    store: FeatureStore,
    name: str,
    values: Mapping[str, Any],
    read_as: str,
    row: Answering,
    params: Mapping[str, Any],
) -> dict[str, Any]:
    """What one row's cell is asked: the scenario's cell of the method (`scenario_asked`), TOSCA's
    with its one router in place of the routers, and the store's reading."""
    params = dict(params)
    if row.method == TOSCA:
        params.pop("routers", None)
        params["router"] = row.router
    return {**scenario_asked(store, name, dict(values), row.method, params), "read_as": read_as}


@dataclass
class StorePlan:
    """A store of the suite made ready: its checked scenario (every method able to run it) and
    each seed's method parameters."""

    name: str
    label: str
    ready: CheckedScenario
    values: dict[str, Any]
    read_as: str


@dataclass
class CellRecord:
    """What the suite knows of one store and seed: its folder, the rows it answers, the rows kept
    (each a `ScenarioResult` read from its cell) and its status (`reused`, `ran`, `missing`)."""

    key: str
    store: str
    seed: int
    folder: Path
    rows: list[Answering]
    params: dict[str, dict[str, Any]]
    results: dict[str, ScenarioResult] = field(default_factory=dict)
    status: str = "missing"


@dataclass
class ScenarioSuiteResult:
    """What a scenario suite made: its spec and folder, every cell's record, the table (one row per
    store, method and figure), the files and the seconds."""

    spec: SuiteSpec
    out: Path
    cells: list[CellRecord]
    table: pd.DataFrame
    files: dict[str, Path]
    seconds: float
    scenario_line: dict[str, str] = field(default_factory=dict)  # each store's plan in one line
    estimate: Any = None  # a dry run's tosca_foundation.time_estimates.Estimate

    @property
    def estimate_seconds(self) -> float | None:
        return None if self.estimate is None else self.estimate.wall

    def plan_rows(self) -> list[tuple[str, str, str, Path]]:
        """A dry run's table: each cell's store, seed, status and folder."""
        return [(c.store, f"seed-{c.seed}", c.status, c.folder) for c in self.cells]

    @property
    def tables(self) -> None:
        """A class-incremental suite's tables and claims (`SuiteResult.tables`): none here."""
        return None

    @property
    def missing(self) -> list[str]:
        return [c.key for c in self.cells if c.status == "missing"]


def routers_of(spec: SuiteSpec) -> tuple[str, ...]:
    """TOSCA's routers in a scenario suite: the honest ones of `tosca.routers` (a reference is refused
    where given, `spec._check_scenario`; the default's references are left out)."""
    return tuple(r for r in spec.routers if is_honest(r)) or TOSCA_DEFAULTS["routers"]


def plan_stores(spec: SuiteSpec, stores: Mapping[str, FeatureStore]) -> dict[str, StorePlan]:
    """Each store's scenario checked before any work: its values (the suite's, and a store's split
    where the scenario takes one), what the store can serve, every method able to run it."""
    methods = (TOSCA, *spec.baselines)
    planned = {}
    for s in (s for s in spec.stores if s.name in stores):  # a dry run's stores not extracted yet: none
        values = dict(spec.scenario_values)
        values.update({k: getattr(s, k) for k in ("init_cls", "increment") if getattr(s, k) is not None})
        tosca = {"routers": routers_of(spec)}
        try:
            ready = checked_scenario(
                stores[s.name], spec.scenario, methods, values, s.read_as, "scenario", {TOSCA: tosca}
            )
        except UserValueError as exc:
            raise UserValueError(f"store {s.name!r}: {exc}") from None
        planned[s.name] = StorePlan(s.name, s.label, ready, values, s.read_as)
    return planned


def records(spec: SuiteSpec, planned: Mapping[str, StorePlan], out: Path) -> list[CellRecord]:
    """Every cell of the suite (stores, then seeds), each with its rows and parameters, and what its
    folder keeps already (checked as every cell is: an edited one is one line)."""
    cells = []
    for name, plan in planned.items():
        told = plan.ready.kind.told_task
        for i, seed in enumerate(spec.seeds):
            params: dict[str, dict[str, Any]] = {
                TOSCA: {**spec.flags, "seed": seed, "routers": routers_of(spec)}
            }
            rows = [Answering(TOSCA, r) for r in ((TOLD,) if told else routers_of(spec))]
            for method in spec.baselines:
                if i and baseline_registry.deterministic(method):
                    continue  # the same answers at every seed: run once
                params[method] = baseline_registry.arguments(method, spec.baseline_params, seed)
                rows.append(Answering(method))
            folder = out / "cells" / folder_name(name) / f"seed-{seed}"
            cell = CellRecord(f"{name}/seed-{seed}", name, seed, folder, rows, params)
            claim.check(folder, SCENARIO_FOLDER)  # a cell edited since it finished: one line, now
            _read_kept(cell, plan)
            cells.append(cell)
    return cells


def _read_kept(cell: CellRecord, plan: StorePlan) -> None:
    """The rows whose cells are kept and asked the same, read into `cell.results`; the cell is
    `reused` when every row is."""
    ready = plan.ready
    for row in cell.rows:
        asked = cell_asked(
            ready.store, ready.kind.name, plan.values, plan.read_as, row, cell.params[row.method]
        )
        kept = kept_answers(cell.folder / row.name, asked, ready.plan)
        if kept is not None:
            cell.results[row.label] = result_of(ready, row.method, kept[0], kept[1], row.router)
    if len(cell.results) == len(cell.rows):
        cell.status = "reused"


def run_scenario_suite(
    spec: SuiteSpec,
    stores: Mapping[str, FeatureStore],
    out: Path,
    executor: Executor | None,
    on_cell: Callable[[Any, int, int], None] | None = None,
    tracking: Tracking | None = None,
) -> ScenarioSuiteResult:
    """Plan every store (all checks first), run the cells not kept (`executor` None: none, the
    tables of what is there), then read every cell back and write the table."""
    start = time.perf_counter()
    planned = plan_stores(spec, stores)
    for name, plan in planned.items():
        tell(f"store {name}: scenario {plan.ready.plan.describe()}")  # before any work
    with claim.claim_folder(out, SUITE_FOLDER):
        cells = records(spec, planned, out)
        todo = [c for c in cells if c.status != "reused"]
        done = len(cells) - len(todo)
        if on_cell is not None:
            on_cell(None, done, len(cells))
        works = {}
        for cell in todo:
            ready = planned[cell.store].ready
            methods = tuple(dict.fromkeys(r.method for r in cell.rows if r.label not in cell.results))
            works[cell.key] = ScenarioCell(
                cell.key,
                str(ready.store.path.resolve()),
                ready.store.fingerprint,
                ready.kind.name,
                tuple(sorted(planned[cell.store].values.items())),
                planned[cell.store].read_as,
                methods,
                tuple((m, tuple(sorted(_plain(cell.params[m]).items()))) for m in methods),
                str(cell.folder),
            )
        by_key = {c.key: c for c in cells}

        def finished(work: ScenarioCell, outcome: Outcome) -> None:
            nonlocal done
            cell = by_key[work.key]
            _read_kept(cell, planned[cell.store])
            cell.status = "ran" if len(cell.results) == len(cell.rows) else "missing"
            done += 1
            if on_cell is not None:
                on_cell(cell, done, len(cells))

        if executor is not None:
            executor.run(list(works.values()), finished)
        table = suite_table(spec, cells)
        files = write_table(out, spec, planned, table)
        files[MANIFEST] = write_scenario_manifest(out, spec, planned, cells)
        if tracking:
            _log(tracking, spec, out, cells, list(files.values()))
    lines = {name: plan.ready.plan.describe() for name, plan in planned.items()}
    return ScenarioSuiteResult(spec, out, cells, table, files, time.perf_counter() - start, lines)


def _log(
    tracking: Tracking, spec: SuiteSpec, out: Path, cells: Sequence[CellRecord], files: list[Path]
) -> None:
    """The suite as a parent run with a child per finished cell (each row's figures, the cell's
    files), unless its trackers hold it already (`TrackedGroup`: a rerun logs only what is new)."""
    params = {"command": "suite", "out": str(out), **flat_params({"spec": asdict(spec)})}
    parent = tracking.group(out, f"suite {spec.name}", params)
    if parent is None:
        return
    try:
        for c in cells:
            if c.status == "missing":
                continue
            child = parent.child(c.key, c.key, {"store": c.store, "seed": c.seed, "scenario": spec.scenario})
            if child is not None:
                record = {"routers": {label: {**r.figures, "A_t": r.curve} for label, r in c.results.items()}}
                child.finish(record, [f for row in c.rows for f in run_files(c.folder / row.name)])
        parent.finish([], files)
    except BaseException:
        end_failed(parent)
        raise


def _plain(params: Mapping[str, Any]) -> dict[str, Any]:
    """Parameters as values that hash and travel (a tuple for a list)."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in params.items()}


def suite_table(spec: SuiteSpec, cells: Sequence[CellRecord]) -> pd.DataFrame:
    """One row per store, method (TOSCA: per router) and figure: the mean over the seeds kept,
    their standard deviation (NaN for one run) and count, and the mean seconds."""
    rows = []
    for store in spec.stores:
        mine = [c for c in cells if c.store == store.name]
        labels = list(dict.fromkeys(r.label for c in mine for r in c.rows))
        for label in labels:
            found = [c.results[label] for c in mine if label in c.results]
            if not found:
                continue
            for figure in found[0].figures:
                values = np.array([r.figures[figure] for r in found], dtype=float)
                rows.append(
                    {
                        "store": store.name,
                        "method": label,
                        "figure": figure,
                        "mean": float(values.mean()),
                        "std": float(values.std(ddof=1)) if len(values) > 1 else float("nan"),
                        "runs": len(values),
                        "seconds": float(np.mean([r.seconds for r in found])),
                    }
                )
    return pd.DataFrame(rows, columns=["store", "method", "figure", "mean", "std", "runs", "seconds"])


def shown_table(spec: SuiteSpec, lines: Mapping[str, str], table: pd.DataFrame) -> Table:
    """The table a reader sees: A_last in % per method (rows) and store (columns), mean ± std over
    the seeds (one run: the figure alone); no entry bold (a scenario suite chooses nothing)."""
    stores = [s.name for s in spec.stores]
    a_last = table[table["figure"] == "A_last"]
    methods = list(dict.fromkeys(a_last["method"]))
    cells = []
    for method in methods:
        row = [method]
        for store in stores:
            hit = a_last[(a_last["method"] == method) & (a_last["store"] == store)]
            if hit.empty:
                row.append("missing")
                continue
            mean, std, runs = hit.iloc[0][["mean", "std", "runs"]]
            row.append(f"{100 * mean:.2f}" + ("" if runs < 2 else f" ± {100 * std:.2f}"))
        cells.append(row)
    labels = {s.name: s.label for s in spec.stores}
    plans = "; ".join(f"{name}: {line}" for name, line in lines.items())
    note = (
        f"A_last in % (mean ± standard deviation over seeds {', '.join(map(str, spec.seeds))}; a deterministic "
        f"baseline runs once) under scenario {plans}. No entry is bold: nothing here is chosen. Every figure "
        f"of the scenario is in table-{spec.scenario}.csv."
    )
    title = f"{spec.name}: scenario {spec.scenario}"
    return Table(title, note, ["method", *(labels[s] for s in stores)], cells, table)


def write_table(
    out: Path, spec: SuiteSpec, planned: Mapping[str, StorePlan], table: pd.DataFrame
) -> dict[str, Path]:
    """table-SCENARIO.csv (every figure) and table-SCENARIO.md (A_last), written whole, never read back."""
    import tosca_foundation.atomic as atomic

    base = out / f"table-{spec.scenario}"
    lines = {name: plan.ready.plan.describe() for name, plan in planned.items()}
    shown_table(spec, lines, table).write(base.with_suffix(".md"), ("md",))
    atomic.write_text(base.with_suffix(".csv"), table.to_csv(index=False))
    return {p.name: p for p in (base.with_suffix(".csv"), base.with_suffix(".md"))}


def dry_run_scenario_suite(
    spec: SuiteSpec,
    stores: Mapping[str, FeatureStore],
    out: Path,
    jobs: int,
    estimate_extraction: Callable[[Any], Any] | None = None,
) -> ScenarioSuiteResult:
    """The suite's plan, nothing written or learnt: every check of the stores there (their scenario,
    every method able to run it), each cell reused or to run (its folder read as a run reads it),
    a store not extracted yet listed with its cells `to extract`, and what the cells to run take
    here (`applied.scenario_cost`: each method left to run in each cell; the extraction by stage 1's
    estimate where one is handed in)."""
    planned = plan_stores(spec, stores)
    for name, plan in planned.items():
        tell(f"store {name}: scenario {plan.ready.plan.describe()}")  # as a run says it
    cells = records(spec, planned, out)
    estimate = Estimate()
    extract = 0.0
    for s in spec.stores:
        if s.name in stores:
            continue
        for seed in spec.seeds:
            folder = out / "cells" / folder_name(s.name) / f"seed-{seed}"
            cells.append(
                CellRecord(f"{s.name}/seed-{seed}", s.name, seed, folder, [], {}, status="to extract")
            )
        guess = estimate_extraction(s) if estimate_extraction is not None else None
        if guess is not None and guess.seconds is not None:
            extract += guess.seconds
            estimate.how.append(f"store {s.name}: extraction {guess.seconds / 60:.1f} min ({guess.how})")
        else:
            estimate.missing.append(f"store {s.name}: not extracted yet, and no extraction estimate here")
        estimate.missing.append(
            f"store {s.name}: its cells are not in the estimate until it is extracted (its scenario reads its labels)"
        )
    tosca: dict[str, float] = {}
    baselines: dict[str, float] = {}
    for cell in cells:
        if cell.status != "missing":
            continue
        ready = planned[cell.store].ready
        for method in dict.fromkeys(r.method for r in cell.rows if r.label not in cell.results):
            key, params = f"{cell.key}/{method}", cell.params[method]
            if method == TOSCA:
                tosca[key] = scenario_cost.tosca_seconds(ready.plan, params, ready.store.dim, jobs == 1)
            else:
                baselines[key] = scenario_cost.baseline_seconds(ready.plan, method, params, ready.store.dim)
    said = (
        f"{len(tosca)} TOSCA training(s) {sum(tosca.values()) / 60:.1f} min and {len(baselines)} baseline(s) "
        f"{sum(baselines.values()) / 60:.1f} min of work"
    )
    planned_works = plan_works(tosca, baselines, jobs, extract, said)
    planned_works.how[:0] = estimate.how
    planned_works.missing[:0] = estimate.missing
    lines = {name: plan.ready.plan.describe() for name, plan in planned.items()}
    return ScenarioSuiteResult(spec, out, cells, pd.DataFrame(), {}, 0.0, lines, planned_works)


def with_scenario_only(spec: SuiteSpec, device: str, spell: Callable[[str], str]) -> None:
    """One line for what a scenario suite does not do yet, before anything is opened."""
    if device not in ("auto", "cpu"):
        raise UserValueError(
            f"scenario {spec.scenario} runs on the CPU (one thread: the same numbers at any thread count); "
            f"leave out {spell('device')} {device}"
        )
