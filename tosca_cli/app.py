"""The `tosca` typer app, and nothing else: each command reads its options into one request
object of a package, makes one call, and hands what comes back to `tosca_cli.views`, which prints it.
What the commands do is in the packages: `featcache.runner`, `featcache.store.describe`,
`tosca_heads.running` (fit), `tosca_heads.studies` (sweeps, comparison, report, demo, suite) and
`tosca_heads.applied` (predict, scenarios)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import typer
from rich.text import Text

from featcache.arrays.requests import ExportRequest, ImportRequest
from featcache.extract_request import ExtractRequest
from tosca_cli.commands import (
    OneLineUsageErrors,
    answered,
    from_request,
    json_flag,
    named_values,
    parameter,
    user_errors,
)
from tosca_cli.progress import progress
from tosca_cli.terminal import (
    as_json,
    err,
    key_values,
    note,
    say,
    table,
)
from tosca_cli.views import (
    DemoDisplay,
    baseline_progress,
    catalogue,
    catalogue_tables,
    comparison_table,
    export_summary,
    extract_summary,
    extraction_estimator,
    import_summary,
    per_split,
    routers_table,
    run_summary,
    say_protocol,
    scenario_run_table,
    scenario_sweep_header,
    scenario_sweep_plan,
    scenario_sweep_table,
    scenario_table,
    stage_printer,
    suite_plan,
    suite_progress,
    suite_summary,
    sweep_header,
    sweep_plan,
    sweep_table,
    sweep_with_progress,
)
from tosca_foundation.text import printable
from tosca_foundation.units import human_bytes
from tosca_heads.requests.command_requests import (
    FIT_FLAGS,
    ROUTERS_HELP,
    SWEEP_FLAGS,
    BaselinesRequest,
    DemoRequest,
    FitRequest,
    PredictRequest,
    ScenarioRequest,
    SuiteRequest,
    SweepRequest,
)

app = typer.Typer(
    cls=OneLineUsageErrors,
    help="Continual post-training of frozen foundation models (TOSCA/LuCA on cached [CLS] features).",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    add_completion=False,
)
cache_app = typer.Typer(help="List, inspect and verify feature stores.", no_args_is_help=True)
app.add_typer(cache_app, name="cache")


def _version(given: bool) -> None:
    if given:
        from tosca_foundation.version import version_line

        say(version_line())
        raise typer.Exit(0)


@app.callback()
@user_errors
def plugins(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print tosca's version and exit."
    ),
    shown: str | None = typer.Option(
        None, "--progress", help="How long jobs show progress: auto, bar, lines or off (sets TOSCA_PROGRESS)."
    ),
    every: float | None = typer.Option(
        None, "--progress-every", help="Seconds between two progress lines (sets TOSCA_PROGRESS_EVERY)."
    ),
    budget: str | None = typer.Option(
        None,
        "--memory-budget",
        help="Memory a fit may hold, e.g. 8GiB (default: half the available memory); a store over it "
        "is read task by task (sets TOSCA_MEMORY_BUDGET).",
    ),
) -> None:
    """Before any command runs: the working folder exists, every setting is checked (one line for a bad one), the processes a
    command starts leave the working folder off their import path, and plug-ins ($TOSCA_PLUGINS,
    entry points `tosca.plugins`) register. --progress, --progress-every and --memory-budget set
    their settings (checked as settings are) for this command and the processes it starts."""
    import logging
    import os

    from tosca_foundation.folders import require_working_folder

    require_working_folder()  # first: a deleted one otherwise ends in an MKL fatal error
    for name, value in (
        ("TOSCA_PROGRESS", shown),
        ("TOSCA_PROGRESS_EVERY", every),
        ("TOSCA_MEMORY_BUDGET", budget),
    ):
        if value is not None:
            os.environ[name] = str(value)

    from tosca_foundation.plugins import load_plugins
    from tosca_foundation.processes import installed_code_only
    from tosca_foundation.settings import check_settings

    check_settings()
    installed_code_only()

    # zarr reads metadata with asyncio: after a damaged file stops a read (one line, exit 2), the
    # reads still pending are reported at exit as "Task was destroyed but it is pending"
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    load_plugins()


# ------------------------------------------------------------------------------------------- extract


@app.command()
@user_errors
@from_request(ExtractRequest, json_flag())
def extract(request: ExtractRequest, as_json_: bool) -> None:
    """Run a frozen backbone once over a dataset and store its final features (resumable)."""
    summary = _extract(request)
    if as_json_:
        return as_json({**summary.__dict__, "store": str(summary.store)})
    extract_summary(summary)


def _extract(request: Any) -> Any:
    from featcache.runner import extract

    def outlined(outline: Any) -> None:  # before torch and timm load: the first line within 2 s
        say(outline.line(), err)

    def planned(plan: Any) -> None:
        if plan.dataset.left_out:
            note("note", f"left out {plan.dataset.left_out.summary()} (listed by `tosca cache info`)")
        if plan.backbone.random_init:
            note("warning", "random-init weights (asked for): features carry no pretrained knowledge")
        if plan.skipped:
            first = ", ".join(b.shown() for b in plan.skipped[:3])
            more = " ..." if len(plan.skipped) > 3 else ""
            note(
                "warning",
                f"{len(plan.skipped)} unreadable image(s) left out (--skip-bad-images): {first}{more}; "
                "all listed by `tosca cache info`",
            )

    def waiting(holder: str) -> None:
        say(f"waiting: another tosca process ({holder}) is unpacking this archive", err)

    with progress() as board:
        return extract(request, planned, per_split(board, "extract", "img"), waiting, outlined)


# ------------------------------------------------------------------------------------------- import, export


@app.command("import")
@user_errors
@from_request(ImportRequest, json_flag())
def import_command(request: ImportRequest, as_json_: bool) -> None:
    """Features computed elsewhere (any encoder, any modality) into a store every stage-2 command reads (resumable)."""
    from featcache.arrays.importer import import_arrays

    summary = import_arrays(request, lambda outline: say(outline.line(), err))
    if as_json_:
        return as_json({**summary.__dict__, "store": str(summary.store)})
    import_summary(summary)


@app.command("export")
@user_errors
@from_request(ExportRequest, json_flag())
def export_command(request: ExportRequest, as_json_: bool) -> None:
    """A store's features, labels, class names and split to .npz, Parquet or a `datasets` folder."""
    from featcache.arrays.exporter import export_store

    summary = export_store(request)
    if as_json_:
        return as_json({**summary.__dict__, "to": str(summary.to)})
    export_summary(summary)


