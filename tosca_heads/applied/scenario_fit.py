"""`tosca fit --scenario NAME` (NAME not `cil`; issue 56): TOSCA with one recipe under a scenario of
a store, kept as a scenario run that `tosca eval` and `tosca routers` read.

The run is the scenario sweep's point with one recipe (`scenario_point.ScenarioPoint`: the stream
learnt on the training rows kept after `--val-fraction`, one training answering the held-out rows
and the test rows at each step with every router asked), its answers kept as a cell per router
(`records.scenario_folder`: asked.json names the store with its path, the scenario, its values
and reading, the recipe, the router and the validation split). A rerun asked the same reuses the
cells; every figure is worked out from them when read, on the plan made again from the store
(`read_scenario_run`), so `tosca eval RUN` re-reads, it does not train again. The model after the
stream is kept too (`records.scenario_model`: its modules, classifier and routers' statistics), so
`tosca predict RUN IMAGES` classifies new images with it (`predict_scenario_images`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from featcache.store import check_readable, open_unchanged, resolve_store
from tosca_foundation.errors import UserError, UserValueError
from tosca_foundation.files import read_json
from tosca_foundation.folders import marked_kind
from tosca_heads.applied.scenario_point import ScenarioPoint, point_identity
from tosca_heads.applied.scenario_runs import (
    plan_classes,
    scenario_values,
    store_labels,
    with_split,
)
from tosca_heads.applied.scenario_validation import HeldOutReading
from tosca_heads.applied.tosca_scenario import TOLD, TOSCA_DEFAULTS, check_router_rows
from tosca_heads.method.class_names import said_class
from tosca_heads.method.protocol import DEFAULT_ORDER_SEED, ValidationConfig
from tosca_heads.method.recipe import TrainConfig, recipe
from tosca_heads.method.scenarios import Scenario, scenario
from tosca_heads.records import cell, claim
from tosca_heads.records.claim import FolderKind
from tosca_heads.records.scenario_folder import (
    check_cells,
    kept_answers,
    read_answers,
    scenario_asked,
    write_result,
)
from tosca_heads.records.scenario_model import MODEL_CELL, ScenarioModel, write_model
from tosca_heads.requests.command_requests import FitRequest
from tosca_heads.routers import ROUTERS, is_honest, resolve_routers
from tosca_heads.trackers import end_failed, open_tracking
from tosca_heads.trackers.events import flat_params, run_files

RUN_FILE = (
    "run.json"  # what the run was asked (the store, the scenario, the recipe, the split): one per folder
)


def read_run_file(folder: Path) -> dict[str, Any]:
    return read_json(Path(folder) / RUN_FILE, "scenario run's run.json", REDO)


# a run folder of its own kind: a class-incremental run is never written into, nor read as one; a
# folder asked another scenario, recipe or split is refused in one line (pass another --run)
SCENARIO_RUN = FolderKind(
    name="scenario-run",
    flag="--run",
    noun="scenario run",
    config_file=RUN_FILE,
    read_config=read_run_file,
    check_files=check_cells,
)
SPLIT_FIELDS = ("init_cls", "increment", "order_seed")
REDO = "delete the run folder to fit it again"


def is_scenario_run(folder: Path) -> bool:
    """Whether a folder is a run `tosca fit --scenario` made (its marker says so)."""
    return Path(folder).is_dir() and marked_kind(Path(folder)) == SCENARIO_RUN.name


@dataclass
class ScenarioRun:
    """A scenario run read from its cells: the folder, the scenario and its plan in one line, each
    router's figures and accuracy after each step on test (and on validation where rows were held
    out), the seconds of its one training, and whether the cells were reused."""

    run_dir: Path
    scenario: str
    line: str
    figures: dict[str, dict[str, float]]
    curves: dict[str, list[float]]
    validation: dict[str, dict[str, float]] | None
    seconds: float
    reused: bool = False
    recipe: dict[str, Any] = field(default_factory=dict)

    @property
    def rows(self) -> list[dict[str, Any]]:
        """One row per router and split (`tosca routers --json`): the figures as fractions."""
        rows = [{"router": r, "split": "test", **f, "seconds": self.seconds} for r, f in self.figures.items()]
        for r, f in (self.validation or {}).items():
            rows.append({"router": r, "split": "validation", **f, "seconds": self.seconds})
        return rows

    def figures_with_curves(self) -> dict[str, dict[str, Any]]:
        """Each router's test figures with its accuracy after each step (`A_t`)."""
        return {r: {**f, "A_t": self.curves[r]} for r, f in self.figures.items()}

    def metrics(self) -> dict[str, Any]:
        """What `--json` prints: the scenario, its plan, each router's figures with its A_t, the
        validation figures (None without a split) and the seconds."""
        return {
            "scenario": self.scenario,
            "plan": self.line,
            "routers": self.figures_with_curves(),
            "validation": self.validation,
            "seconds": self.seconds,
            "recipe": self.recipe,
        }


