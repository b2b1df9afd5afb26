"""Stage 2 from Python: fit, evaluate and sweep on a store, predict from features or images, the
baselines, suites, and the registries for what lives outside the package (routers, baselines,
per-router metrics, trackers): a plug-in imports them from here, a path that does not move with
the house.
Re-exported as `tosca_heads.fit`, ... (loaded on first use). Results are plain objects:
`RunResult.metrics()` is the dict metrics.json holds, sweeps and baselines come as pandas frames,
predictions as numpy arrays.

The examples run as doctests on tiny data (tests/test_api.py): `STORE` is a small store on disk
(6 classes, 32-dimensional features), `TMP` an empty folder.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import typing
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from featcache.store import FeatureStore
from tosca_foundation.arguments import as_path, check_types, shown
from tosca_foundation.devices import check_device_name
from tosca_foundation.errors import UserError, UserTypeError, UserValueError
from tosca_foundation.folders import check_outputs
from tosca_foundation.names import as_keyword, check_keywords, did_you_mean
from tosca_heads.applied.estimators import BaselineClassifier, TOSCAClassifier, validation_split
from tosca_heads.applied.predict import Predictions, RunPredictor
from tosca_heads.conformance import Conformance, NonConforming, check_baseline, check_router
from tosca_heads.method.baseline_registry import (
    BASELINES,
    Interval,
    Options,
    Param,
    default_baselines,
    register_baseline,
)
from tosca_heads.method.metrics import register_metric
from tosca_heads.method.protocol import DEFAULT_ORDER_SEED
from tosca_heads.method.recipe import FIELD_TYPES
from tosca_heads.records.run_folder import RunResult
from tosca_heads.requests.command_requests import SWEEP_FLAGS, SWEEP_VAL_FRACTION
from tosca_heads.routers import ROUTERS, ReferenceView, Router, StageView, register_router
from tosca_heads.studies.suite import SuiteResult, SuiteSpec, load_suite, parse_suite, run_suite
from tosca_heads.trackers.logger_registry import Logger, register_logger

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from tosca_heads.applied.scenario_fit import ScenarioRun

R = TypeVar("R")  # a request (tosca_heads.requests.command_requests)

__all__ = [
    "BASELINES",
    "ROUTERS",
    "BaselineClassifier",
    "Conformance",
    "Interval",
    "Logger",
    "NonConforming",
    "Options",
    "Param",
    "Predictions",
    "ProtocolWarning",
    "ReferenceView",
    "Router",
    "RunPredictor",
    "RunResult",
    "StageView",
    "SuiteResult",
    "SuiteSpec",
    "TOSCAClassifier",
    "UserError",
    "UserTypeError",
    "UserValueError",
    "baselines",
    "check_baseline",
    "check_router",
    "default_baselines",
    "evaluate",
    "fit",
    "load_run",
    "load_suite",
    "parse_suite",
    "predict",
    "register_baseline",
    "register_logger",
    "register_metric",
    "register_router",
    "run_suite",
    "scenario",
    "sweep",
    "validation_split",
]


GRID_KEYS = tuple(f.key or f.name for f in SWEEP_FLAGS)  # what a sweep's grid can vary: `seed`, not `seeds`
RECIPE_KEYS = tuple(FIELD_TYPES)  # what `fit(**recipe)` takes: the recipe's flags, and eta_min


def _request(kind: type[R], function: str, arguments: dict[str, Any]) -> R:
    """The request `kind` built from an API function's arguments (its `locals()`: the function's
    parameters are the request's fields, by name, with the command's defaults), as the command
    line builds it: each of its field's type (`check_types`: one line naming the keyword, where the
    command line's parser refuses a flag's), a path given as text is a Path, a list of values a
    tuple (one name given as text: a list of that name, not of its letters), a store already opened
    stays one; refusals name Python's keywords (`spell`); every folder it writes is checked before
    any work (`check_outputs`)."""
    hints = typing.get_type_hints(kind)
    given: dict[str, Any] = {"spell": as_keyword}
    for f in dataclasses.fields(kind):
        if f.name not in arguments:
            continue
        value, hint = arguments[f.name], hints[f.name]
        listed = tuple in {typing.get_origin(h) for h in (hint, *typing.get_args(hint))}
        if listed and isinstance(value, str):
            value = (value,)
        if not isinstance(value, FeatureStore):
            check_types(function, kind, {f.name: value})
        if isinstance(value, (str, os.PathLike)) and Path in (hint, *typing.get_args(hint)):
            value = Path(value)
        elif value is not None and listed:
            value = tuple(value)
        given[f.name] = value
    request = kind(**given)
    check_outputs(request)
    return request


def _warn(protocol: Any) -> None:
    """The protocol's warnings (figures that will mean little), as Python warnings pointing at the
    user's line that asked for the work (however deep in tosca the protocol was said)."""
    frame, level = sys._getframe(0), 1
    while frame is not None and frame.f_globals.get("__name__", "").partition(".")[0] in _OURS:
        frame, level = frame.f_back, level + 1
    for line in protocol.warnings:
        warnings.warn(line, ProtocolWarning, stacklevel=level)