# ------------------------------------------------------------------------------------------- fit, eval, routers, predict


def _routers(text: str | None) -> list[str]:
    from tosca_heads.routers import resolve_routers

    return resolve_routers(text)


@app.command()
@user_errors
@from_request(FitRequest, json_flag(), flags=FIT_FLAGS, into="recipe")
def fit(request: FitRequest, as_json_: bool) -> None:
    """Train one LuCA module per task, the cosine classifier and the router on a feature store."""
    from tosca_heads.running.runs import fit as fit_command

    if (request.scenario, request.set_values, request.read_as) != (
        "cil",
        (),
        "",
    ):  # the default: import-light
        from tosca_heads.applied.scenario_fit import scenario_fit
        from tosca_heads.applied.scenario_runs import beyond_cil

        if beyond_cil(request):
            made = scenario_fit(request, on_plan=lambda line: say(line, err))
            if as_json_:
                return as_json({"run": str(made.run_dir), **made.metrics()})
            return scenario_run_table(made)
    begun = time.monotonic()  # the wall its summary names (`run_summary`)
    routers = _routers(request.router)  # a bad name is the only line: before the plan is said

    def started(run: Path) -> None:
        say(f"run {run}", err)

    stages = None if as_json_ else stage_printer(routers)
    result = fit_command(request, on_stage=stages, on_start=started, on_plan=say_protocol)
    if as_json_:
        return as_json({"run": str(result.run_dir), **result.metrics()})
    run_summary(result, routers, time.monotonic() - begun)
    curves = result.run_dir / "curves.png"
    if curves.is_file():
        say(
            f"training curves: {curves} (cross-entropy, L1 term and learning rate per epoch; numbers in curves.csv)"
        )


@app.command("eval")
@user_errors
def eval_run(
    run: Path = typer.Argument(..., help="Run directory made by `tosca fit`."),
    device: str = typer.Option(
        "auto", help="Where it runs: auto (CUDA when available), cpu, cuda or cuda:N."
    ),
    router: str | None = typer.Option(None, "--router", help=ROUTERS_HELP),
    as_json_: bool = typer.Option(False, "--json", help="Print the answer as JSON."),
) -> None:
    """Re-evaluate a run from its saved modules and classifier snapshots (every router); a scenario
    run (`tosca fit --scenario`) from its kept answers."""
    from tosca_foundation.folders import marked_kind

    if marked_kind(run) == "scenario-run":
        from tosca_heads.applied.scenario_fit import read_scenario_run

        made = read_scenario_run(run)
        return as_json({"run": str(made.run_dir), **made.metrics()}) if as_json_ else scenario_run_table(made)
    from tosca_foundation.devices import resolve_device
    from tosca_heads.routers import on_request
    from tosca_heads.running.group import evaluate_run

    begun = time.monotonic()
    routers = _routers(router)
    result = evaluate_run(run, device=resolve_device(device), routers=on_request(routers))
    if as_json_:
        return as_json({"run": str(result.run_dir), **result.metrics()})
    run_summary(result, routers, time.monotonic() - begun)


