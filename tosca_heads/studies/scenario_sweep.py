"""`tosca sweep --scenario NAME` (NAME not `cil`; issue 56): the grid of TOSCA's recipe flags (r,
s, the L1 weight, the learning rate, the epochs, the seeds, ...) under one scenario of a store, every
point ranked on a validation split held out of the training rows, never on test.

A point is TOSCA with one recipe learning the scenario's stream on the kept training rows
(`applied.scenario_validation`) and answering, at each step, the held-out rows and the test rows
with every router (one training: `applied.scenario_point`, run by the one executor, here or on
Dask). Each router's answers are a cell of the sweep's folder (`records.scenario_folder`, kind
`scenario-sweep`, named KEY.ROUTER): a cell asked the same is reused, so a killed sweep continues and
a grown grid computes only its new points. Every figure is worked out from the kept answers when
the sweep ends (`Scenario.figures_of` on the plan made again from the store); results.csv and
results.md are views, written and never read back.

What a scenario sweep does not do (one line each, before any work): vary the class-incremental
split (the stream is the scenario's: its values with --set, one value each, so one table never
mixes two streams), keep modules, or group points on a GPU (a scenario's TOSCA learns on the CPU, as
every scenario method does). With --log the sweep is a parent run with a child per point, logged
when every point is done.
"""

from __future__ import annotations

import itertools
import math
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from featcache.store import FeatureStore, check_readable, resolve_store
from tosca_foundation.errors import UserTypeError, UserValueError
from tosca_foundation.limits import max_processes, require_at_most, usable_cores
from tosca_foundation.scheduler import check_scheduler, parse_scheduler
from tosca_foundation.text import tell
from tosca_foundation.time_estimates import Estimate, plan_works
from tosca_heads.applied import scenario_cost
from tosca_heads.applied.scenario_point import ScenarioPoint, point_identity
from tosca_heads.applied.scenario_runs import (
    TOSCA,
    plan_classes,
    scenario_values,
    store_labels,
    with_split,
)
from tosca_heads.applied.scenario_validation import HeldOutReading, held_out_reading
from tosca_heads.applied.tosca_scenario import DEFAULT_ROUTER, TOLD, TOSCA_DEFAULTS, check_router_rows
from tosca_heads.engine.layout import parameter_count
from tosca_heads.method import uncertainty
from tosca_heads.method.class_names import said_class
from tosca_heads.method.protocol import DEFAULT_ORDER_SEED, ValidationConfig
from tosca_heads.method.recipe import RECIPE_FLAGS, TrainConfig, recipe, value_fault, wrong_type
from tosca_heads.method.scenarios import Scenario, scenario
from tosca_heads.records import claim
from tosca_heads.records.scenario_folder import (
    SCENARIO_SWEEP_FOLDER,
    kept_answers,
    scenario_asked,
    write_result,
)
from tosca_heads.records.table import Table
from tosca_heads.requests.command_requests import SweepRequest
from tosca_heads.requests.plan import held_out
from tosca_heads.routers import ROUTERS, is_honest, on_request, reference_text
from tosca_heads.running.executor import Executor, Outcome
from tosca_heads.studies.results import CHOICE_RULE
from tosca_heads.studies.sweeps import SweepDryRun
from tosca_heads.trackers import Metric, Tracking, end_failed, open_tracking
from tosca_heads.trackers.events import flat_params, run_files

TRAIN_FLAGS = {flag.name: flag.kind for flag in RECIPE_FLAGS}
SPLIT_FLAGS = ("init_cls", "increment", "order_seed")  # the class-incremental split: a scenario's values
MAX_POINTS = 100_000
RANKED = "A_last"  # every scenario's headline figure: what the points are ranked by
RESULTS = ("results.csv", "results.md")
# (point's flags, finished, total): a point as it ends (computed here or reused)
PointCallback = Callable[[dict[str, Any], int, int], None]


