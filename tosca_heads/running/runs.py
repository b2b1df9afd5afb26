"""`tosca fit` and `tosca_heads.fit`: a fit request checked once into a plan (`requests.plan`),
the plan said, then handed whole to one engine run (`running.group`).

Import-light: numpy and the store until the plan is said; torch, the engine and the routers load
after (`fit` imports `group` then), so the command's first line comes before them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from featcache.store import check_readable, resolve_store
from tosca_foundation.devices import check_device_name
from tosca_foundation.errors import UserTypeError, UserValueError
from tosca_foundation.settings import check_settings
from tosca_heads.method.protocol import ProtocolReport, ValidationConfig
from tosca_heads.method.recipe import recipe
from tosca_heads.requests.command_requests import FitRequest
from tosca_heads.requests.plan import FitPlan
from tosca_heads.routers import on_request, resolve_routers
from tosca_heads.routers.learned import learners_of

if TYPE_CHECKING:
    from tosca_heads.records.run_folder import RunResult, StageResult
    from tosca_heads.trackers import TrackedRun


def plan_fit(request: FitRequest) -> FitPlan:
    """`tosca fit`'s plan: every value of the request checked here, once (the task, the run folder,
    the recipe, the validation split, the settings, the device's name, the store, the task split),
    then built in one pass (`FitPlan.asked`), with numpy and the store only: the device is resolved
    by the plan once, where the engine starts and torch is imported anyway. Each value is named in
    a refusal as the request spells it (`request.spell`: the flag, or the Python API's keyword)."""
    spell = request.spell
    if request.task is not None and (isinstance(request.task, bool) or not isinstance(request.task, int)):
        raise UserTypeError(f"{spell('task')} must be an integer, got {request.task!r}")
    if request.task is not None and request.task < 0:
        raise UserValueError(f"{spell('task')} must be 0 or more, got {request.task}")
    if request.run is not None and request.run.exists() and not request.run.is_dir():
        raise UserValueError(f"{spell('run')} {request.run} is a file, not a run folder")
    train = recipe(request.preset, request.recipe, spell)
    validation = ValidationConfig(request.val_fraction, request.val_seed)
    validation.validate(spell)
    check_settings()
    check_device_name(
        request.device, spell("device")
    )  # the name; the plan resolves it once, where the engine starts
    store = resolve_store(request.store, request.model, request.dataset, request.cache_dir)
    check_readable(store)  # complete, attrs and labels that fit its arrays: the plan reads its labels
    plan = FitPlan.asked(
        store,
        request.init_cls,
        request.increment,
        request.order_seed,
        validation,
        trains=[train],
        dirs=[request.run if request.write else None],
        device=request.device,
        runs_root=request.runs_root,
        spell=spell,
    )
    tasks = plan.stream.num_tasks
    if request.task is not None and request.task >= tasks:
        raise UserValueError(
            f"{spell('task')} {request.task} is past the last task: this stream has tasks 0..{tasks - 1}"
        )
    routers = resolve_routers(request.router, spell("router"))
    plan.check_learners(learners_of(routers), f"leave it out of {spell('router')}")
    return replace(plan, upto=request.task, routers=on_request(routers))


def fit(
    request: FitRequest,
    on_stage: Callable[[StageResult, bool], None] | None = None,
    on_start: Callable[[Path | None], None] | None = None,
    on_plan: Callable[[ProtocolReport], None] | None = None,
) -> RunResult:
    """`tosca fit` and `tosca_heads.fit`: the plan built (`plan_fit`) and said (`on_plan` gets its
    protocol, before torch is imported), the run folder claimed (`on_start` gets it), then tasks
    0..task trained (reusing a matching run's finished tasks) and every router evaluated. A request
    that does not `write` keeps everything in memory."""
    plan = plan_fit(request)
    tracking = None
    if request.log:  # a missing extra: said before any work (the trackers load torch: only when asked)
        from tosca_heads.trackers import open_tracking

        tracking = open_tracking(request.log, request.runs_root, request.spell("log"))
    if on_plan is not None:
        on_plan(plan.protocol)
    # the engine, the trackers and torch load now, the plan said
    from tosca_heads.running.group import fit_group
    from tosca_heads.trackers import end_failed
    from tosca_heads.trackers.events import flat_params

    tracked: list[TrackedRun | None] = [None]  # the tracked run, once the run folder is claimed

    def started(results: list[RunResult]) -> None:
        (result,) = results
        run_dir = result.run_dir if request.write else None
        if tracking:
            params = {"command": "fit", "run": str(run_dir), **flat_params(result.config)}
            tracked[0] = tracking.start(result.run_dir.name, params)
        if on_start is not None:
            on_start(run_dir)

    def stage_done(g: int, stage: StageResult, trained: bool) -> None:
        if tracked[0] is not None:
            tracked[0].stage(stage)
        if on_stage is not None:
            on_stage(stage, trained)

    try:
        (result,) = fit_group(
            plan,
            on_stage=stage_done if tracking or on_stage else None,
            write_outputs=request.write,
            on_start=started,
        )
    except BaseException:
        end_failed(tracked[0])
        raise
    if tracked[0] is not None:
        tracked[0].run_result(result, None if request.write else ())
    return result
