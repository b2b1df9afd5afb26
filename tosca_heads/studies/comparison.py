"""`tosca baselines`: the baselines (`baselines`) beside TOSCA's routers under the same protocol,
written as a baselines folder (`records.baseline`) with the comparison table. `compare` is what the
command asks for; the baselines run through the executor, like a suite's cells.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from featcache.store import check_readable, resolve_store
from tosca_foundation.devices import check_device_name, resolve_device
from tosca_foundation.errors import UserError
from tosca_foundation.text import tell
from tosca_heads.method.baseline_registry import (
    arguments,
    baseline_names,
    check_fits,
    given_params,
)
from tosca_heads.method.features import CachedFeatures, FeatureSource
from tosca_heads.method.protocol import (
    DEFAULT_ORDER_SEED,
    NO_VALIDATION,
    ProtocolReport,
    StreamConfig,
    ValidationConfig,
    split_name,
)
from tosca_heads.method.recipe import PRESETS
from tosca_heads.records import claim, store_block, validation_record
from tosca_heads.records import run_folder as run_record
from tosca_heads.records.baselines_folder import (
    BASELINES_FOLDER,
    MethodResult,
    baseline_asked,
    reusable_baseline,
    write_comparison,
)
from tosca_heads.requests.command_requests import BaselinesRequest
from tosca_heads.requests.plan import FitPlan
from tosca_heads.routers import reference_text
from tosca_heads.running.baseline_runs import TaskCallback
from tosca_heads.running.executor import Executor, Outcome, Work, share_features
from tosca_heads.running.group import RunResult, evaluate_run, fit_group
from tosca_heads.trackers import TrackedRun, Tracking, end_failed, method_result, open_tracking
from tosca_heads.trackers.events import flat_params, run_files


def tosca_results(run: RunResult) -> list[MethodResult]:
    """TOSCA's rows: one per router; parameters = all task modules plus the classifier."""
    metrics = run.metrics()
    tasks = metrics["finished_tasks"]
    classes = run.config["stream"]["init_cls"] + (tasks - 1) * run.config["stream"]["increment"]
    parameters = tasks * metrics["params_per_task"] + classes * run.config["feature_dim"] + 1
    train_s = sum(s.stats["seconds"] for s in run.stages)
    held = metrics.get("validation") or {}
    return [
        MethodResult("tosca", name, block, parameters, train_s, held.get(name), reference_text(name))
        for name, block in metrics["routers"].items()
    ]


def tosca_run(plan: FitPlan, run_dir: Path | None, source: FeatureSource | None = None) -> RunResult:
    """TOSCA on the plan's store, stream and validation split: a given run (all tasks finished), else
    the paper preset's default run under the plan's runs root, fitted now unless it is already on
    disk."""
    store, stream_cfg, validation = plan.store, plan.stream_config, plan.validation
    if run_dir is None:
        return fit_group(plan.with_trains([PRESETS["paper"]]), source=source)[0]
    config = run_record.read_run_config(
        run_dir
    )  # checked before evaluating: a run of another store is left alone
    if config["store_fingerprint"] != store.fingerprint:
        raise UserError(f"run {run_dir} was fitted on another store ({config['store']}); pass its --store")
    theirs = run_record.stream_config_of(config, run_dir)
    if theirs != stream_cfg:
        raise UserError(
            f"run {run_dir} was fitted on {stream_said(theirs)}, the baselines asked for {stream_said(stream_cfg)}; "
            "leave out --init-cls, --increment and --order-seed to take the run's"
        )
    held = run_record.validation_of(config, run_dir)
    if held != validation:
        raise UserError(
            f"run {run_dir} was fitted with {held.said()}, the baselines asked for {validation.said()}; "
            "leave out --val-fraction and --val-seed to take the run's"
        )
    result = evaluate_run(run_dir, source, plan.device)
    tasks = plan.stream.num_tasks
    if len(result.stages) < tasks:
        raise UserError(
            f"run {run_dir} has {len(result.stages)} of {tasks} tasks; finish it with `tosca fit --run {run_dir}`"
        )
    return result


def stream_said(stream: StreamConfig) -> str:
    """'split B0 Inc2, class order seed 1993'."""
    return f"split {split_name(stream.init_cls, stream.increment)}, class order seed {stream.order_seed}"


@dataclass(frozen=True)
class AskedSplit:
    """The task split's flags and the validation split the baselines run under."""

    init_cls: int | None
    increment: int | None
    order_seed: int
    validation: ValidationConfig


def asked_split(request: BaselinesRequest) -> AskedSplit:
    """The flags given; each one left out is the --run's (its config.json, checked) where TOSCA's
    rows come from a given run, else the command's default (the dataset's split, class order seed
    1993, no validation split). A flag given that differs from the run's is refused by `tosca_run`,
    in words."""
    run = request.run if request.with_tosca else None
    defaults: dict[str, int | None] = {"init_cls": None, "increment": None, "order_seed": DEFAULT_ORDER_SEED}
    held = NO_VALIDATION
    if run is not None:
        config = run_record.read_run_config(run)
        defaults = asdict(run_record.stream_config_of(config, run))
        held = run_record.validation_of(config, run)
    given = {"init_cls": request.init_cls, "increment": request.increment, "order_seed": request.order_seed}
    chosen = {name: defaults[name] if value is None else value for name, value in given.items()}
    validation = ValidationConfig(
        held.fraction if request.val_fraction is None else request.val_fraction,
        held.seed if request.val_seed is None else request.val_seed,
    )
    validation.validate(request.spell)
    return AskedSplit(**chosen, validation=validation)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------ the command