@dataclass(frozen=True)
class ScenarioSweepPlan:
    """A scenario sweep checked whole, nothing written: the store, the scenario with its values and
    reading, the validation split and the stream read with it, TOSCA's routers (told the task: none,
    `TOLD`), the router that ranks, each point's recipe by its key, the flags swept, the folder and
    the executor."""

    store: FeatureStore
    kind: type[Scenario]
    values: dict[str, Any]
    read_as: str
    validation: ValidationConfig
    reading: HeldOutReading
    routers: tuple[str, ...]
    rank_by: str
    points: dict[str, TrainConfig]
    swept: list[str]
    out: Path
    executor: Executor
    tracking: Tracking = field(default_factory=Tracking)

    def params(self, train: TrainConfig) -> dict[str, Any]:
        """TOSCA's parameters at a point: its routers (the scenario's choices by default), and every
        number of its recipe."""
        routers = () if self.told_task else self.routers
        return {**asdict(train), "routers": routers or TOSCA_DEFAULTS["routers"]}

    @property
    def told_task(self) -> bool:
        return self.kind.told_task

    @property
    def answered(self) -> tuple[str, ...]:
        """What answers at each point: each router, or the told module (`til`)."""
        return (TOLD,) if self.told_task else self.routers

    def asked(self, train: TrainConfig, router: str) -> dict[str, Any]:
        """One point's router's cell: the scenario's cell of TOSCA (`scenario_asked`) with the
        recipe's numbers, the router, TOSCA's scenario choices, the validation split and the reading."""
        params = {
            **asdict(train),
            "router": router,
            **{k: TOSCA_DEFAULTS[k] for k in ("recurring", "module_per")},
        }
        asked = scenario_asked(self.store, self.kind.name, self.values, TOSCA, params)
        return {
            **asked,
            "kind": "scenario-sweep",
            "validation": self.validation.record(),
            "read_as": self.read_as,
        }

    def cell(self, key: str, router: str) -> Path:
        return self.out / f"{key}.{router.replace(' ', '-')}"

    def work(self, train: TrainConfig) -> ScenarioPoint:
        return ScenarioPoint(
            str(self.store.path.resolve()),
            self.store.fingerprint,
            self.kind.name,
            tuple(sorted(self.values.items())),
            self.read_as,
            self.validation,
            tuple(sorted(self.params(train).items())),
        )

    def kept(self) -> tuple[dict[str, dict[str, list[np.ndarray]]], dict[str, float]]:
        """The points whose every router's cell the folder keeps, asked the same: their answers by
        router, and their seconds (read only: a dry run asks the same)."""
        answers: dict[str, dict[str, list[np.ndarray]]] = {}
        seconds: dict[str, float] = {}
        for key, train in self.points.items():
            kept = [
                kept_answers(self.cell(key, r), self.asked(train, r), self.reading.joined)
                for r in self.answered
            ]
            if all(k is not None for k in kept):
                answers[key] = {r: k[0] for r, k in zip(self.answered, kept, strict=True)}  # type: ignore[index]
                seconds[key] = kept[0][1]  # type: ignore[index]
        return answers, seconds

    def estimate(self, keys: Sequence[str]) -> Estimate:
        """What the points of `keys` take here: each one TOSCA training on the joined stream (the
        validation rows answered beside the test rows) priced by `applied.scenario_cost`, shared by
        the workers, plus their start."""
        scheduler = self.executor.scheduler
        remote = scheduler is not None and parse_scheduler(scheduler).kind in ("address", "file")
        workers = 1 if remote else self.executor.jobs
        seconds = {
            key: scenario_cost.tosca_seconds(
                self.reading.joined,
                self.params(self.points[key]),
                self.store.dim,
                workers == 1,
            )
            for key in keys
        }
        said = f"{len(seconds)} point(s), {sum(seconds.values()) / 60:.1f} min of training (one SGD step timed here)"
        planned = plan_works(seconds, {}, workers, what=said)
        if remote:
            planned.missing.append("the cluster's workers are not timed: the estimate is this machine's")
        return planned

    @property
    def varying(self) -> list[str]:
        """The swept flags given more than one value, in the recipe's order."""
        return [f for f in self.swept if len({getattr(t, f) for t in self.points.values()}) > 1]

    @property
    def ranked_on(self) -> str:
        return "validation" if self.reading.validation is not None else "test"