@app.command("routers")
@user_errors
@answered(routers_table, lambda report: report.rows, "A JSON list, one object per router and baseline.")
def routers_command(run: Path = typer.Argument(..., help="Run directory made by `tosca fit`.")) -> Any:
    """Every router of a finished run in one table, beside the baselines of the same store; a scenario
    run's routers with the scenario's figures."""
    from tosca_foundation.folders import marked_kind
    from tosca_heads.studies.report import routers_report

    if marked_kind(run) == "scenario-run":
        from tosca_heads.applied.scenario_fit import read_scenario_run

        return read_scenario_run(run)

    return routers_report(run)


@app.command()
@user_errors
@from_request(PredictRequest, json_flag("A JSON list, one object per image."))
def predict(request: PredictRequest, as_json_: bool) -> None:
    """Classify new images with a trained run: the store's backbone, every task module, a router."""
    from featcache.embedding import embed_images, image_paths
    from tosca_foundation.folders import marked_kind
    from tosca_heads.applied.predict import predict_images

    if marked_kind(request.run) == "scenario-run":  # a run of `tosca fit --scenario`: its kept model
        from tosca_heads.applied.scenario_predict import predict_scenario_images as predict_images
    with progress() as board:
        speak = per_split(board, "embed", "img")
        outcome = predict_images(request, image_paths, lambda *args: embed_images(*args, on_progress=speak))
    if outcome.left_out:
        note("note", f"left out {outcome.left_out.summary()} (the rule of `tosca extract`)")
    if outcome.chosen_on == "default":  # a told-task scenario run: no router's figures to choose on
        say(
            f"router {outcome.router}: the run was told the task and kept no router's figures; predict is "
            "not told it (--router names another)",
            err,
        )
    elif outcome.chosen_on == "validation":
        say(f"router {outcome.router}: the run's best honest router on its validation split", err)
    elif outcome.chosen_on == "test":
        note(
            "note",
            f"router {outcome.router}: the run's best honest router on the TEST split (the run holds out no "
            "validation split, so this choice is tuned on test; fit with --val-fraction to choose on validation)",
        )
    if as_json_:
        return as_json(outcome.rows)
    rows = [[r["image"], r["class"], f"{r['probability']:.3f}", r["task"]] for r in outcome.rows]
    title = f"{len(rows)} image(s), run {request.run}, router {outcome.router}, {outcome.tasks} task(s)"
    table(title, ["image", "class", "probability", "task"], rows, ("image", "class"))


# ------------------------------------------------------------------------------------------- sweep


@app.command()
@user_errors
@from_request(SweepRequest, json_flag("Print the summary rows as JSON."), flags=SWEEP_FLAGS, into="grid")
def sweep(request: SweepRequest, as_json_: bool) -> None:
    """Run the Cartesian grid of fit flags, each point a full multi-task run on the cached features;
    under --scenario (til, fscil, blurry, dil; docs/scenarios.md) each point learns that scenario's stream."""
    from tosca_heads.studies.sweeps import CIL_RANK_BY, dry_run
    from tosca_heads.studies.sweeps import sweep as sweep_command

    if (request.scenario, request.set_values, request.read_as) != (
        "cil",
        (),
        "",
    ):  # the default: import-light
        from tosca_heads.applied.scenario_runs import beyond_cil

        if beyond_cil(request):
            return _scenario_sweep(request, as_json_)
    if request.dry_run:
        return sweep_plan(dry_run(request), as_json_)
    swept: list[str] = []

    def run(on_point: Any, on_progress: Any) -> Any:
        def started(plan: Any) -> None:
            swept.extend(plan.swept)
            sweep_header(plan, request.device)
            on_progress(len(plan.pending))  # the total; no plan of its time (said by --dry-run)

        return sweep_command(request, started, on_point)

    outcome = sweep_with_progress(run, request.rank_by or CIL_RANK_BY, swept)
    if as_json_:
        return as_json("[]" if outcome.frame.empty else outcome.summary.to_json(orient="records"))
    sweep_table(outcome, outcome.rank_by, outcome.shown)


