"""`tosca baselines --scenario NAME` for a scenario other than `cil` (issue 56 point 1): the
baselines (and TOSCA, unless --no-tosca) under that scenario of the store, run through the one
scenario path (`applied.scenario_runs`), each method kept as a cell of a scenario folder
(`records.scenario_folder`: a cell of another scenario or other values is never reused), and the
table written beside them under a title naming the scenario.

`cil` never comes here: its table is `studies.comparison`'s, byte for byte what it was (its cells'
asked.json carry no scenario key, so the cells written before scenarios stay reusable).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from featcache.store import FeatureStore, resolve_store
from featcache.store.object_store import missing_here
from tosca_foundation.errors import UserValueError
from tosca_foundation.text import tell
from tosca_heads.applied.scenario_runs import (
    TOSCA,
    CheckedScenario,
    ScenarioResult,
    checked_scenario,
    result_of,
    run_checked,
    scenario_values,
    with_split,
)
from tosca_heads.applied.tosca_scenario import TOSCA_DEFAULTS, answered_by
from tosca_heads.method.baseline_registry import arguments
from tosca_heads.method.scenarios import scenario
from tosca_heads.records import claim, store_block
from tosca_heads.records.scenario_folder import (
    SCENARIO_FOLDER,
    Row,
    kept_answers,
    scenario_asked,
    write_result,
    write_table,
)
from tosca_heads.requests.command_requests import BaselinesRequest
from tosca_heads.trackers import TrackedRun, Tracking, end_failed, open_tracking
from tosca_heads.trackers.events import flat_params, run_files

REDO = "delete the folder to compute the method again"
# the task split's flags, a scenario's own values where it declares them (cil and til take them)
SPLIT_FIELDS = ("init_cls", "increment", "order_seed")
# what only the class-incremental table has: a fitted run's routers, a validation split
CIL_ONLY = ("run", "val_fraction", "val_seed")


@dataclass(frozen=True)
class ScenarioComparison:
    """What `scenario_compare` made: each method's result, the table's title and the files."""

    results: list[ScenarioResult]
    title: str
    files: dict[str, Path]


def asked_values(request: BaselinesRequest) -> dict[str, Any]:
    """The scenario's values: --set NAME=VALUE texts (`scenario_values`), the API's
    `scenario_values`, and the task split's flags where the scenario declares them; a flag that
    only the class-incremental table has is one line (their rules are checked by the plan)."""
    kind = scenario(request.scenario, request.spell("scenario"))
    for name in CIL_ONLY:
        given = getattr(request, name)
        if given not in (None, ()):
            raise UserValueError(
                f"{request.spell(name)} is for the class-incremental table; "
                f"{request.spell('scenario')} {kind.name} takes none (leave it out)"
            )
    if request.device not in ("auto", "cpu"):  # scenario_runs learns on the CPU, as `tosca scenario`
        raise UserValueError(
            f"{request.spell('scenario')} {kind.name} runs on the CPU (one thread: the same numbers at "
            f"any thread count); leave out {request.spell('device')} {request.device}"
        )
    values = scenario_values(kind.name, tuple(request.set_values))
    values.update(request.scenario_values)  # the API's (the command line's come as --set texts)
    return with_split(kind, values, {name: getattr(request, name) for name in SPLIT_FIELDS}, request.spell)


def scenario_compare(request: BaselinesRequest) -> ScenarioComparison:
    """`tosca baselines --scenario NAME` (NAME not `cil`): everything checked before anything is
    written (the values, what the store can serve, each method able to run the scenario), then
    each method's cell reused where it was asked the same, the others run, the table written."""
    from tosca_heads.studies.comparison import check_request

    methods, given = check_request(request)
    # the trackers asked for, each checked now: a WHERE that cannot serve is one line before any work
    tracking = open_tracking(request.log, request.runs_root, request.spell("log"))
    values = asked_values(request)
    given_path = request.store is not None and not isinstance(request.store, FeatureStore)
    if given_path and missing_here(request.store):  # an opened store (Python) is taken as it is
        raise UserValueError(f"{request.spell('store')} {request.store} does not exist")
    store = resolve_store(request.store, request.model, request.dataset, request.cache_dir)
    everyone = ((TOSCA,) if request.with_tosca else ()) + tuple(methods)
    ready = checked_scenario(store, request.scenario, everyone, values, spelling=request.spell("scenario"))
    name, store = ready.kind.name, ready.store
    ident = store.identity
    folder = request.out or request.runs_root / (
        f"baselines-{ident['dataset']['name']}-{ident['backbone']['alias']}-{name}"
    )
    claim.check(folder, SCENARIO_FOLDER)
    # TOSCA's cell is asked with its scenario choices said (a later default never reuses it silently)
    tosca = {k: list(v) if isinstance(v, tuple) else v for k, v in TOSCA_DEFAULTS.items()}
    params = {m: (tosca if m == TOSCA else arguments(m, given)) for m in ready.methods}
    asked = {m: scenario_asked(store, name, values, m, params[m]) for m in ready.methods}
    title = request.title or f"{ident['dataset']['name']} / {ident['backbone']['alias']}, scenario {name}"
    said = {f"scenario.{k}": v for k, v in sorted(values.items())}
    parent = tracking.start(
        f"baselines {folder.name}",
        {
            "command": "baselines",
            "out": str(folder),
            "scenario": name,
            **said,
            **flat_params(store_block(store)),
        },
    )
    try:
        made = _run_table(ready, folder, asked, params, title, tracking, parent)
    except BaseException:
        end_failed(parent)
        raise
    if parent is not None:
        parent.finish(None, sorted(set(made.files.values())))
    return made


def _run_table(
    ready: CheckedScenario,
    folder: Path,
    asked: dict[str, Any],
    params: dict[str, Any],
    title: str,
    tracking: Tracking,
    parent: TrackedRun | None,
) -> ScenarioComparison:
    """Each method's cell reused or run, each a child run of `parent` when tracked (its figures, its
    accuracy after each step as the series A_t, its cell's files), then the table."""
    name = ready.kind.name

    def tracked(result: ScenarioResult) -> None:
        child = tracking.start(
            result.label, {"method": result.method, "scenario": name, **params[result.method]}, parent
        )
        if child is not None:
            record = {
                "routers": {result.label: {**result.figures, "A_t": result.curve, "seconds": result.seconds}}
            }
            child.finish(record, run_files(folder / result.method))

    with claim.claim_folder(folder, SCENARIO_FOLDER):
        done: dict[str, ScenarioResult] = {}
        for method in ready.methods:
            kept = kept_answers(folder / method, asked[method], ready.plan)
            if kept is not None:
                tell(f"{method}: reused from {folder / method} (same store, scenario, values and parameters)")
                router = answered_by(method, params[method], ready.kind.told_task)
                done[method] = result_of(ready, method, *kept, router)
                tracked(done[method])
        todo = tuple(m for m in ready.methods if m not in done)
        if todo:
            for result in run_checked(replace(ready, methods=todo), params):
                write_result(folder / result.method, result.answers, result.seconds, asked[result.method])
                done[result.method] = result
                tracked(result)
        results = [done[m] for m in ready.methods]
        rows = [Row(r.label, r.figures, r.seconds) for r in results]
        files = write_table(folder, rows, title, ready.plan.describe())
    return ScenarioComparison(results, title, files)