@dataclass
class ScenarioSweepOutcome:
    """What a scenario sweep made: every point's figures per router and split (`frame`), the points
    ranked by `rank_by`'s A_last on `ranked_on` (`ranking`, best first), the point chosen (its
    flags), how many were computed and reused, the seconds, the files and the plan's line."""

    out: Path
    frame: pd.DataFrame
    ranking: pd.DataFrame
    chosen: dict[str, Any]
    ranked_on: str
    rank_by: str
    swept: list[str]
    computed: int
    reused: int
    seconds: float
    line: str
    files: dict[str, Path] = field(default_factory=dict)
    refit: str = ""  # the `tosca fit --scenario` command that runs the chosen point again


def scenario_dry_run(request: SweepRequest) -> SweepDryRun:
    """Every check of the scenario sweep, nothing written or learnt: what would run, and how long
    (`sweeps.SweepDryRun`, its plan this sweep's)."""
    plan = plan_scenario_sweep(request)
    kept, _ = plan.kept()
    return SweepDryRun(plan, [key for key in plan.points if key not in kept])


def plan_scenario_sweep(request: SweepRequest) -> ScenarioSweepPlan:
    """Every check before anything is written or learnt, each value named as the request spells it:
    what a scenario sweep does not do, the router that ranks, the processes, the validation split,
    the store (every chunk), the scenario's values and what the store can serve with the validation
    rows held out, the grid, and the folder."""
    spell = request.spell
    kind = scenario(request.scenario, spell("scenario"))
    name = kind.name
    _refuse_cil_only(request, name)
    rank_by = ROUTERS.pick(request.rank_by or DEFAULT_ROUTER, spell("rank_by"))  # the scenario's row
    if not is_honest(rank_by):
        honest = ", ".join(n for n in ROUTERS if is_honest(n))
        raise UserValueError(
            f"{spell('rank_by')} {rank_by} is a reference router ({reference_text(rank_by)}): a reference never "
            f"ranks or chooses; use an honest router: {honest}"
        )
    shown = [ROUTERS.pick(r, "--router") for r in request.shown or ()]  # the command line's only
    for r in shown:
        if not is_honest(r):
            raise UserValueError(f"--router {r} is a reference, never a scenario's result")
    jobs = _jobs(request)
    validation = ValidationConfig(request.val_fraction, request.val_seed)
    validation.validate(spell)
    # the trackers asked for, each checked now: a WHERE that cannot serve is one line before any work
    tracking = open_tracking(request.log, request.runs_root, spell("log"))
    if request.scheduler is not None:
        check_scheduler(parse_scheduler(request.scheduler))  # before the folder is made
    base = recipe(request.preset, spell=spell)
    grid = _grid(request)
    store = resolve_store(request.store, request.model, request.dataset, request.cache_dir)
    check_readable(store, values=True)
    values = _values(request, kind)
    labels = store_labels(store, request.read_as)
    reading = held_out_reading(kind, labels, held_out(store, validation), values)  # by store label
    routers = tuple(
        dict.fromkeys(
            [*(n for n in ROUTERS if is_honest(n) and not on_request([n])), *on_request([rank_by, *shown])]
        )
    )
    order, names = plan_classes(reading.joined, labels, store)
    check_router_rows(reading.joined, {"routers": routers}, lambda i: said_class(order[i], names))
    points = _points(grid, base, store.dim, spell)
    keyed = {point_identity(train, name, values, request.read_as, validation): train for train in points}
    ident = store.identity
    out = (
        request.out
        or request.runs_root / f"sweep-{ident['dataset']['name']}-{ident['backbone']['alias']}-{name}"
    )
    claim.check(out, SCENARIO_SWEEP_FOLDER)
    return ScenarioSweepPlan(
        store,
        kind,
        values,
        request.read_as,
        validation,
        reading,
        routers,
        rank_by,
        keyed,
        list(grid),
        out,
        Executor(jobs, request.scheduler, "cpu"),
        tracking,
    )