def _scenario_sweep(request: SweepRequest, as_json_: bool) -> None:
    """`tosca sweep --scenario NAME`: the plan said, the points as they end, then the ranking
    (`--dry-run`: the plan and its estimate, nothing written or learnt)."""
    from tosca_heads.studies.scenario_sweep import scenario_dry_run, scenario_sweep

    if request.dry_run:
        return scenario_sweep_plan(scenario_dry_run(request), as_json_)
    with progress() as board:
        holder: list[Any] = []

        def started(plan: Any) -> None:
            scenario_sweep_header(plan)
            holder.append(board.task("sweep", len(plan.points), "points", at_once=True))

        def on_point(flags: dict[str, Any], finished: int, total: int) -> None:
            board.update(holder[0], completed=finished, total=total)

        outcome = scenario_sweep(request, started, on_point)
    if as_json_:
        return as_json(outcome.frame.to_json(orient="records"))
    scenario_sweep_table(outcome)


# ------------------------------------------------------------------------------------------- baselines


@app.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@user_errors
@from_request(
    BaselinesRequest, json_flag("Print the comparison rows as JSON."), parameter("ctx", typer.Context, None)
)
def baselines(request: BaselinesRequest, as_json_: bool, ctx: typer.Context) -> None:
    """SimpleCIL, RanPAC and a joint linear probe on the same store and protocol, beside TOSCA;
    under --scenario (cil, til, fscil, blurry, dil; docs/scenarios.md) that scenario's table. Each baseline's own parameters are options named after it, --METHOD-NAME VALUE, as its class
    declares them (RanPAC's: --ranpac-projection-dim, --ranpac-seed; docs/commands.md)."""
    from dataclasses import replace

    from tosca_heads.applied.scenario_runs import beyond_cil
    from tosca_heads.studies.comparison import compare
    from tosca_heads.studies.scenario_comparison import scenario_compare

    request = replace(request, params=named_values(ctx.args))
    if beyond_cil(request):  # the scenario's table (cil's is the one below, as it always was)
        made = scenario_compare(request)
        if as_json_:
            return as_json([{k: v for k, v in r.__dict__.items() if k != "answers"} for r in made.results])
        scenario_table(made.results, made.title)
        for name, path in made.files.items():
            say(f"  {name:<15} {path}")
        return
    with progress() as board:
        comparison = compare(
            request,
            baseline_progress(board),
            lambda given: say("TOSCA: paper preset run" if given is None else f"TOSCA: run {given}", err),
            say_protocol,
        )
    if as_json_:  # data only: each row's per-image answers are its folder's outcomes.safetensors
        return as_json([{k: v for k, v in r.__dict__.items() if k != "outcomes"} for r in comparison.results])
    comparison_table(comparison)
    for name, path in comparison.files.items():
        say(f"  {name:<15} {path}")


@app.command("scenario")
@user_errors
@from_request(ScenarioRequest, json_flag("Print each method's figures as JSON."))
def scenario_cmd(request: ScenarioRequest, as_json_: bool) -> None:
    """TOSCA and baselines under one scenario of a store: cil, til, fscil, blurry (Si-Blurry) or dil
    (docs/scenarios.md); a method that cannot run it refuses in one line."""
    from tosca_heads.applied.scenario_runs import scenario_command

    results = scenario_command(request)
    if as_json_:
        return as_json([{k: v for k, v in r.__dict__.items() if k != "answers"} for r in results])
    scenario_table(results)


# ------------------------------------------------------------------------------------------- suite


@app.command()
@user_errors
@from_request(SuiteRequest, json_flag("Print the table rows as JSON."))
def suite(request: SuiteRequest, as_json_: bool) -> None:
    """Stores to the paper's tables: TOSCA, baselines and ablations over seeds, claims checked."""
    from tosca_heads.studies.suite.suite_runner import suite as run

    with progress() as board:
        on_cell = suite_progress(board)

        def started(protocols: dict[str, Any]) -> None:
            for name, protocol in protocols.items():
                say(f"store {name}: {protocol.line()}", err)
                for warning in protocol.warnings:
                    note("warning", f"store {name}: {warning}")

        result = run(request, _extract_for_suite, on_cell, started, extraction_estimator(request.device))
    if request.dry_run:
        return suite_plan(result, as_json_)
    table = (
        result.tables.table if result.tables is not None else result.table
    )  # a scenario suite's: one table
    if as_json_:
        return as_json(table.to_json(orient="records"))
    suite_summary(result)


def _extract_for_suite(
    model: str, dataset: str, data_root: Path | None, store: Path, per_class: int | None
) -> Path:
    summary = _extract(
        ExtractRequest(
            model, dataset, data_root, store.parent, store, limit_per_class=per_class, chunk_size=256
        )
    )
    extract_summary(summary)
    return summary.store