def check_request(request: BaselinesRequest) -> tuple[tuple[str, ...], dict[str, Any]]:
    """The flags alone, before any store is opened: the baselines by their registered names (the
    registry's `pick`: an alias is its name, an unknown one refused with the closest; none named:
    `baseline_names`: `all`, or `default_baselines()`), and their own parameters as given (`baseline_registry.given_params`: of
    their kind, each checked)."""
    methods = baseline_names(request.methods, request.spell("methods"))
    given = given_params(methods, request.params, request.spell, text=True)
    for method in methods:
        check_fits(method, arguments(method, given), 1, spell=request.spell)
    if request.run is not None and request.with_tosca and not (request.run / run_record.CONFIG).is_file():
        raise UserError(
            f"not a run directory: {request.run} (no {run_record.CONFIG}); pass a folder made by `tosca fit`"
        )
    return methods, given


@dataclass
class Comparison:
    """What `compare` made: the rows of the table, its title, and the files written."""

    results: list[MethodResult]
    title: str
    files: dict[str, Path]


def compare(
    request: BaselinesRequest,
    on_task: TaskCallback | None = None,
    on_tosca: Callable[[Path | None], None] | None = None,
    on_start: Callable[[ProtocolReport], None] | None = None,
) -> Comparison:
    """`tosca baselines`: TOSCA's rows (a given run, or the paper preset's, fitted if missing) and each
    baseline's, under the same protocol (said through `on_start`), written into the baselines folder."""
    methods, given = check_request(request)
    tracking = open_tracking(request.log, request.runs_root, request.spell("log"))
    asked = asked_split(request)
    validation = asked.validation
    check_device_name(request.device, request.spell("device"))
    device = resolve_device(request.device)  # here: the store is read onto it before anything is said
    store = resolve_store(request.store, request.model, request.dataset, request.cache_dir)
    check_readable(store)
    ident = store.identity
    plan = FitPlan.asked(
        store,
        asked.init_cls,
        asked.increment,
        asked.order_seed,
        validation,
        device=device,
        runs_root=request.runs_root,
        spell=request.spell,
    )
    stream, protocol = plan.stream_config, plan.protocol
    split = split_name(stream.init_cls, stream.increment)
    held = f"-val{validation.fraction:g}-seed{validation.seed}" if validation.enabled else ""
    name = f"baselines-{ident['dataset']['name']}-{ident['backbone']['alias']}-{split.replace(' ', '')}{held}"
    folder = request.out or request.runs_root / name
    plan.check_learners(methods, f"leave it out of {request.spell('methods')}")
    for method in methods:  # on this store, before its folder is claimed, in the request's words
        check_fits(
            method,
            arguments(method, given),
            store.dim,
            plan.stream.num_classes,
            len(plan.train_labels),
            request.spell,
        )
    claim.check(folder, BASELINES_FOLDER)
    # read once (every chunk checked), for TOSCA's evaluation and every baseline, before anything is said
    source = CachedFeatures(store, device=device).preload()
    share_features(store, source, device)
    if on_start:
        on_start(protocol)
    params = {"command": "baselines", "out": str(folder), "methods": ",".join(methods)}
    parent = tracking.start(f"baselines {folder.name}", {**params, **flat_params(store_block(store))})
    try:
        with claim.claim_folder(folder, BASELINES_FOLDER):  # one writer at a time
            comparison = _compare(
                request, methods, given, plan, source, folder, on_task, on_tosca, tracking, parent
            )
    except BaseException:
        end_failed(parent)
        raise
    if parent is not None:
        parent.finish(None, sorted(set(comparison.files.values())))
    return comparison


def _compare(
    request: BaselinesRequest,
    methods: tuple[str, ...],
    given: dict[str, Any],
    plan: FitPlan,
    source: CachedFeatures,
    folder: Path,
    on_task: TaskCallback | None,
    on_tosca: Callable[[Path | None], None] | None,
    tracking: Tracking,
    parent: TrackedRun | None,
) -> Comparison:
    """TOSCA's rows and each baseline's, written into `folder`; each a child of `parent` when tracked."""
    store, stream, validation = plan.store, plan.stream_config, plan.validation
    ident = store.identity
    split = split_name(stream.init_cls, stream.increment)
    results = []
    if request.with_tosca:
        if on_tosca:
            on_tosca(request.run)
        run = tosca_run(plan, request.run, source)
        results += tosca_results(run)
        child = tracking.start("tosca", {"run": str(run.run_dir), **flat_params(run.config)}, parent)
        if child is not None:
            child.run_result(run)
    done: dict[str, MethodResult] = {}

    def finished(method: str, params: dict[str, Any], result: MethodResult | None) -> None:
        if result is not None:
            done[method] = result
        child = tracking.start(method, {"method": method, **params}, parent)
        if child is not None and result is not None:
            method_result(child, result, run_files(folder / method))

    held = validation_record(validation, plan.held_ids) if validation.enabled else None
    works = []
    for method in methods:
        params = arguments(method, given)
        kept = reusable_baseline(folder / method, baseline_asked(method, store, stream, params, held))
        if kept is not None:  # made from this store, split and parameters: its checked figures
            tell(f"{method}: reused from {folder / method} (same store, task split and parameters)")
            finished(method, params, kept)
            continue
        works.append(
            Work(
                str(store.path.resolve()),
                store.fingerprint,
                stream,
                validation,
                method=method,
                params=tuple(sorted(params.items())),
                baseline_folder=str(folder / method),
            )
        )

    def computed(work: Work, outcome: Outcome) -> None:
        finished(work.method, dict(work.params), outcome.baseline)

    Executor(1, None, str(plan.device)).run(works, computed, on_task)
    results += [done[method] for method in methods]
    title = request.title or f"{ident['dataset']['name']} / {ident['backbone']['alias']}, {split}"
    return Comparison(results, title, write_comparison(folder, results, title))