def _refuse_cil_only(request: SweepRequest, name: str) -> None:
    """One line for what only a class-incremental sweep does."""
    spell = request.spell
    if request.keep_modules is not None:
        raise UserValueError(
            f"a sweep under {spell('scenario')} {name} keeps each point's answers, not its modules; leave out "
            f"{spell('keep_modules')}"
        )
    if request.group is not None:
        raise UserValueError(
            f"a sweep under {spell('scenario')} {name} trains its points one by one on the CPU; leave out {spell('group')}"
        )
    if request.device not in ("auto", "cpu"):
        raise UserValueError(
            f"{spell('scenario')} {name} runs on the CPU (one thread: the same numbers at any thread count); "
            f"leave out {spell('device')} {request.device}"
        )


def _jobs(request: SweepRequest) -> int:
    value = request.jobs
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise UserTypeError(f"{request.spell('jobs')} must be an integer, got {value!r}")
    if value is not None and value < 1:
        raise UserValueError(f"{request.spell('jobs')} must be at least 1, got {value}")
    if value is not None:
        require_at_most(
            request.spell("jobs"),
            value,
            max_processes(),
            "processes",
            "at most 4 per usable core, and 64 anywhere",
        )
    return value or (1 if request.scheduler else usable_cores())


def _grid(request: SweepRequest) -> dict[str, list[Any]]:
    """The recipe's flags swept, each value checked on its own (every fault named at once). The
    class-incremental split's flags are the scenario's values (`_values`), taken out here."""
    from tosca_heads.studies.sweeps import option_name, parse_values

    spell = option_name if request.spell("seed") == "--seed" else request.spell
    grid = {
        flag: parse_values(flag, given)
        for flag, given in request.grid.items()
        if given is not None and flag not in SPLIT_FLAGS
    }
    faults: list[str] = []
    for flag, values in grid.items():
        for value in values:
            fault = value_fault(flag, value, spell(flag))
            if fault and fault not in faults:
                faults.append(fault)
    if faults:
        typed = any(wrong_type(f, v) for f, values in grid.items() for v in values)
        raise (UserTypeError if typed else UserValueError)("; ".join(faults))
    require_at_most(
        "a grid of",
        math.prod(len(v) for v in grid.values()),
        MAX_POINTS,
        "points",
        "split the sweep into several",
    )
    return grid


def _values(request: SweepRequest, kind: type[Scenario]) -> dict[str, Any]:
    """The scenario's values: --set NAME=VALUE texts, the API's `scenario_values`, and the
    class-incremental split's flags where the scenario declares them (til), one value each: a
    scenario's values are its stream, never swept (a sweep per value keeps each in its own table);
    the class order's default seed (the command's) is no value given."""
    from tosca_heads.studies.sweeps import parse_values

    values = scenario_values(kind.name, tuple(request.set_values))
    values.update(request.scenario_values)
    given: dict[str, Any] = {}
    for flag in SPLIT_FLAGS:
        if request.grid.get(flag) is None:
            continue
        parsed = parse_values(flag, request.grid[flag])
        if len(parsed) > 1:
            raise UserValueError(
                f"{request.spell(flag)} is scenario {kind.name}'s stream, one value per sweep, got {len(parsed)} "
                "(a sweep per value keeps each stream in its own table)"
            )
        given[flag] = None if flag == "order_seed" and parsed == [DEFAULT_ORDER_SEED] else parsed[0]
    return with_split(kind, values, given, request.spell)