_OURS = ("tosca_heads", "featcache", "tosca_foundation")  # the packages whose frames a warning skips


class ProtocolWarning(UserWarning):
    """A figure the protocol makes mean little (few test images per task or class)."""


def fit(
    store: FeatureStore | str | Path,
    *,
    task: int | None = None,
    run: str | Path | None = None,
    write: bool = True,
    preset: str = "paper",
    init_cls: int | None = None,
    increment: int | None = None,
    order_seed: int = DEFAULT_ORDER_SEED,
    val_fraction: float = 0.0,
    val_seed: int = 0,
    device: str = "auto",
    log: Sequence[str] = (),
    router: str | None = None,
    scenario: str = "cil",
    scenario_values: Mapping[str, Any] | None = None,
    read_as: str = "",
    **recipe: Any,
) -> RunResult | ScenarioRun:
    """`tosca fit`, through the same request and function, with the same defaults: one LuCA module
    per task, the cosine classifier and every router, on the store's cached features: tasks 0..`task`
    (default: all). `recipe` holds fit flags over the `preset` (r, s, l1, lr, epochs, batch_size,
    flow, seed, ...). The
    split defaults as the command's does (the dataset's paper split; without one, at most 10 equal
    tasks). `val_fraction` holds out that share of each class's training images as a validation
    split, scored beside test (0, the default: the paper's protocol). The run folder is `run` (a
    matching one resumed), or the command's default under runs/; `write=False` keeps it in memory.
    `log` sends the run to trackers, as `--log`: ["mlflow", "tensorboard"] (runs/mlflow/, runs/tensorboard/).
    `router`, as `--router`: an on-request router named there ("fecam", "klda", "randumb", or
    "all") is computed besides every other.
    `scenario` (default `cil`): TOSCA learns that scenario's stream instead (til, fscil, blurry,
    dil; its values as `scenario_values`, `read_as` another labelling), every honest router from one
    training, kept as a scenario run (`evaluate` reads it); returns its figures (`ScenarioRun`:
    `metrics()`, `figures` per router).

    >>> result = fit(STORE, write=False, init_cls=2, increment=2, epochs=2, batch_size=8)
    >>> metrics = result.metrics()
    >>> metrics["finished_tasks"], sorted(metrics["routers"])[:4]
    (3, ['batch', 'batch_shuffled', 'energy', 'entropy'])
    >>> 0.0 <= metrics["routers"]["lda"]["A_last"] <= 1.0
    True
    """
    from tosca_heads.requests.command_requests import FitRequest
    from tosca_heads.running.runs import fit as fit_command

    check_keywords(fit, recipe, RECIPE_KEYS)
    if scenario_values is not None and (
        not isinstance(scenario_values, Mapping) or not all(isinstance(k, str) for k in scenario_values)
    ):
        raise UserTypeError(f"scenario_values must be a mapping of names to values, got {scenario_values!r}")
    request = _request(FitRequest, "fit", {**locals(), "scenario_values": dict(scenario_values or {})})
    from tosca_heads.applied.scenario_fit import scenario_fit
    from tosca_heads.applied.scenario_runs import beyond_cil

    if beyond_cil(request):
        return scenario_fit(request)
    return fit_command(request, on_plan=_warn)


def evaluate(run: str | Path, device: str = "auto", router: str | None = None) -> RunResult | ScenarioRun:
    """`tosca eval`: re-evaluate a run folder from its saved modules (every router, and the
    on-request ones `router` names, as `--router`), rewriting its metrics. A scenario run (`fit`
    with `scenario=`) is read from its kept answers: its figures, nothing trained.

    >>> first = fit(STORE, run=TMP / "run", init_cls=2, increment=2, epochs=1, batch_size=8)
    >>> again = evaluate(TMP / "run")
    >>> again.metrics()["routers"]["entropy"]["A_t"] == first.metrics()["routers"]["entropy"]["A_t"]
    True
    """
    from tosca_foundation.devices import resolve_device
    from tosca_heads.applied.scenario_fit import is_scenario_run, read_scenario_run
    from tosca_heads.routers import on_request, resolve_routers
    from tosca_heads.running.group import evaluate_run

    folder = as_path("evaluate", "run", run)
    check_device_name(device, "device")
    if is_scenario_run(folder):
        return read_scenario_run(folder)
    routers = on_request(resolve_routers(router, "router"))
    return evaluate_run(folder, device=resolve_device(device), routers=routers)