# ------------------------------------------------------------------------------------------- demo


@app.command()
@user_errors
@from_request(DemoRequest)
def demo(request: DemoRequest) -> None:
    """The main job on the embedded default: extract, fit, sweep and baselines on a real EuroSAT subset."""
    from tosca_heads.studies.demo import run_demo

    def extract_store(
        model: str, dataset: str, data: Path, cache: Path, store: Path, per_class: int, chunk: int
    ) -> Path:
        summary = _extract(
            ExtractRequest(model, dataset, data, cache, store, limit_per_class=per_class, chunk_size=chunk)
        )
        extract_summary(summary)
        return summary.store

    def foresee(model: str, dataset: str, data: Path, store: Path, per_class: int) -> str:
        from featcache.extraction import default_workers
        from featcache.extraction_estimate import extraction_ahead
        from tosca_foundation.devices import resolve_device

        device = resolve_device(request.device)
        return extraction_ahead(model, dataset, data, store, per_class, device, default_workers())

    run_demo(request, extract_store, DemoDisplay(), foresee)


# ------------------------------------------------------------------------------------------- list


@app.command("list")
@user_errors
@answered(catalogue_tables)
def list_names() -> Any:
    """Every backbone, dataset, router (honest or reference), baseline, tracker, decoder and preset, plug-ins included."""
    return catalogue()


# ------------------------------------------------------------------------------------------- cache


@cache_app.command("ls")
@user_errors
def cache_ls(
    cache_dir: Path = typer.Option(Path("cache"), help="Root to search for stores."),
    as_json_: bool = typer.Option(False, "--json", help="Print the answer as JSON."),
) -> None:
    """List the feature stores under the cache root (one that cannot be read is listed with why)."""
    from featcache.store.describe import list_stores

    rows = list_stores(cache_dir)
    if as_json_:
        return as_json(rows)
    if not rows:
        return say(f"no stores under {cache_dir}")
    text = ("store", "dataset", "backbone", "weights", "policy")
    shown = [
        [r["store"], Text(printable(f"unreadable: {r['error']}"), style="red")]
        if "error" in r
        else [
            *(r[k] for k in text),
            *(f"{r[k]:,}" for k in ("train", "test", "dim", "views")),
            Text("yes") if r["complete"] else Text("no", style="red"),
            human_bytes(r["bytes"]),
        ]
        for r in rows
    ]
    columns = [*text, "train", "test", "dim", "views", "complete", "size"]
    table(None, columns, shown, (*text, "complete"))


@cache_app.command("info")
@user_errors
@answered(lambda description: key_values(description.rows), lambda description: description.data)
def cache_info(store: Path = typer.Argument(..., help="Store path.")) -> Any:
    """Show a store's metadata: backbone, weights, preprocessing, source, progress, what was left out."""
    from featcache.store.describe import describe

    return describe(store)


@cache_app.command("verify")
@user_errors
def cache_verify(
    store: Path = typer.Argument(..., help="Store path."),
    fix: bool = typer.Option(
        False,
        "--fix",
        help="Unflag every chunk that fails, so the same `tosca extract` recomputes just those.",
    ),
) -> None:
    """Check every chunk is done and matches its checksum, values are finite, shapes match (exit 1 if not)."""
    from featcache.store.describe import verify

    with progress() as board:
        report = verify(store, fix, per_split(board, "verify", "chunks"))
    for fault in report.fixed:
        note("fixed", f"{fault}: marked not done")
    if report.fixed:
        say("run the same `tosca extract` to recompute them", err)
    for line in report.notes:
        note("note", line)
    for problem in report.problems:
        note("FAIL", problem)
    if report.problems:
        raise typer.Exit(1)
    say(f"OK {report.store}")


@cache_app.command("push")
@user_errors
def cache_push(
    store: Path = typer.Argument(..., help="The local store to copy."),
    url: str = typer.Argument(..., help="Where on object storage: s3://bucket/name.zarr, gs://..."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a store already at URL."),
) -> None:
    """Copy a whole, checked store to object storage (its zarr.json last), for a cluster without a shared disk."""
    from featcache.store.push import push_store

    with progress() as board:
        tick = per_split(board, "push", "objects")
        pushed = push_store(store, url, overwrite, lambda done, total: tick("store", 1, total))
    say(f"pushed {store} to {pushed.url}: {pushed.objects:,} objects, {human_bytes(pushed.bytes)}")


def main() -> None:
    """The installed `tosca` command (pyproject's console script) and `python cli.py`."""
    sys.exit(app())


if __name__ == "__main__":
    main()