def _points(grid: Mapping[str, list[Any]], base: TrainConfig, dim: int, spell: Any) -> list[TrainConfig]:
    """The Cartesian product in the recipe's flag order, each point's recipe checked and resolved
    (r and s as numbers)."""
    names = [f for f in TRAIN_FLAGS if f in grid]
    points = []
    for chosen in itertools.product(*(grid[f] for f in names)):
        train = replace(base, **dict(zip(names, chosen, strict=True)))
        train.validate(spell)
        resolved = train.resolved(dim)
        if resolved not in points:
            points.append(resolved)
    return points


def run_scenario_sweep(
    plan: ScenarioSweepPlan, on_point: PointCallback | None = None, on_start: Callable[[], None] | None = None
) -> ScenarioSweepOutcome:
    """The folder claimed; each point whose every router's cell is kept reused, the others run by
    the executor (each router's cell written as its point comes back); then every figure worked out
    from the answers, the points ranked, and the views written."""
    start = time.perf_counter()
    with claim.claim_folder(plan.out, SCENARIO_SWEEP_FOLDER):
        if on_start is not None:
            on_start()
        answers, seconds = plan.kept()
        reused = len(answers)
        total = len(plan.points)
        for i, key in enumerate(answers, 1):
            if on_point is not None:
                on_point(_flags(plan, key), i, total)
        pending = {key: train for key, train in plan.points.items() if key not in answers}
        works = {id(w): (key, w) for key, w in ((k, plan.work(t)) for k, t in pending.items())}

        def done(work: ScenarioPoint, outcome: Outcome) -> None:
            key, _ = works[id(work)]
            by_router: dict[str, list[np.ndarray]] = outcome.value
            for router in plan.answered:
                asked = plan.asked(plan.points[key], router)
                write_result(
                    plan.cell(key, router), by_router[router], outcome.seconds, asked, SCENARIO_SWEEP_FOLDER
                )
            answers[key], seconds[key] = {r: by_router[r] for r in plan.answered}, outcome.seconds
            if on_point is not None:
                on_point(_flags(plan, key), len(answers), total)

        if pending:
            tell(f"{len(pending)} point(s) to run, {reused} reused from {plan.out}")
        plan.executor.run([w for _, w in works.values()], done)
        frame = _frame(plan, answers, seconds)
        ranking, chosen_key = _ranking(plan, frame)
        chosen = _flags(plan, chosen_key)
        files = _write_views(plan, frame, ranking)
        _log(plan, frame, ranking)
    return ScenarioSweepOutcome(
        plan.out,
        frame,
        ranking,
        chosen,
        plan.ranked_on,
        _rank_router(plan),
        list(chosen),
        total - reused,
        reused,
        time.perf_counter() - start,
        plan.reading.test.describe(),
        files,
        refit_command(plan, chosen_key),
    )


def _log(plan: ScenarioSweepPlan, frame: pd.DataFrame, ranking: pd.DataFrame) -> None:
    """The sweep as a parent run with a child per point (its routers' figures on test and
    validation, its cells' files), unless its trackers hold it already (`TrackedGroup`: a rerun
    logs only what is new); the parent's figures are the chosen point's."""
    params = {
        "command": "sweep",
        "out": str(plan.out),
        "scenario": plan.kind.name,
        **{f"scenario.{k}": v for k, v in sorted(plan.values.items())},
        "read_as": plan.read_as,
        "points": len(plan.points),
        "rank_by": _rank_router(plan),
        **flat_params({"validation": plan.validation.record()}),
        "store": str(plan.store.path.resolve()),
        "store_fingerprint": plan.store.fingerprint,
    }
    parent = plan.tracking.group(plan.out, f"sweep {plan.out.name}", params)
    if parent is None:
        return
    try:
        for key, train in plan.points.items():
            label = ", ".join(f"{k}={v}" for k, v in _flags(plan, key).items())
            child = parent.child(key, label, flat_params(asdict(train)))
            if child is None:
                continue
            mine = frame[frame["point"] == key]
            record: dict[str, Any] = {"routers": {}, "validation": {}}
            for row in mine.to_dict("records"):
                figures = {f: row[f] for f in plan.kind.figures}
                record["routers" if row["split"] == "test" else "validation"][row["router"]] = figures
            child.finish(record, [f for r in plan.answered for f in run_files(plan.cell(key, r))])
        chosen = ranking[ranking["chosen"]].iloc[0]
        shown = [c for c in (f"val_{RANKED}", RANKED) if c in ranking.columns]
        parent.finish([Metric(f"chosen/{c}", float(chosen[c]), 0) for c in shown], run_files(plan.out))
    except BaseException:
        end_failed(parent)
        raise