def sweep(
    store: FeatureStore | str | Path,
    grid: dict[str, Sequence[Any]],
    out: str | Path | None = None,
    *,
    preset: str = "paper",
    jobs: int | None = None,
    group: int | None = None,
    scheduler: str | None = None,
    init_cls: int | None = None,
    increment: int | None = None,
    val_fraction: float = SWEEP_VAL_FRACTION,
    val_seed: int = 0,
    device: str = "auto",
    rank_by: str | None = None,
    keep_modules: str | Path | None = None,
    log: Sequence[str] = (),
    scenario: str = "cil",
    scenario_values: Mapping[str, Any] | None = None,
    read_as: str = "",
    **fixed: Any,
) -> pd.DataFrame:
    """`tosca sweep`, through the same request and function, with the same defaults: every point of
    the grid (flag -> values; `seed` for seeds) is a full run; `fixed` holds flags every point
    shares (one value each, as a one-value flag of the command). It holds out a validation split
    (`val_fraction`, 10% of each class's training images by default) and ranks on it. Resumable in
    `out` (default: the command's, under runs/); `preset` gives every flag not swept, `group` how
    many compatible points train together (default: as the command's), `keep_modules` a folder
    to keep each point's run folder in, `log` the trackers (a parent run, a child per point).
    Returns results.csv as a frame, one row per point, split and router (sweep.json records what
    was chosen, on which split). `scenario` (default `cil`): every point learns that scenario's
    stream instead (til, fscil, blurry, dil; its values as `scenario_values`, one each; `read_as`
    another labelling of the store), ranked on the validation split read the same way; the frame
    has a row per point, router and split, its figures the scenario's (`studies.scenario_sweep`).

    >>> frame = sweep(STORE, {"r": [2, 4], "seed": [0]}, TMP / "sweep", jobs=1, init_cls=2, increment=2, epochs=1, batch_size=8)
    >>> computed = [name for name in ROUTERS if not ROUTERS[name].on_request]  # fecam, klda, randumb: where named
    >>> sorted(set(frame["r"])), sorted(set(frame["split"])), len(frame) == 2 * 2 * len(computed)
    ([2, 4], ['test', 'validation'], True)
    """
    from tosca_heads.requests.command_requests import SweepRequest
    from tosca_heads.studies.sweeps import sweep as sweep_command

    check_keywords(sweep, fixed, GRID_KEYS)
    # the command's grid defaults (seed 0, order seed 1993), so both faces name the same grid
    flags: dict[str, Any] = {f.key or f.name: f.default for f in SWEEP_FLAGS if f.default is not None}
    flags.update({**_grid_lists(grid), **{k: [v] for k, v in fixed.items()}})
    for name, value in (("init_cls", init_cls), ("increment", increment)):
        if value is not None:
            flags[name] = [value]
    if scenario_values is not None and (
        not isinstance(scenario_values, Mapping) or not all(isinstance(k, str) for k in scenario_values)
    ):
        raise UserTypeError(f"scenario_values must be a mapping of names to values, got {scenario_values!r}")
    arguments = {**locals(), "grid": flags, "scenario_values": dict(scenario_values or {})}
    request = _request(SweepRequest, "sweep", arguments)
    from tosca_heads.applied.scenario_runs import beyond_cil
    from tosca_heads.studies.scenario_sweep import scenario_sweep

    if beyond_cil(request):
        return scenario_sweep(request).frame
    return sweep_command(request, on_start=lambda plan: _warn(plan.fit.protocol)).frame