@dataclass(frozen=True)
class _Asked:
    """A scenario run's question: the point to run and each router's cell."""

    point: ScenarioPoint
    kind: type[Scenario]
    answered: tuple[str, ...]
    train: TrainConfig


def scenario_fit(request: FitRequest, on_plan: Callable[[str], None] | None = None) -> ScenarioRun:
    """`tosca fit --scenario NAME`: every check before anything is written (what a scenario fit does
    not do, the recipe, the routers, the store, the scenario's values and what the store can serve
    with the validation rows held out), the plan said, the run folder claimed, each router's cell
    reused where asked the same or the point run and written, then the run read back."""
    spell = request.spell
    kind = scenario(request.scenario, spell("scenario"))
    _refuse_cil_only(request, kind.name)
    train = recipe(request.preset, request.recipe, spell)
    validation = ValidationConfig(request.val_fraction, request.val_seed)
    validation.validate(spell)
    routers = _routers(request)
    # the trackers asked for, each checked now: a WHERE that cannot serve is one line before any work
    tracking = open_tracking(request.log, request.runs_root, spell("log"))
    store = resolve_store(request.store, request.model, request.dataset, request.cache_dir)
    check_readable(store, values=True)
    values = _values(request, kind)
    train = train.resolved(store.dim)
    answered = (TOLD,) if kind.told_task else routers
    params = {**asdict(train), "routers": routers}
    point = ScenarioPoint(
        str(store.path.resolve()),
        store.fingerprint,
        kind.name,
        tuple(sorted(values.items())),
        request.read_as,
        validation,
        tuple(sorted(params.items())),
    )
    reading = point.reading(store)  # the scenario's refusals: one line, before anything is written
    order, names = plan_classes(reading.joined, store_labels(store, request.read_as), store)
    check_router_rows(reading.joined, {"routers": routers}, lambda i: said_class(order[i], names))
    ident = store.identity
    key = point_identity(train, kind.name, values, request.read_as, validation)
    folder = request.run or request.runs_root / (
        f"{ident['dataset']['name']}-{ident['backbone']['alias']}-{kind.name}-{key[:10]}"
    )
    config = {
        "store": {"path": point.store_path, "fingerprint": store.fingerprint},
        "scenario": {"name": kind.name, "values": dict(sorted(values.items())), "read_as": request.read_as},
        "validation": validation.record(),
        "recipe": asdict(train),
    }
    if request.write:
        claim.check(folder, SCENARIO_RUN, config)
    if on_plan is not None:
        on_plan(f"scenario {reading.test.describe()}; {validation.said()}; answered by {', '.join(answered)}")
    asked = _Asked(point, kind, answered, train)
    tracked = tracking.start(
        folder.name,
        {"command": "fit", "run": str(folder) if request.write else "", **flat_params(config)},
    )
    try:
        made = _fit(request.write, folder, config, asked, reading, store)
    except BaseException:
        end_failed(tracked)
        raise
    if tracked is not None:
        record = {"routers": made.figures_with_curves(), "validation": made.validation or {}}
        tracked.finish(record, _files(folder))
    return made


def _files(folder: Path) -> list[Path]:
    """A scenario run's files for a tracker: run.json, and each router's cell's (none unwritten)."""
    cells = (
        sorted(p for p in folder.iterdir() if p.is_dir() and not p.is_symlink()) if folder.is_dir() else []
    )
    return [f for place in (folder, *cells) for f in run_files(place)]