def refit_command(plan: ScenarioSweepPlan, key: str) -> str:
    """`tosca fit --scenario` with the point's recipe flags, the scenario's values and the validation
    split: the same training, kept as a scenario run (its figures equal the point's)."""
    point = asdict(plan.points[key])
    parts = ["tosca", "fit", "--store", str(plan.store.path), "--scenario", plan.kind.name]
    parts += [f"--set={k}={v}" for k, v in sorted(plan.values.items())]
    if plan.read_as:
        parts += ["--read-as", plan.read_as]
    for flag in TRAIN_FLAGS:
        parts += [f"--{flag.replace('_', '-')}", str(point[flag])]
    if plan.validation.enabled:
        parts += ["--val-fraction", str(plan.validation.fraction), "--val-seed", str(plan.validation.seed)]
    return shlex.join(parts)


def _flags(plan: ScenarioSweepPlan, key: str) -> dict[str, Any]:
    """A point by the flags its grid varies (every recipe number where none varies)."""
    point = asdict(plan.points[key])
    return {flag: point[flag] for flag in plan.varying} if plan.varying else point


def _rank_router(plan: ScenarioSweepPlan) -> str:
    return TOLD if plan.told_task else plan.rank_by


def _frame(
    plan: ScenarioSweepPlan,
    answers: Mapping[str, Mapping[str, list[np.ndarray]]],
    seconds: Mapping[str, float],
) -> pd.DataFrame:
    """One row per point, router and split: the recipe's numbers, the figures (fractions) worked out
    from the kept answers on the split's reading, the point's seconds (training and every router's
    answers on both splits)."""
    rows = []
    for key, train in plan.points.items():
        for router in plan.answered:
            validation, test = plan.reading.split(answers[key][router])
            for split, found, reading in (
                ("validation", validation, plan.reading.validation),
                ("test", test, plan.reading.test),
            ):
                if found is None or reading is None:
                    continue
                figures = plan.kind.figures_of(reading, found)
                rows.append(
                    {
                        "point": key,
                        **asdict(train),
                        "router": router,
                        "split": split,
                        **figures,
                        "seconds": seconds[key],
                    }
                )
    return pd.DataFrame(rows)