def _grid_lists(grid: Any) -> dict[str, list[Any]]:
    """A sweep's grid as key -> list of values, each key one a sweep varies (`GRID_KEYS`, with the
    closest one where it is not); a key given one value instead of a list of them (`{"r": "48"}`
    would otherwise be swept as r = 4 and r = 8), or no value, is one line quoting it. The values'
    types and ranges are checked with every point, as the command's are (`sweeps.grid_points`)."""
    if not isinstance(grid, dict):
        raise UserTypeError(
            f"sweep() grid must be a dict of key -> list of values, got {type(grid).__name__}"
        )
    lists = {}
    for name, values in grid.items():
        if name not in GRID_KEYS:
            raise UserValueError(
                f"sweep() grid key {name!r} is not one a sweep varies{did_you_mean(name, GRID_KEYS)}: "
                f"valid: {', '.join(GRID_KEYS)}"
            )
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
            raise UserTypeError(
                f"grid entry {name!r} must be a list of values, got {values!r}: for one value, give a list "
                "holding it"
            )
        if not values:
            raise UserValueError(
                f"grid entry {name!r} is an empty list: give at least one value, or leave {name!r} out"
            )
        lists[name] = list(values)
    return lists


def load_run(run: str | Path, device: str = "auto") -> RunPredictor:
    """A finished run, ready to classify frozen features (`predict`), nothing trained; a scenario
    run's model after its stream (each answer its class's store label).

    >>> _ = fit(STORE, run=TMP / "loaded", init_cls=2, increment=2, epochs=1, batch_size=8)
    >>> predictor = load_run(TMP / "loaded")
    >>> predictor.tasks_
    3
    """
    from tosca_foundation.devices import resolve_device
    from tosca_heads.applied.scenario_fit import is_scenario_run
    from tosca_heads.applied.scenario_predict import scenario_predictor
    from tosca_heads.records.run_folder import open_run_store, read_run_config

    folder = as_path("load_run", "run", run)
    check_device_name(device, "device")
    if is_scenario_run(folder):  # `fit(..., scenario=)`'s run: its kept model
        return scenario_predictor(folder, resolve_device(device))
    config = read_run_config(folder)
    store = open_run_store(config, folder)
    names = store.identity["dataset"].get("class_names")
    return RunPredictor(
        folder,
        store.shape.classes,
        resolve_device(device),
        None if names is None else [str(n) for n in names],
    ).load()


def predict(
    run: str | Path | RunPredictor, features: np.ndarray, *, router: str | None = None, device: str = "auto"
) -> Predictions:
    """Classify frozen features [n, d] with a run and one honest router (default: the run's best
    honest router by A_last on its validation split, else on test: `chosen_on` says which). The
    answer is in the dataset's terms: `classes` are the store's label ids (as `store.labels(split)`
    holds them) and `class_names` their names; `incremental_classes` are positions in the run's
    class order. For images, embed them first with the run's store's backbone:
    `featcache.embed(store, images)`.

    >>> _ = fit(STORE, run=TMP / "predicting", init_cls=2, increment=2, epochs=1, batch_size=8)
    >>> from featcache import open_store
    >>> store = open_store(STORE)
    >>> found = predict(TMP / "predicting", store.features("test"), router="lda")
    >>> accuracy = float((found.classes == store.labels("test")).mean())  # the dataset's label ids
    >>> found.classes.shape, found.chosen_on, 0.0 <= accuracy <= 1.0
    ((48,), 'given', True)
    """
    from tosca_heads.applied.predict import default_router
    from tosca_heads.records.run_cell import read_run

    if router is not None and not isinstance(router, str):
        raise UserTypeError(f"predict() keyword router={shown(router)} must be a router's name or None")
    predictor = run if isinstance(run, RunPredictor) else load_run(run, device)
    if router is None:
        chosen, chosen_on = default_router(read_run(predictor.run_dir).metrics)
        return predictor.predict(features, chosen, chosen_on)
    return predictor.predict(features, router)