def _fit(
    write: bool, folder: Path, config: dict[str, Any], asked: _Asked, reading: HeldOutReading, store: Any
) -> ScenarioRun:
    """The point run (nothing written without `write`), or its kept cells read where each router's
    was asked the same; each router's cell written as the point ends."""
    point, answered = asked.point, asked.answered
    if not write:
        start = time.perf_counter()
        answers = point.run()
        return _result(folder, asked, reading, answers, time.perf_counter() - start, False)
    with claim.claim_folder(folder, SCENARIO_RUN, config):
        kept = {
            r: kept_answers(folder / _cell(r), _cell_asked(store, asked, r), reading.joined) for r in answered
        }
        modelled = cell.reusable(folder / MODEL_CELL, _model_asked(store, asked), REDO)
        if modelled and all(k is not None for k in kept.values()):
            first = next(iter(kept.values()))
            answers = {r: k[0] for r, k in kept.items() if k is not None}
            return _result(folder, asked, reading, answers, first[1] if first else 0.0, True)
        start = time.perf_counter()
        keep: dict[str, Any] = {}
        answers = point.run_keeping(keep)
        seconds = time.perf_counter() - start
        for r in answered:
            write_result(folder / _cell(r), answers[r], seconds, _cell_asked(store, asked, r), SCENARIO_RUN)
        model = _model_of(keep, reading, store, point.read_as)
        write_model(folder / MODEL_CELL, model, _model_asked(store, asked), seconds)
    return _result(folder, asked, reading, answers, seconds, False)


def _model_asked(store: Any, asked: _Asked) -> dict[str, Any]:
    """The model cell's question: its routers' cells' without a router (one model serves them all)."""
    found = _cell_asked(store, asked, "")
    found["params"] = {k: v for k, v in found["params"].items() if k != "router"}
    return {**found, "kind": "scenario-run-model"}


def _model_of(keep: dict[str, Any], reading: HeldOutReading, store: Any, read_as: str) -> ScenarioModel:
    """What a scenario run keeps for `tosca predict` (`records.scenario_model`), from the estimator
    after the stream: its modules, classifier and routers' statistics, each unit's row count, and
    each classifier row's class as the store labels and names it (a reading of other labels, such
    as CIFAR-100's superclasses, by their numbers)."""
    model, row_class = keep["model"], keep["row_class"]
    trainer = model.trainer_
    train = model.recipe().resolved(model.n_features_in_)
    order, names = plan_classes(reading.joined, store_labels(store, read_as), store)
    labels = order[row_class[model.labels_in_order_]]
    return ScenarioModel(
        dim=int(model.n_features_in_),
        r=int(train.r or 0),
        s=int(train.s or 0),
        flow=train.flow,
        modules=tuple(m[0] for m in trainer.modules_),
        weight=trainer.weight_,
        sigma=trainer.sigma_,
        sizes=tuple(int(n) for n in (model.stream_.sizes or model._even_sizes())),
        statistics=model.statistics_.state_dict(),
        labels=tuple(int(v) for v in labels),
        names=tuple(str(names[v]) if names is not None and 0 <= v < len(names) else str(v) for v in labels),
    )


def _refuse_cil_only(request: FitRequest, name: str) -> None:
    """One line for what only a class-incremental fit does."""
    spell = request.spell
    if request.task is not None:
        raise UserValueError(
            f"a fit under {spell('scenario')} {name} learns its whole stream; leave out {spell('task')}"
        )
    if request.device not in ("auto", "cpu"):
        raise UserValueError(
            f"{spell('scenario')} {name} runs on the CPU (one thread: the same numbers at any thread count); "
            f"leave out {spell('device')} {request.device}"
        )


def _routers(request: FitRequest) -> tuple[str, ...]:
    """The routers asked (default: every honest one but the on-request ones); a reference is never
    a scenario's result."""
    names = resolve_routers(request.router, request.spell("router"))
    if request.router is None or request.router.strip() == "all":
        names = [n for n in names if is_honest(n)]
    for name in names:
        if not is_honest(name):
            honest = ", ".join(n for n in ROUTERS if is_honest(n))
            raise UserValueError(
                f"{request.spell('router')} {name} is a reference, never a scenario's result (honest: {honest})"
            )
    return tuple(names)


def _values(request: FitRequest, kind: type[Scenario]) -> dict[str, Any]:
    """The scenario's values: --set NAME=VALUE texts, the API's `scenario_values`, and the
    class-incremental split's flags where the scenario declares them (til; the class order's
    default seed is no value given)."""
    values = scenario_values(kind.name, tuple(request.set_values))
    values.update(request.scenario_values)
    given = {name: getattr(request, name) for name in SPLIT_FIELDS}
    if given["order_seed"] == DEFAULT_ORDER_SEED:
        given["order_seed"] = None
    return with_split(kind, values, given, request.spell)


def _cell(router: str) -> str:
    return router.replace(" ", "-")


def _cell_asked(store: Any, asked: _Asked, router: str) -> dict[str, Any]:
    """One router's cell: the scenario's cell of TOSCA with the recipe, the router, TOSCA's scenario
    choices, the validation split, the reading and the store's path (what `read_scenario_run` reopens)."""
    point = asked.point
    params = {
        **asdict(asked.train),
        "router": router,
        **{k: TOSCA_DEFAULTS[k] for k in ("recurring", "module_per")},
    }
    base = scenario_asked(store, asked.kind.name, dict(point.values), "tosca", params)
    base["store"] = {**base["store"], "path": point.store_path}
    return {**base, "kind": "scenario-run", "validation": point.validation.record(), "read_as": point.read_as}