def _ranking(plan: ScenarioSweepPlan, frame: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The points by the ranking router's A_last on the ranking split, best first (the grid's order
    among equals), each with its standard error there (the last step's images, plus four: one run
    per point, each seed its own point) and its test figures beside; the points within one
    standard error of the best are ties (`tie`), and among them the class-incremental sweep's rule
    chooses (`CHOICE_RULE`: the fewest parameters per module, then the largest L1 weight, then the
    highest figure). Returns the ranking and the chosen point's key."""
    router = _rank_router(plan)
    mine = frame[frame["router"] == router]
    on = mine[mine["split"] == plan.ranked_on].set_index("point")
    test = mine[mine["split"] == "test"].set_index("point")
    keys = list(plan.points)
    scores = np.array([on.loc[k, RANKED] for k in keys], dtype=float)
    read = plan.reading.validation if plan.ranked_on == "validation" else plan.reading.test
    images = len(read.steps[-1].eval_rows) if read is not None else 0
    errors = np.array([uncertainty.plus_four_se(float(v), images) for v in scores])
    tied = uncertainty.ties(scores, errors)
    trains = list(plan.points.values())
    params = [parameter_count(plan.store.dim, int(t.r or 0), int(t.s or 0), t.flow) for t in trains]
    chosen = min(np.flatnonzero(tied), key=lambda i: (params[i], -trains[i].l1, -scores[i], i))
    prefix = "val_" if plan.ranked_on == "validation" else ""
    rows = []
    for rank, i in enumerate(sorted(range(len(keys)), key=lambda i: -scores[i]), 1):
        key = keys[i]
        row: dict[str, Any] = {"rank": rank, **_flags(plan, key)}
        if prefix:
            row[f"val_{RANKED}"] = scores[i]
        row[f"{prefix}{RANKED}_se"] = errors[i]
        row.update({name: test.loc[key, name] for name in plan.kind.figures})
        row.update(
            params_per_task=params[i],
            tie=bool(tied[i]),
            chosen=bool(i == chosen),
            seconds=test.loc[key, "seconds"],
        )
        rows.append(row)
    return pd.DataFrame(rows), keys[chosen]


def _write_views(plan: ScenarioSweepPlan, frame: pd.DataFrame, ranking: pd.DataFrame) -> dict[str, Path]:
    """results.csv (every point, router and split) and results.md (the ranking: `=` a tie with the
    best, `*` the point chosen): views of the cells, written and never read back."""
    import tosca_foundation.atomic as atomic

    atomic.write_text(plan.out / RESULTS[0], frame.to_csv(index=False))
    header, cells = ranking_cells(ranking, list(_flags(plan, next(iter(plan.points)))))
    if plan.ranked_on == "validation":
        where = "validation split (held out of the training rows; test figures are for reading, never for choosing)"
    else:
        where = "TEST split (no validation split: the choice is tuned on test)"
    note = (
        f"Points ranked by {_rank_router(plan)}'s {RANKED} on the {where}; figures in %, under scenario "
        f"{plan.reading.test.describe()}. `=`: tied with the best (within its standard error); `*`: the "
        f"point chosen, {CHOICE_RULE}."
    )
    title = f"sweep under scenario {plan.kind.name}: {len(plan.points)} points"
    Table(title, note, header, cells, ranking).write(plan.out / RESULTS[1], ("md",))
    return {name: plan.out / name for name in RESULTS}


def ranking_cells(ranking: pd.DataFrame, flags: list[str]) -> tuple[list[str], list[list[str]]]:
    """The ranking as a table's header and text cells: the rank with `*` (chosen) and `=` (a tie
    with the best), the flags, each figure in % (the ranked one with its standard error), the seconds."""
    error = next(c for c in ranking.columns if c.endswith("_se"))
    ranked = error[: -len("_se")]
    left = ("rank", "seconds", "tie", "chosen", "params_per_task", error, *flags)
    figures = [c for c in ranking.columns if c not in left]
    cells = []
    for r in ranking.to_dict("records"):
        mark = ("*" if r["chosen"] else "") + ("=" if r["tie"] else "")
        shown = [
            f"{100 * r[f]:.2f} ± {100 * r[error]:.2f}" if f == ranked else f"{100 * r[f]:.2f}"
            for f in figures
        ]
        cells.append([f"{r['rank']}{mark}", *(str(r[f]) for f in flags), *shown, f"{r['seconds']:.1f}"])
    return ["rank", *flags, *figures, "seconds"], cells


def scenario_sweep(
    request: SweepRequest,
    on_start: Callable[[ScenarioSweepPlan], None] | None = None,
    on_point: PointCallback | None = None,
) -> ScenarioSweepOutcome:
    """`tosca sweep --scenario NAME`: plan (every check), then run (`run_scenario_sweep`)."""
    plan = plan_scenario_sweep(request)
    return run_scenario_sweep(plan, on_point, None if on_start is None else lambda: on_start(plan))