def baselines(
    store: FeatureStore | str | Path,
    methods: Sequence[str] | None = None,
    *,
    init_cls: int | None = None,
    increment: int | None = None,
    order_seed: int | None = None,
    val_fraction: float | None = None,
    val_seed: int | None = None,
    run: str | Path | None = None,
    with_tosca: bool = True,
    out: str | Path | None = None,
    device: str = "auto",
    log: Sequence[str] = (),
    scenario: str = "cil",
    scenario_values: Mapping[str, Any] | None = None,
    **params: Any,
) -> pd.DataFrame:
    """`tosca baselines`, through the same request and function, with the same defaults: the
    baselines under TOSCA's protocol on the same store (any registered one by name) beside TOSCA's
    routers (a given `run`, or the paper preset's, fitted if missing; `with_tosca=False`: the
    baselines alone), written into a baselines folder (`out`, default the command's under runs/).
    One row per method (and TOSCA router) with A_bar, A_last, forgetting, parameters, seconds and
    A_t on test, `val_A_last` on the validation split (with `val_fraction`), and `reference` (why a
    row is no honest result: the joint probe sees every task at once, `oracle` is told the task).
    `scenario` (default `cil`, the table above): another scenario's table instead (til, fscil,
    blurry, dil; docs/scenarios.md), its values as `scenario_values` (`{"shots": 5}`), one row per
    method with the scenario's figures (fractions), `seconds` and the plan's line, written into a
    scenario folder; a method that cannot run it is refused in one line before any work.
    With `run`, the split and validation split not given are the run's (else the dataset's split,
    class order seed 1993, no validation split). Each baseline's own parameters are keywords
    METHOD_NAME, as its class declares them (`ranpac_projection_dim=`, `ranpac_seed=`; the command
    line's --ranpac-projection-dim, a suite's `ranpac_projection_dim`): a name no baseline declares
    is refused in one line. `methods` None: those whose class runs by default (`default_baselines()`,
    as `tosca baselines` and a suite without `methods`).

    >>> frame = baselines(STORE, ["simplecil", "ranpac"], init_cls=2, increment=2, ranpac_projection_dim=64, with_tosca=False, out=TMP / "base")
    >>> list(frame["method"]), bool((frame["A_last"] <= 1).all())
    (['simplecil', 'ranpac'], True)
    """
    from tosca_heads.applied.scenario_runs import beyond_cil
    from tosca_heads.method.baseline_registry import key_of, params_of
    from tosca_heads.records.baselines_folder import comparison_frame
    from tosca_heads.requests.command_requests import BaselinesRequest
    from tosca_heads.studies.comparison import compare
    from tosca_heads.studies.scenario_comparison import scenario_compare

    arguments = locals()
    declared = [key_of(m, p) for m in BASELINES for p in params_of(m)]  # any registered baseline's
    check_keywords(baselines, [k for k in params if k not in declared], declared)
    given = {k: v for k, v in arguments.items() if k != "scenario_values"}
    request = _request(BaselinesRequest, "baselines", given)
    if scenario_values is not None:
        if not isinstance(scenario_values, Mapping) or not all(isinstance(k, str) for k in scenario_values):
            raise UserTypeError(
                f"scenario_values must be a mapping of names to values, got {scenario_values!r}"
            )
        request = dataclasses.replace(request, scenario_values=dict(scenario_values))
    if beyond_cil(request):
        import pandas as pd

        made = scenario_compare(request)
        return pd.DataFrame(
            [{"method": r.method, **r.figures, "seconds": r.seconds, "plan": r.plan} for r in made.results]
        )
    return comparison_frame(compare(request, on_start=_warn).results)


def scenario(
    store: FeatureStore | str | Path,
    name: str = "cil",
    methods: Sequence[str] = ("tosca", "simplecil"),
    *,
    read_as: str = "",
    routers: Sequence[str] = ("lda",),
    recurring: str = "task_rows",
    module_per: str = "task",
    later_modules: str = "train",
    **values: Any,
) -> pd.DataFrame:
    """`tosca scenario`: the methods under one scenario of a store (cil, til, fscil, blurry, dil;
    docs/scenarios.md), the scenario's parameters as keywords (`shots=5`, `blurry=0.1`), each
    checked against its rule in one line before any learning. One row per method (TOSCA: one per
    router of `routers`, from one training): its figures (fractions), `seconds` and the plan's
    line. `recurring` and `module_per`: TOSCA's choices where a class recurs or a task has
    several evaluation points; `later_modules`: each task after the first trains its own module
    ("train") or reuses the first's, frozen ("first": a few-shot session's alternative)
    (docs/method.md, "Scenarios beyond class-incremental").

    >>> frame = scenario(STORE, "til", ["simplecil"], init_cls=2, increment=2)
    >>> list(frame["method"]), bool(frame["A_last"].between(0, 1).all())
    (['simplecil'], True)
    """
    import pandas as pd

    from tosca_heads.applied.scenario_runs import run_scenario
    from tosca_heads.applied.tosca_scenario import tosca_options

    tosca = {
        "routers": routers,
        "recurring": recurring,
        "module_per": module_per,
        "later_modules": later_modules,
    }
    if "tosca" in methods:
        tosca_options(tosca, as_keyword)  # checked in Python's words, before anything is read
    results = run_scenario(
        store, name, tuple(methods), values, {"tosca": tosca}, read_as=read_as, spelling="scenario name"
    )
    return pd.DataFrame(
        [
            {"method": r.method, "router": r.router, **r.figures, "seconds": r.seconds, "plan": r.plan}
            for r in results
        ]
    )