def _result(
    folder: Path,
    asked: _Asked,
    reading: HeldOutReading,
    answers: dict[str, list[np.ndarray]],
    seconds: float,
    reused: bool,
) -> ScenarioRun:
    """The figures of each router on test (and validation) from the joined reading's answers."""
    figures, curves, validation = {}, {}, {}
    for router in asked.answered:
        held, test = reading.split(answers[router])
        figures[router] = asked.kind.figures_of(reading.test, test)
        curves[router] = [
            float((a == reading.test.test_ids[s.eval_rows]).mean())
            for a, s in zip(test, reading.test.steps, strict=True)
        ]
        if held is not None and reading.validation is not None:
            validation[router] = asked.kind.figures_of(reading.validation, held)
    return ScenarioRun(
        folder,
        asked.kind.name,
        reading.test.describe(),
        figures,
        curves,
        validation or None,
        seconds,
        reused,
        asdict(asked.train),
    )


def _question(asked: dict[str, Any]) -> dict[str, Any]:
    """What a cell was asked, less what a later version of tosca may write otherwise (the versions
    that made it, the file's format): a run fit before an upgrade is still read."""
    return {k: v for k, v in asked.items() if k not in ("versions", "format")}


def read_scenario_run(run_dir: Path) -> ScenarioRun:
    """A scenario run read back: every router's cell checked (finished, whole; one edited since is
    one line), the store reopened at its recorded path (unchanged since), the plan made again, and
    each router's figures worked out from its answers. Trains nothing."""
    run_dir = Path(run_dir)
    if not is_scenario_run(run_dir):
        raise UserError(f"not a scenario run: {run_dir} (made by `tosca fit --scenario NAME`)")
    check_cells(run_dir)
    order = {_cell(r): i for i, r in enumerate((*ROUTERS, TOLD))}  # the registry's order, as a fit says them
    cells = sorted(
        (p for p in run_dir.iterdir() if p.is_dir() and p.name != MODEL_CELL and (p / cell.DONE).exists()),
        key=lambda p: (order.get(p.name, len(order)), p.name),
    )
    if not cells:
        raise UserError(
            f"scenario run {run_dir} holds no finished router yet; fit it again with `tosca fit --run {run_dir}`"
        )
    first = read_json(cells[0] / cell.ASKED, "cell's asked.json", REDO)
    try:
        store_block, name = first["store"], first["scenario"]["name"]
        values, read_as = dict(first["scenario"]["values"]), str(first["read_as"])
        validation = ValidationConfig(
            float(first["validation"]["fraction"]), int(first["validation"]["seed"])
        )
        train = TrainConfig(
            **{k: v for k, v in first["params"].items() if k in TrainConfig.__dataclass_fields__}
        )
        path, fingerprint = str(store_block["path"]), str(store_block["fingerprint"])
    except (KeyError, TypeError, ValueError):
        raise UserError(
            f"{cells[0] / cell.ASKED} is not a scenario run's cell (edited or damaged); {REDO}"
        ) from None
    store = open_unchanged(path, fingerprint, "the run was fit", "fit it again with `tosca fit --scenario`")
    kind = scenario(name)
    routers = tuple(
        str(read_json(c / cell.ASKED, "cell's asked.json", REDO).get("params", {}).get("router", ""))
        for c in cells
    )
    params = {**asdict(train), "routers": tuple(r for r in routers if r != TOLD) or TOSCA_DEFAULTS["routers"]}
    point = ScenarioPoint(
        path,
        fingerprint,
        name,
        tuple(sorted(values.items())),
        read_as,
        validation,
        tuple(sorted(params.items())),
    )
    reading = point.reading(store)
    asked = _Asked(point, kind, routers, train)
    answers, seconds = {}, 0.0
    for router, c in zip(routers, cells, strict=True):
        wanted = _cell_asked(store, asked, router)
        found = cell.asked_of(c, REDO)
        if _question(found) != _question(wanted):
            raise UserError(
                f"{c} was asked something else than the run's other cells (edited or damaged); {REDO}"
            )
        answers[router] = read_answers(c, reading.joined)  # checked against the plan's steps
        seconds = cell.read_cell(c, REDO).seconds
    return _result(run_dir, asked, reading, answers, seconds, True)
