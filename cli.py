"""The `tosca` command line: parse, call the packages, render. No logic of its own lives here."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from featcache.foundation.errors import UserError
from featcache.foundation.files import os_error_line
from featcache.foundation.limits import human_bytes, max_processes, require_at_most, usable_cores
from featcache.foundation.text import printable

try:  # typer >= 0.20 carries its own copy of click
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover - older typer uses click itself
    from click import exceptions as click_errors  # type: ignore[no-redef]


class OneLineUsageErrors(TyperGroup):
    """A malformed command line (a non-number for a number, a missing or unknown option) is one line
    on stderr and exit 2, like every other user mistake, instead of click's usage box."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except click_errors.NoArgsIsHelpError as exc:  # `tosca` alone: the help, as before
            exc.show()
            sys.exit(exc.exit_code)
        except click_errors.ClickException as exc:
            where = getattr(getattr(exc, "ctx", None), "command_path", None)
            hint = f" (see `{where} --help`)" if where else ""
            message = " ".join(printable(exc.format_message()).split())
            err.print(f"[bold red]error:[/] {escape(message)}{escape(hint)}", highlight=False, soft_wrap=True)
            sys.exit(exc.exit_code)
        except typer.Abort:
            err.print("aborted", highlight=False)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    cls=OneLineUsageErrors,
    help="Continual post-training of frozen foundation models (TOSCA/LuCA on cached [CLS] features).",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    add_completion=False,
)
cache_app = typer.Typer(help="List, inspect and verify feature stores.", no_args_is_help=True)
app.add_typer(cache_app, name="cache")

# Off a terminal (pipes, logs, CI) nothing wraps at 80 columns: paths stay whole, tables stay wide.
_WIDTH = None if sys.stdout.isatty() else 160
out = Console(soft_wrap=True, width=_WIDTH)
err = Console(stderr=True, soft_wrap=True, width=_WIDTH)
F = TypeVar("F", bound=Callable[..., Any])


def user_errors(fn: F) -> F:
    """A UserError becomes one line on stderr and exit code 2; anything else is a bug."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except UserError as exc:
            _error_line(str(exc))
        except OSError as exc:  # a place the user can fix (full, read-only, name too long)
            line = os_error_line(exc)
            if line is None:
                raise
            _error_line(line)
        except MemoryError:
            _error_line("out of memory: this machine cannot hold what the command asked for; ask for less")

    return wrapper  # type: ignore[return-value]


def _error_line(message: str) -> None:
    """One line on stderr, exit code 2: whatever paths or names it quotes, shown inert."""
    line = " ".join(printable(message).split())
    err.print(f"[bold red]error:[/] {escape(line)}", highlight=False, soft_wrap=True)
    raise typer.Exit(2) from None


def progress_bar() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=err,
        transient=False,
        disable=not err.is_terminal and not _force_progress(),
    )


def _force_progress() -> bool:
    import os

    return os.environ.get("TOSCA_PROGRESS", "") == "1"


# ------------------------------------------------------------------------------------------- extract


@app.command()
@user_errors
def extract(
    model: str = typer.Option(
        ..., "--model", "-m", help="Backbone alias (vit_b16, effnet_lite0, ...) or a timm name."
    ),
    dataset: str = typer.Option(
        ..., "--dataset", "-d", help="Dataset name (eurosat, cifar10, cifar100, imagefolder, ...)."
    ),
    data_root: Path | None = typer.Option(
        None, help="Folder or archive (.zip/.tar/.tar.gz) with the images."
    ),
    cache_dir: Path = typer.Option(Path("cache"), help="Root under which stores are created and found."),
    store: Path | None = typer.Option(
        None, help="Store path (default: CACHE_DIR/<dataset>/<model>[-<policy>].zarr)."
    ),
    weights: Path | None = typer.Option(None, help="Local checkpoint: .safetensors or a torch state dict."),
    random_init: bool = typer.Option(
        False,
        "--random-init",
        help="Untrained weights, always the same (torch seed 0); recorded in the store.",
    ),
    policy: str | None = typer.Option(
        None, help="Preprocessing: pilot (the paper's) or timm (default per model)."
    ),
    views: int = typer.Option(0, help="Augmented views cached per training image (one per epoch)."),
    seed: int = typer.Option(0, help="Seed of the augmented views."),
    dtype: str = typer.Option("float32", help="float32 or float16 (halves the store)."),
    batch_size: int | None = typer.Option(
        None, help="Images per forward pass (default: 12 on CPU, 128 on CUDA)."
    ),
    workers: int | None = typer.Option(
        None, help="Image-decoding processes (default: cores - 1; 0 = in-process)."
    ),
    device: str = typer.Option("auto", help="auto (CUDA when present), cpu, cuda, cuda:N."),
    precision: str = typer.Option(
        "fp32", help="fp32 (the default on every device; TF32 off) or bf16 (autocast; recorded in the store)."
    ),
    decode: str = typer.Option(
        "auto",
        help="pil (the reference: PIL decodes and resizes) or torch (torchvision.io + tensor ops; nvjpeg "
        "and GPU resizes on CUDA); auto = an existing store's decoder, else torch on CUDA, pil on CPU.",
    ),
    chunk_size: int = typer.Option(
        512, help="Samples per store chunk (the unit of resume and of distribution)."
    ),
    limit_per_class: int | None = typer.Option(None, help="Keep the first N images per class in each split."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing store made differently."),
    skip_bad_images: bool = typer.Option(
        False,
        "--skip-bad-images",
        help="Decode every image first and leave out the unreadable ones (empty, truncated, not an image); "
        "they are listed in the store's attrs and `tosca cache info`. Without it, one stops the extraction.",
    ),
    scheduler: str | None = typer.Option(
        None,
        help="Spread chunks over Dask: local:N (N processes here), local-cuda (one worker per GPU, "
        "needs dask-cuda), a scheduler address (tcp://host:8786) or a scheduler file (.json).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Run a frozen backbone once over a dataset and store its final features (resumable)."""
    from featcache.extract import ExtractRequest

    request = ExtractRequest(
        model=model,
        dataset=dataset,
        data_root=data_root,
        cache_dir=cache_dir,
        store=store,
        weights=weights,
        random_init=random_init,
        policy=policy,
        views=views,
        seed=seed,
        dtype=dtype,
        batch_size=batch_size,
        workers=workers,
        device=device,
        precision=precision,
        decode=decode,
        chunk_size=chunk_size,
        limit_per_class=limit_per_class,
        overwrite=overwrite,
        scheduler=scheduler,
        skip_bad_images=skip_bad_images,
    )
    summary = _extract_with_progress(request)
    if as_json:
        out.print_json(json.dumps({**summary.__dict__, "store": str(summary.store)}, default=str))
        return
    _print_summary(summary)


def _extract_with_progress(request: Any) -> Any:
    from featcache.extract import plan_extraction, run_extraction
    from featcache.sources.archives import waiting_notice

    def waiting(holder: str) -> None:
        err.print(
            f"waiting: another tosca process ({escape(printable(holder))}) is unpacking this archive",
            highlight=False,
        )

    with waiting_notice(waiting):
        plan = plan_extraction(request)
    if plan.dataset.left_out:
        err.print(
            f"note: left out {escape(plan.dataset.left_out.summary())} (hidden, macOS metadata or not an "
            "image; listed by `tosca cache info`)",
            highlight=False,
        )
    if plan.backbone.random_init:
        err.print(
            "[yellow]warning:[/] random-init weights (asked for): features carry no pretrained knowledge"
        )
    if plan.skipped:
        first = ", ".join(f"{b.split}/{b.sample_id}" for b in plan.skipped[:3])
        err.print(
            f"[yellow]warning:[/] {len(plan.skipped)} unreadable image(s) left out (--skip-bad-images): "
            f"{escape(printable(first))}{' ...' if len(plan.skipped) > 3 else ''}; all listed by `tosca cache info`",
            highlight=False,
        )
    with progress_bar() as bar:
        tasks: dict[str, Any] = {}

        def on_progress(split: str, n: int, total: int) -> None:
            if split not in tasks:
                tasks[split] = bar.add_task(f"extract {split}", total=total, rate="")
            bar.advance(tasks[split], n)
            speed = bar.tasks[tasks[split]].speed
            bar.update(tasks[split], rate=f"{speed:.1f} img/s" if speed else "")

        return run_extraction(plan, on_progress)


def _print_summary(summary: Any) -> None:
    if summary.already_done:
        out.print(
            f"nothing to do: {printable(summary.store)} is complete ({summary.chunks_skipped} chunks done)",
            markup=False,
            highlight=False,
        )
        return
    rate = f"{summary.images_computed:,} in {summary.seconds:.1f} s ({summary.images_per_second:.1f} img/s)"
    rows = [
        ("store", str(summary.store)),
        ("samples", ", ".join(f"{k} {v:,}" for k, v in summary.samples.items())),
        ("feature dim", str(summary.dim)),
        ("views", str(summary.views)),
        ("chunks", f"{summary.chunks_computed} computed, {summary.chunks_skipped} already done"),
        ("precision / decoder", f"{summary.extra.get('precision')} / {summary.extra.get('decoder')}"),
        ("compute", str(summary.extra.get("compute"))),
        ("images", rate),
        ("store size", human_bytes(summary.store_bytes)),
    ]
    if summary.extra.get("skipped_images"):
        rows.append(("skipped images", f"{summary.extra['skipped_images']} (see `tosca cache info`)"))
    _key_value_table(rows)


def _key_value_table(rows: list[tuple[str, str | Text]]) -> None:
    """Values are data (paths, names, attrs of a store): shown as plain text, never read as markup."""
    table = Table(show_header=False, box=None, pad_edge=False)
    for key, value in rows:
        table.add_row(f"[bold]{key}[/]", value if isinstance(value, Text) else Text(printable(value)))
    out.print(table, highlight=False)


# ------------------------------------------------------------------------------------------- fit / eval

# How fit, sweep and baselines find their store (tosca_heads.discover.resolve_store).
STORE_OPTION = typer.Option(None, help="Store path (else found from --model/--dataset in CACHE_DIR).")
MODEL_OPTION = typer.Option(None, "--model", "-m", help="Backbone alias of the store to use.")
DATASET_OPTION = typer.Option(None, "--dataset", "-d", help="Dataset of the store to use.")
CACHE_DIR_OPTION = typer.Option(Path("cache"), help="Where stores are searched.")
DEVICE_OPTION = typer.Option(
    "auto", "--device", help="Where stage 2 runs: auto (CUDA when available), cpu, cuda or cuda:N."
)

MODE_SHORT = {"batch_shuffled": "batch-shuf"}  # column labels shorter than the router's name
ROUTER_OPTION = typer.Option(
    None,
    "--router",
    help="Routers to show, comma-separated (default: all; every one is evaluated and saved).",
)


def _routers(text: str | None) -> list[str]:
    from tosca_heads.routers import resolve_routers

    return resolve_routers(text)


def _stage_printer(routers: list[str]) -> Any:
    """Print one aligned row per task as it finishes (loss, train acc, A_t per router, seconds);
    the routing accuracy shown is the first router's."""
    header = f"{'task':>4} {'':>7} {'loss':>8} {'train':>7} " + " ".join(
        f"{MODE_SHORT.get(m, m):>10}" for m in routers
    )
    shown = []

    def show(stage: Any, trained: bool) -> None:
        if not shown:  # the header with the first row: a refusal before it stays the only line
            out.print(header + f" {'route':>7} {'train s':>8} {'eval s':>7}", style="bold", highlight=False)
            shown.append(True)
        accs = " ".join(f"{100 * stage.modes[m]['A_t']:>9.2f}%" for m in routers)
        out.print(
            f"{stage.task:>4} {'trained' if trained else 'reused':>7} {stage.stats['loss']:>8.4f} "
            f"{100 * stage.stats['train_acc']:>6.1f}% {accs} {100 * stage.modes[routers[0]]['routing']:>6.1f}% "
            f"{stage.stats['seconds']:>8.2f} {stage.eval_seconds:>7.2f}",
            highlight=False,
        )

    return show


def _at_least_one(flag: str, value: int | None) -> int | None:
    """A count flag given on the command line must be 1 or more (None: not given, use the default)."""
    if value is not None and value < 1:
        raise UserError(f"{flag} must be at least 1, got {value}")
    return value


def _stream_config(
    init_cls: int | None, increment: int | None, order_seed: int, ident: dict[str, Any]
) -> Any:
    """The class split: the flags where given, else the dataset's paper split."""
    from tosca_heads.method.protocol import StreamConfig, default_stream

    _at_least_one("--init-cls", init_cls)
    _at_least_one("--increment", increment)
    classes = int(ident["num_classes"])
    if init_cls is not None and init_cls > classes:
        raise UserError(f"--init-cls {init_cls} is more than the store's {classes} classes")
    base = default_stream(ident["name"], classes)
    return StreamConfig(
        init_cls if init_cls is not None else base.init_cls,
        increment if increment is not None else base.increment,
        order_seed,
    )


def _print_run_summary(result: Any, routers: list[str]) -> None:
    from tosca_heads.routers import ROUTERS

    metrics = result.metrics()
    table = Table(
        title=f"{result.config['dataset']} / {result.config['backbone']} after task {len(result.stages) - 1}"
    )
    for col in ("router", "A_bar", "A_last", "forgetting", "routing acc", "task id?"):
        table.add_column(col, justify="left" if col in ("router", "task id?") else "right")
    for mode in routers:
        m = metrics["modes"][mode]
        table.add_row(
            mode,
            f"{100 * m['A_bar']:.2f}",
            f"{100 * m['A_last']:.2f}",
            f"{100 * m['forgetting']:.2f}",
            f"{100 * m['routing_accuracy']:.2f}",
            "" if ROUTERS[mode].honest else ("told" if mode == "oracle" else "batch votes"),
        )
    out.print(table)
    train_s = sum(s.stats["seconds"] for s in result.stages if s.task in result.trained)
    eval_s = sum(s.eval_seconds for s in result.stages)
    out.print(
        f"run {printable(result.run_dir)}: {len(result.trained)} task(s) trained in {train_s:.1f} s, evaluation {eval_s:.1f} s, "
        f"{metrics['params_per_task']:,} parameters per task",
        markup=False,
        highlight=False,
    )


@app.command()
@user_errors
def fit(
    task: int | None = typer.Option(None, "--task", help="Train tasks 0..TASK (default: all)."),
    store: Path | None = STORE_OPTION,
    model: str | None = MODEL_OPTION,
    dataset: str | None = DATASET_OPTION,
    cache_dir: Path = CACHE_DIR_OPTION,
    run: Path | None = typer.Option(
        None, "--run", help="Run directory (default: runs/<dataset>-<model>-...)."
    ),
    preset: str = typer.Option("paper", help="Recipe preset; flags below override it."),
    r: int | None = typer.Option(None, help="Adapter bottleneck (default d/16)."),
    s: int | None = typer.Option(None, help="Calibrator bottleneck (default d/16)."),
    l1: float | None = typer.Option(None, help="L1 weight over the task's LuCA parameters (paper 5e-4)."),
    lr: float | None = typer.Option(None, help="SGD learning rate (paper 0.025)."),
    epochs: int | None = typer.Option(None, help="Epochs per task (paper 20)."),
    batch_size: int | None = typer.Option(None, help="Batch size (paper 48)."),
    momentum: float | None = typer.Option(None, help="SGD momentum (paper 0.9)."),
    weight_decay: float | None = typer.Option(None, help="SGD weight decay (paper 0)."),
    flow: str | None = typer.Option(None, help="tosca (the method), tosca_r, adapter or calibrator."),
    seed: int | None = typer.Option(None, help="Training seed (init, shuffling)."),
    init_cls: int | None = typer.Option(
        None, help="Classes in task 0 (default: the dataset's paper preset)."
    ),
    increment: int | None = typer.Option(None, help="Classes per later task."),
    order_seed: int = typer.Option(1993, help="Seed of the class order (np.random.seed(1993) permutation)."),
    device: str = DEVICE_OPTION,
    router: str | None = ROUTER_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print metrics as JSON."),
) -> None:
    """Train one LuCA module per task, the cosine classifier and the router on a feature store."""
    from dataclasses import replace

    from featcache.store.find import resolve_store
    from tosca_heads.engine.device import resolve_device
    from tosca_heads.experiments.runs import fit_run
    from tosca_heads.method.recipe import PRESETS

    if preset not in PRESETS:
        raise UserError(f"unknown --preset {preset!r}: use one of {', '.join(PRESETS)}")
    if task is not None and task < 0:
        raise UserError(f"--task must be 0 or more, got {task}")
    if run is not None and run.exists() and not run.is_dir():
        raise UserError(f"--run {run} is a file, not a run folder")
    flags = {
        "r": r,
        "s": s,
        "l1": l1,
        "lr": lr,
        "epochs": epochs,
        "batch_size": batch_size,
        "momentum": momentum,
        "weight_decay": weight_decay,
        "flow": flow,
        "seed": seed,
    }
    config = replace(PRESETS[preset], **{k: v for k, v in flags.items() if v is not None})
    config.validate()  # before the table header, so a bad flag is the only line printed
    resolved_device = resolve_device(device)
    routers = _routers(router)
    st = resolve_store(store, model, dataset, cache_dir)
    stream = _stream_config(init_cls, increment, order_seed, st.identity["dataset"])
    result = fit_run(
        st,
        stream,
        config,
        task,
        run,
        on_stage=None if as_json else _stage_printer(routers),
        device=resolved_device,
    )
    if as_json:
        out.print_json(json.dumps({"run": str(result.run_dir), **result.metrics()}))
        return
    _print_run_summary(result, routers)


@app.command("eval")
@user_errors
def eval_run(
    run: Path = typer.Argument(..., help="Run directory made by `tosca fit`."),
    device: str = DEVICE_OPTION,
    router: str | None = ROUTER_OPTION,
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Re-evaluate a run from its saved modules and classifier snapshots (every router)."""
    from tosca_heads.engine.device import resolve_device
    from tosca_heads.experiments.runs import evaluate_run

    routers = _routers(router)
    result = evaluate_run(run, device=resolve_device(device))
    if as_json:
        out.print_json(json.dumps({"run": str(result.run_dir), **result.metrics()}))
        return
    _print_run_summary(result, routers)


@app.command("routers")
@user_errors
def routers_command(
    run: Path = typer.Argument(..., help="Run directory made by `tosca fit`."),
    as_json: bool = typer.Option(False, "--json", help="A JSON list, one object per router and baseline."),
) -> None:
    """Every router of a finished run in one table, beside the baselines of the same store."""
    from tosca_heads.experiments.report import best_honest_router, routers_report, run_metrics

    rows = routers_report(run)
    if as_json:
        out.print_json(json.dumps(rows))
        return
    _, metrics = run_metrics(run)
    best = best_honest_router(metrics)
    table = Table(
        title=Text(f"routers of {printable(run)} ({metrics['finished_tasks']} tasks); accuracies in %")
    )
    for col in ("router", "A_bar", "A_last", "forgetting", "routing acc", "what it is"):
        table.add_column(col, justify="left" if col in ("router", "what it is") else "right")
    for row in rows:
        name = row["router"] + (" *" if row["router"] == best else "")
        if row["kind"] == "router" and not row["honest"]:
            name += " (not honest)"
        table.add_row(
            name,
            f"{row['A_bar']:.2f}",
            f"{row['A_last']:.2f}",
            f"{row['forgetting']:.2f}",
            "–" if row["routing_accuracy"] is None else f"{row['routing_accuracy']:.2f}",
            Text(printable(row["summary"])),
        )
    out.print(table)
    out.print(
        f"* the best honest router of this run: {best} (the default of `tosca predict`)", highlight=False
    )


@app.command()
@user_errors
def predict(
    run: Path = typer.Argument(..., help="Run directory made by `tosca fit`."),
    images: list[Path] = typer.Argument(..., help="Image files or folders (searched recursively)."),
    router: str | None = typer.Option(
        None, "--router", help="Router (default: the run's best honest router by A_last)."
    ),
    device: str = DEVICE_OPTION,
    batch_size: int | None = typer.Option(
        None, help="Images per backbone pass (default: 12 on CPU, 128 on CUDA)."
    ),
    as_json: bool = typer.Option(False, "--json", help="A JSON list, one object per image."),
) -> None:
    """Classify new images with a trained run: the store's backbone, every task module, a router."""
    from featcache.embed import embed_images, image_paths
    from featcache.store import FeatureStore, check_readable
    from tosca_heads.engine.device import resolve_device
    from tosca_heads.experiments.predict import RunPredictor
    from tosca_heads.experiments.report import best_honest_router, run_metrics
    from tosca_heads.routers import resolve_routers

    if batch_size is not None and batch_size < 1:
        raise UserError(f"--batch-size must be at least 1, got {batch_size}")
    config, metrics = run_metrics(run)
    if router is None:
        chosen = best_honest_router(metrics)
    else:
        names = resolve_routers(router)
        if len(names) != 1:
            raise UserError(f"--router takes one router for predict, got {router!r}")
        chosen = names[0]
    resolved = resolve_device(device)
    paths, left_out = image_paths(images)
    if left_out:
        err.print(
            f"note: left out {escape(left_out.summary())} (the rule of `tosca extract`)", highlight=False
        )
    store = FeatureStore.open(config["store"])
    check_readable(store)
    if store.fingerprint != config["store_fingerprint"]:
        raise UserError(
            f"the store at {config['store']} changed since run {run} was made (fingerprint differs)"
        )
    ident = store.identity["dataset"]
    predictor = RunPredictor(run, int(ident["num_classes"]), resolved).fit()
    predictor.check_router(chosen)
    result = predictor.predict(embed_images(store, paths, resolved, batch_size), chosen)
    names = predictor.class_names(list(ident["class_names"]))
    rows = [
        {
            "image": str(path),
            "class": names[int(c)],
            "class_id": int(c),
            "probability": float(p),
            "task": int(t),
            "router": chosen,
        }
        for path, c, p, t in zip(paths, result.classes, result.probabilities, result.tasks, strict=True)
    ]
    if as_json:
        out.print_json(json.dumps(rows))
        return
    table = Table(
        title=Text(f"{len(rows)} image(s), run {printable(run)}, router {chosen}, {predictor.tasks_} task(s)")
    )
    for col in ("image", "class", "probability", "task"):
        table.add_column(col, justify="right" if col in ("probability", "task") else "left")
    for row in rows:
        table.add_row(
            Text(printable(row["image"])),
            Text(printable(row["class"])),
            f"{row['probability']:.3f}",
            str(row["task"]),
        )
    out.print(table)


# ------------------------------------------------------------------------------------------- sweep

_GRID_HELP = "Comma-separated values to sweep"


@app.command()
@user_errors
def sweep(
    store: Path | None = STORE_OPTION,
    model: str | None = MODEL_OPTION,
    dataset: str | None = DATASET_OPTION,
    cache_dir: Path = CACHE_DIR_OPTION,
    preset: str = typer.Option("paper", help="Recipe preset for every flag not swept."),
    r: str | None = typer.Option(None, help=f"{_GRID_HELP}: adapter bottleneck, e.g. 8,16,32,48,96."),
    s: str | None = typer.Option(None, help=f"{_GRID_HELP}: calibrator bottleneck."),
    l1: str | None = typer.Option(None, help=f"{_GRID_HELP}: L1 weight, e.g. 0,1e-4,5e-4,1e-3."),
    lr: str | None = typer.Option(None, help=f"{_GRID_HELP}: learning rate."),
    epochs: str | None = typer.Option(None, help=f"{_GRID_HELP}: epochs per task."),
    batch_size: str | None = typer.Option(None, help=f"{_GRID_HELP}: batch size."),
    momentum: str | None = typer.Option(None, help=f"{_GRID_HELP}: SGD momentum."),
    weight_decay: str | None = typer.Option(None, help=f"{_GRID_HELP}: weight decay."),
    flow: str | None = typer.Option(None, help=f"{_GRID_HELP}: tosca, tosca_r, adapter, calibrator."),
    seeds: str = typer.Option("0", help="Training seeds; each configuration runs once per seed."),
    init_cls: str | None = typer.Option(
        None, help=f"{_GRID_HELP}: classes in task 0 (default: paper split)."
    ),
    increment: str | None = typer.Option(None, help=f"{_GRID_HELP}: classes per later task."),
    order_seed: str = typer.Option("1993", help=f"{_GRID_HELP}: class-order seed."),
    jobs: int | None = typer.Option(
        None, help="Local worker processes (default: CPU cores on the CPU, 1 on CUDA)."
    ),
    group: int | None = typer.Option(
        None,
        help="Compatible points trained together in one engine run (default: 1 on the CPU, as many as fit the GPU's memory on CUDA).",
    ),
    device: str = DEVICE_OPTION,
    scheduler: str | None = typer.Option(
        None,
        help="local:N (N worker processes), local-cuda (one per GPU), a Dask scheduler address "
        "(tcp://host:8786) or scheduler file; workers must see the store path.",
    ),
    out_dir: Path | None = typer.Option(
        None,
        "--out",
        help="Sweep folder; an existing one resumes (default: this grid's runs/sweep-* on this store, else a new runs/sweep-<time>).",
    ),
    rank_by: str = typer.Option("entropy", help="Router whose A_last ranks the points."),
    router: str | None = typer.Option(
        None,
        "--router",
        help="Routers in the table and heatmaps, comma-separated (default: entropy, lda, batch, oracle; "
        "results.csv has every router).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the summary rows as JSON."),
) -> None:
    """Run the Cartesian grid of fit flags, each point a full multi-task run on the cached features."""
    import time

    from featcache.foundation.scheduler import check_available, parse_scheduler
    from featcache.store.find import resolve_store
    from tosca_heads.engine.device import parse_device, resolve_device
    from tosca_heads.experiments.results import summarise_points
    from tosca_heads.experiments.sweeps import (
        check_room,
        check_sweep_folder,
        find_sweep_dir,
        grid_points,
        parse_values,
    )
    from tosca_heads.method.protocol import default_stream
    from tosca_heads.method.recipe import PRESETS
    from tosca_heads.routers import ALIASES, HEADLINE
    from tosca_heads.routers.scores import MODES

    if preset not in PRESETS:
        raise UserError(f"unknown --preset {preset!r}: use one of {', '.join(PRESETS)}")
    rank_by = ALIASES.get(rank_by, rank_by)
    if rank_by not in MODES:
        raise UserError(f"unknown --rank-by {rank_by!r}: use one of {', '.join(MODES)}")
    shown = _routers(router) if router else list(HEADLINE)
    if jobs is not None and jobs < 1:
        raise UserError(f"--jobs must be at least 1, got {jobs}")
    if jobs is not None:
        require_at_most(
            "--jobs", jobs, max_processes(), "processes", "at most 4 per usable core, and 64 anywhere"
        )
    if group is not None and group < 1:
        raise UserError(f"--group must be at least 1, got {group}")
    if scheduler is not None:
        check_available(parse_scheduler(scheduler))  # a malformed address now, not after a timeout
    if out_dir is not None and out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"--out {out_dir} is a file, not a sweep folder")
    remote = scheduler is not None and parse_scheduler(scheduler).kind in ("address", "file")
    # on a remote cluster the workers decide `auto` and own the GPUs: only the name is checked here
    resolved_device = (parse_device(device) or resolve_device("cpu")) if remote else resolve_device(device)
    texts = {
        "r": r,
        "s": s,
        "l1": l1,
        "lr": lr,
        "epochs": epochs,
        "batch_size": batch_size,
        "momentum": momentum,
        "weight_decay": weight_decay,
        "flow": flow,
        "seed": seeds,
        "init_cls": init_cls,
        "increment": increment,
        "order_seed": order_seed,
    }
    grid = {k: parse_values(k, v) for k, v in texts.items() if v is not None}
    for flag in ("init_cls", "increment"):
        for value in grid.get(flag, []):
            _at_least_one(f"--{flag.replace('_', '-')}", value)
    st = resolve_store(store, model, dataset, cache_dir)
    from featcache.store import check_readable

    check_readable(st, values=True)  # before the sweep's first line, so the refusal is the only one
    ident = st.identity["dataset"]
    for value in grid.get("init_cls", []):
        if value > int(ident["num_classes"]):
            raise UserError(f"--init-cls {value} is more than the store's {ident['num_classes']} classes")
    base = default_stream(ident["name"], int(ident["num_classes"]))
    points = grid_points(grid, PRESETS[preset], base, st.dim, int(ident["num_classes"]))
    found = None if out_dir else find_sweep_dir(Path("runs"), st, points)
    out_path = out_dir or found or _new_folder(Path("runs") / time.strftime("sweep-%Y%m%d-%H%M%S"))
    check_sweep_folder(out_path)
    if not remote:
        check_room(st, points, resolved_device)
    workers = jobs or (1 if resolved_device.type == "cuda" else usable_cores())
    on_device = f"--device {device} (each worker decides)" if remote else str(resolved_device)
    where = (
        f"resuming {printable(out_path)} (same grid, same store)"
        if found
        else f"folder {printable(out_path)} (the same command resumes it)"
    )
    err.print(
        f"sweep: {len(points)} runs ({_grid_shape(grid)}) on {printable(st.path)}, "
        f"{workers if scheduler is None else 'remote'} worker(s) on {on_device}; {where}",
        markup=False,
        highlight=False,
    )
    outcome = _sweep_with_progress(
        st,
        points,
        out_path,
        workers,
        scheduler,
        rank_by,
        list(grid),
        group,
        device,  # run_sweep resolves it here, or leaves it to each remote worker
        shown,
    )
    if as_json:
        out.print_json(
            "[]"
            if outcome.frame.empty
            else summarise_points(outcome.frame, rank_by).to_json(orient="records")
        )
        return
    _print_sweep(outcome, rank_by, shown)


def _sweep_with_progress(
    st: Any,
    points: list[Any],
    out_path: Path,
    workers: int,
    scheduler: str | None,
    rank_by: str,
    swept: list[str],
    group: int | None = None,
    device: str = "cpu",
    shown: list[str] | None = None,
) -> Any:
    """Run a sweep under a progress bar that shows the running best point."""
    from tosca_heads.experiments.sweeps import run_sweep

    with progress_bar() as bar:
        progress = bar.add_task("sweep", total=None, rate="")
        best: dict[str, Any] = {}

        def on_point(row: dict[str, Any], finished: int, total: int) -> None:
            score = row[f"A_last_{rank_by}"]
            if not best or score > best["score"]:
                label = ", ".join(
                    f"{k}={row[k]:g}" if isinstance(row[k], float) else f"{k}={row[k]}" for k in swept
                )
                best.update(score=score, label=label)
            bar.update(
                progress,
                total=total,
                completed=finished,
                rate=f"best A_last({rank_by}) {100 * best['score']:.2f}% at {best['label']}",
            )

        return run_sweep(st, points, out_path, workers, scheduler, rank_by, on_point, group, device, shown)


def _print_sweep(outcome: Any, rank_by: str, shown: list[str], top: int = 10) -> None:
    from tosca_heads.experiments.results import summarise_points, varying_flags

    frame = outcome.frame
    if frame.empty:
        out.print(f"sweep {printable(outcome.out)}: no results", markup=False, highlight=False)
        return
    summary = summarise_points(frame, rank_by)
    flags = varying_flags(frame) or ["r", "l1"]
    table = Table(
        title=Text(
            f"sweep {printable(outcome.out)}: best first by A_last ({rank_by} router), mean over seeds"
        )
    )
    for col in [
        *flags,
        *(f"A_last {MODE_SHORT.get(m, m)}" for m in shown),
        "routing",
        "params/task",
        "seeds",
    ]:
        table.add_column(col, justify="right")
    for _, row in summary.head(top).iterrows():
        table.add_row(
            *(f"{row[f]:g}" if isinstance(row[f], float) else str(row[f]) for f in flags),
            *(f"{100 * row[f'A_last_{m}_mean']:.2f}" for m in shown),
            f"{100 * row[f'routing_{rank_by}_mean']:.2f}",
            f"{int(row['params_per_task']):,}",
            str(int(row["seeds"])),
        )
    out.print(table)
    out.print(
        f"{outcome.ran} run(s) in {outcome.seconds:.1f} s (up to {outcome.group} per engine run), "
        f"{outcome.already_done} already done; "
        f"{len(summary)} configurations"
        + (
            f" (top {top} shown; all in {printable(outcome.out / 'summary.md')})"
            if len(summary) > top
            else ""
        ),
        markup=False,
        highlight=False,
    )
    for name, path in outcome.files.items():
        out.print(f"  {name:<18} {printable(path)}", markup=False, highlight=False)


def _new_folder(path: Path) -> Path:
    """path, or path-2, path-3, ... if a sweep started in the same second already took it."""
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate


def _grid_shape(grid: dict[str, list[Any]]) -> str:
    swept = [f"{len(v)} {k}" for k, v in grid.items() if len(v) > 1]
    return " x ".join(swept) if swept else "one configuration"


# ------------------------------------------------------------------------------------------- baselines


@app.command()
@user_errors
def baselines(
    store: Path | None = STORE_OPTION,
    model: str | None = MODEL_OPTION,
    dataset: str | None = DATASET_OPTION,
    cache_dir: Path = CACHE_DIR_OPTION,
    init_cls: int | None = typer.Option(
        None, help="Classes in task 0 (default: the dataset's paper preset)."
    ),
    increment: int | None = typer.Option(None, help="Classes per later task."),
    order_seed: int = typer.Option(1993, help="Seed of the class order."),
    methods: str = typer.Option(
        "simplecil,ranpac,joint_probe", help="Comma-separated baselines: simplecil, ranpac, joint_probe."
    ),
    ranpac_m: int = typer.Option(10_000, help="RanPAC's random projection size M (its paper: 10,000)."),
    run: Path | None = typer.Option(
        None,
        "--run",
        help="TOSCA run to put beside them (default: the paper preset's run, fitted if missing).",
    ),
    no_tosca: bool = typer.Option(False, "--no-tosca", help="Only the baselines."),
    out_dir: Path | None = typer.Option(
        None, "--out", help="Output folder (default runs/baselines-<dataset>-<model>-B<init>Inc<inc>)."
    ),
    device: str = DEVICE_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print the comparison rows as JSON."),
) -> None:
    """SimpleCIL, RanPAC and a joint linear probe on the same store and protocol, beside TOSCA."""
    from featcache.store.find import resolve_store
    from tosca_heads.engine.device import resolve_device
    from tosca_heads.experiments.comparison import check_baselines_folder, check_ranpac_size, write_comparison
    from tosca_heads.method.baselines import BASELINES

    names = [m.strip() for m in methods.split(",") if m.strip()]
    unknown = [m for m in names if m not in BASELINES]
    if unknown or not names:
        raise UserError(
            f"unknown --methods {','.join(unknown) or methods!r}: use any of {', '.join(BASELINES)}"
        )
    if ranpac_m < 1:
        raise UserError(f"--ranpac-m must be at least 1, got {ranpac_m}")
    if "ranpac" in names:
        check_ranpac_size(ranpac_m, 1)
    if run is not None and not no_tosca and not (run / "config.json").is_file():
        raise UserError(f"not a run directory: {run} (no config.json); pass a folder made by `tosca fit`")
    resolved_device = resolve_device(device)
    st = resolve_store(store, model, dataset, cache_dir)
    from featcache.store import check_readable

    check_readable(st)
    ident = st.identity
    stream = _stream_config(init_cls, increment, order_seed, ident["dataset"])
    folder = out_dir or Path("runs") / (
        f"baselines-{ident['dataset']['name']}-{ident['backbone']['alias']}-B{stream.init_cls}Inc{stream.increment}"
    )
    check_baselines_folder(folder)
    results = _baselines_with_progress(
        st, stream, names, ranpac_m, run, folder, with_tosca=not no_tosca, device=resolved_device
    )
    title = (
        f"{ident['dataset']['name']} / {ident['backbone']['alias']}, B{stream.init_cls} Inc{stream.increment}"
    )
    files = write_comparison(folder, results, title)
    if as_json:
        out.print_json(json.dumps([{**r.__dict__} for r in results], default=str))
        return
    _print_comparison(results, title)
    for name, path in files.items():
        out.print(f"  {name:<15} {printable(path)}", markup=False, highlight=False)


def _baselines_with_progress(
    st: Any,
    stream: Any,
    names: list[str],
    ranpac_m: int,
    run: Path | None,
    folder: Path,
    with_tosca: bool,
    device: Any = "cpu",
) -> list[Any]:
    """TOSCA's rows (a given run, or the paper preset's) and each baseline's, under a progress bar."""
    from tosca_heads.experiments.comparison import (
        check_baselines_folder,
        claim_baselines_folder,
        run_baseline,
        tosca_results,
        tosca_run,
        write_baseline,
    )
    from tosca_heads.method.features import CachedFeatures

    check_baselines_folder(folder)
    source = CachedFeatures(st, device=device)  # read once, for TOSCA's evaluation and every baseline
    results = []
    if with_tosca:
        err.print(
            "TOSCA: paper preset run" if run is None else f"TOSCA: run {printable(run)}",
            markup=False,
            highlight=False,
        )
        results += tosca_results(tosca_run(st, stream, run, source, device))
    with progress_bar() as bar:
        task_bar = bar.add_task("baselines", total=None, rate="")

        def on_task(name: str, task: int, tasks: int) -> None:
            bar.update(task_bar, description=f"baseline {name}", total=tasks, completed=task + 1)

        for name in names:
            params = {"projection_dim": ranpac_m} if name == "ranpac" else {}
            result = run_baseline(name, st, stream, source, on_task, device=device, **params)
            claim_baselines_folder(folder)
            write_baseline(folder / name, result, st, stream)
            results.append(result)
    return results


def _print_comparison(results: list[Any], title: str) -> None:
    table = Table(title=title)
    for col in ("method", "routing", "A_bar", "A_last", "forgetting", "routing acc", "parameters", "seconds"):
        table.add_column(col, justify="left" if col in ("method", "routing") else "right")
    for r in results:
        m = r.metrics
        table.add_row(
            r.method,
            r.routing,
            f"{100 * m['A_bar']:.2f}",
            f"{100 * m['A_last']:.2f}",
            f"{100 * m['forgetting']:.2f}",
            "–" if m["routing_accuracy"] is None else f"{100 * m['routing_accuracy']:.2f}",
            f"{r.parameters:,}",
            f"{r.seconds:.1f}",
        )
    out.print(table)


# ------------------------------------------------------------------------------------------- demo

DEMO_PER_CLASS = 300
DEMO_SWEEP = {"r": [16, 48], "l1": [0.0, 5e-4]}
DEMO_ROUTERS = ["entropy", "lda", "ncm", "batch", "batch_shuffled", "oracle"]
EUROSAT_DOWNLOAD = "https://madm.dfki.de/files/sentinel/EuroSAT.zip"


def _demo_data_root(data_root: Path | None) -> Path:
    import os

    hint = (
        f"download EuroSAT RGB ({EUROSAT_DOWNLOAD}) and pass --data-root with the zip or its unpacked "
        "2750/ folder, or set TOSCA_DATA to a folder holding eurosat/EuroSAT-RGB.tar.gz"
    )
    if data_root is None:
        data = os.environ.get("TOSCA_DATA")
        if not data:
            raise UserError(f"no local data for the demo: {hint}")
        data_root = Path(data) / "eurosat" / "EuroSAT-RGB.tar.gz"
    if not data_root.exists():
        raise UserError(f"no EuroSAT data at {data_root}: {hint}")
    return data_root


@app.command()
@user_errors
def demo(
    data_root: Path | None = typer.Option(
        None, help="EuroSAT archive or folder (default: $TOSCA_DATA/eurosat/EuroSAT-RGB.tar.gz)."
    ),
    cache_dir: Path = typer.Option(Path("cache"), help="Root for the demo's store."),
    runs_dir: Path = typer.Option(Path("runs"), help="Root for the demo's run, sweep and baselines."),
    per_class: int = typer.Option(DEMO_PER_CLASS, help="Images per class in each split."),
    jobs: int | None = typer.Option(None, help="Sweep worker processes (default: CPU cores; 1 on CUDA)."),
    device: str = DEVICE_OPTION,
) -> None:
    """The main job on the embedded default: extract, fit, sweep and baselines on a real EuroSAT subset."""

    from featcache.extract import ExtractRequest
    from featcache.sources.archives import is_archive
    from tosca_heads.engine.device import resolve_device

    _at_least_one("--per-class", per_class)
    _at_least_one("--jobs", jobs)
    if jobs is not None:
        require_at_most(
            "--jobs", jobs, max_processes(), "processes", "at most 4 per usable core, and 64 anywhere"
        )
    if cache_dir.exists() and not cache_dir.is_dir():
        raise UserError(f"--cache-dir {cache_dir} is a file, not a folder")
    if runs_dir.exists() and not runs_dir.is_dir():
        raise UserError(f"--runs-dir {runs_dir} is a file, not a folder")
    stage2 = resolve_device(device)
    data_root = _demo_data_root(data_root)
    if not data_root.is_dir() and not is_archive(data_root):
        raise UserError(
            f"--data-root {data_root} is neither a folder nor an archive (.zip, .tar, .tar.gz, .tgz)"
        )
    out.rule("[bold]1/5 extract: effnet_lite0 (packaged ImageNet weights) on a EuroSAT subset")
    request = ExtractRequest(
        model="effnet_lite0",
        dataset="eurosat",
        data_root=data_root,
        cache_dir=cache_dir,
        store=cache_dir / "eurosat" / f"effnet_lite0-demo{per_class}.zarr",
        limit_per_class=per_class,
        chunk_size=256,
    )
    summary = _extract_with_progress(request)
    _print_summary(summary)
    from featcache.store import FeatureStore
    from tosca_heads.experiments.comparison import write_comparison
    from tosca_heads.experiments.runs import fit_run
    from tosca_heads.experiments.sweeps import grid_points
    from tosca_heads.method.protocol import StreamConfig
    from tosca_heads.method.recipe import PRESETS

    store = FeatureStore.open(summary.store)
    stream = StreamConfig(2, 2)
    name = f"demo-eurosat-effnet_lite0-{per_class}"
    out.rule("[bold]2/5 fit: TOSCA, paper preset, EuroSAT B0 Inc2 (5 tasks)")
    result = fit_run(
        store,
        stream,
        PRESETS["paper"],
        None,
        runs_dir / name,
        on_stage=_stage_printer(DEMO_ROUTERS),
        device=stage2,
    )
    _print_run_summary(result, DEMO_ROUTERS)
    out.rule("[bold]3/5 sweep: r in {16, 48} x l1 in {0, 5e-4}, every point all 5 tasks")
    num_classes = int(store.identity["dataset"]["num_classes"])
    points = grid_points(DEMO_SWEEP, PRESETS["paper"], stream, store.dim, num_classes)
    outcome = _sweep_with_progress(
        store,
        points,
        runs_dir / f"{name}-sweep",
        jobs or (1 if stage2.type == "cuda" else usable_cores()),
        None,
        "entropy",
        list(DEMO_SWEEP),
        device=str(stage2),
    )
    _print_sweep(outcome, "entropy", ["entropy", "lda", "batch", "oracle"])
    out.rule("[bold]4/5 baselines: SimpleCIL, RanPAC (M = 10,000), joint linear probe")
    folder = runs_dir / f"{name}-baselines"
    results = _baselines_with_progress(
        store,
        stream,
        ["simplecil", "ranpac", "joint_probe"],
        10_000,
        result.run_dir,
        folder,
        with_tosca=True,
        device=stage2,
    )
    title = f"eurosat / effnet_lite0, {per_class} images/class, B0 Inc2"
    files = write_comparison(folder, results, title)
    out.rule("[bold]5/5 comparison (accuracies in %, test images of all classes seen so far)")
    _print_comparison(results, title)
    out.print("plots:", highlight=False)
    for path in (result.run_dir / "accuracy.png", files["comparison.png"], *_plots(outcome.files)):
        out.print(f"  {printable(path)}", markup=False, highlight=False)
    out.print(
        f"tables: {printable(files['comparison.md'])}, {printable(outcome.files.get('summary.md', ''))}",
        markup=False,
        highlight=False,
    )


def _plots(files: dict[str, Path]) -> list[Path]:
    return [path for name, path in files.items() if name.endswith(".png")]


# ------------------------------------------------------------------------------------------- cache


def _open_store(path: Path) -> Any:
    from featcache.store import FeatureStore

    return FeatureStore.open(path)


def _field(block: Any, *keys: str) -> Any:
    """attrs[k1][k2]... or '?' : a store's attrs are data and may lack a field (edited, older)."""
    for key in keys:
        if not isinstance(block, dict) or key not in block:
            return "?"
        block = block[key]
    return block


@cache_app.command("ls")
@user_errors
def cache_ls(
    cache_dir: Path = typer.Option(Path("cache"), help="Root to search for stores."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """List the feature stores under the cache root (one that cannot be read is listed with why)."""
    from featcache.store import find_stores

    if cache_dir.exists() and not cache_dir.is_dir():
        raise UserError(f"--cache-dir {cache_dir} is a file, not a folder")
    if not cache_dir.exists():
        raise UserError(f"no folder {cache_dir}: pass --cache-dir with the folder your stores are in")
    rows = []
    for path in find_stores(cache_dir):
        try:
            store = _open_store(path)
        except UserError as exc:
            rows.append({"store": str(path), "error": str(exc)})
            continue
        ident = store.identity
        rows.append(
            {
                "store": str(path),
                "dataset": str(_field(ident, "dataset", "name")),
                "backbone": str(_field(ident, "backbone", "alias")),
                "weights": str(_field(ident, "backbone", "weights_source")),
                "policy": str(_field(ident, "preprocessing", "policy")),
                "train": store.layout("train").n,
                "test": store.layout("test").n,
                "dim": store.dim,
                "views": store.views,
                "complete": store.is_complete(),
                "bytes": store.size_bytes(),
            }
        )
    if as_json:
        out.print_json(json.dumps(rows))
        return
    if not rows:
        out.print(f"no stores under {printable(cache_dir)}", markup=False, highlight=False)
        return
    table = Table()
    for col in (
        "store",
        "dataset",
        "backbone",
        "weights",
        "policy",
        "train",
        "test",
        "dim",
        "views",
        "complete",
        "size",
    ):
        table.add_column(col, justify="right" if col in ("train", "test", "dim", "views", "size") else "left")
    for r in rows:
        if "error" in r:
            table.add_row(
                Text(printable(r["store"])), Text(printable(f"unreadable: {r['error']}"), style="red")
            )
            continue
        table.add_row(
            *(Text(printable(r[k])) for k in ("store", "dataset", "backbone", "weights", "policy")),
            f"{r['train']:,}",
            f"{r['test']:,}",
            str(r["dim"]),
            str(r["views"]),
            "yes" if r["complete"] else "[red]no[/]",
            human_bytes(r["bytes"]),
        )
    out.print(table)


@cache_app.command("info")
@user_errors
def cache_info(
    store: Path = typer.Argument(..., help="Store path."), as_json: bool = typer.Option(False, "--json")
) -> None:
    """Show a store's metadata: backbone, weights, preprocessing, dataset, progress, skipped images."""
    from featcache.foundation.locks import holder

    st = _open_store(store)
    attrs = st.attrs
    progress = {s: f"{int(st.done(s).sum())}/{st.layout(s).n_chunks} chunks" for s in ("train", "test")}
    skipped = [item for item in attrs.get("skipped_images") or [] if isinstance(item, dict)]
    writer = holder(store)
    if as_json:
        out.print_json(
            json.dumps(
                {**attrs, "chunks_done": progress, "bytes": st.size_bytes(), "writer": writer}, default=str
            )
        )
        return
    ident = attrs.get("identity", {})
    bb, ds, prep = (_field(ident, k) for k in ("backbone", "dataset", "preprocessing"))
    weights = Text(printable(_field(bb, "weights_source")))
    if _field(bb, "random_init") is True:
        weights.append(" (RANDOM INIT: not pretrained)", style="bold red")
    samples = _field(ds, "samples")
    rows: list[tuple[str, str | Text]] = [
        ("store", str(store)),
        ("backbone", f"{_field(bb, 'alias')} = {_field(bb, 'timm_name')} (dim {_field(bb, 'feature_dim')})"),
        ("weights", weights),
        ("weights sha256", str(_field(bb, "weights_sha256"))),
        (
            "preprocessing",
            ", ".join(f"{k}={v}" for k, v in prep.items() if k != "decoder")
            if isinstance(prep, dict)
            else "?",
        ),
        ("decoder", _decoder_text(str(_field(prep, "decoder")) if isinstance(prep, dict) else "?")),
        (
            "dataset",
            f"{_field(ds, 'name')} ({_field(ds, 'num_classes')} classes)",
        ),
        ("data root", _source_text(ds, attrs)),
        ("split rule", str(_field(ds, "split_rule"))),
        ("limit per class", str(_field(ds, "limit_per_class"))),
        (
            "samples",
            ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in samples.items())
            if isinstance(samples, dict)
            else "?",
        ),
        ("views / seed", f"{_field(ident, 'views')} / {_field(ident, 'seed')}"),
        ("dtype", str(_field(ident, "dtype"))),
        ("precision", _precision_text(str(_field(ident, "precision")))),
        ("progress", ", ".join(f"{k} {v}" for k, v in progress.items())),
        (
            "checksums",
            "per chunk, checked by `tosca cache verify`" if st.has_checksums() else "none (older store)",
        ),
        ("size", human_bytes(st.size_bytes())),
        ("fingerprint", str(attrs.get("fingerprint"))),
        ("created / updated", f"{attrs.get('created')} / {attrs.get('updated')}"),
        ("versions", ", ".join(f"{k} {v}" for k, v in (attrs.get("versions") or {}).items())),
    ]
    if "left_out" in attrs:
        rows.append(("left out", _left_out_text(attrs["left_out"])))
    if writer is not None:
        rows.append(("being written", f"by tosca extract, {writer}"))
    if _field(ident, "skip_bad_images") is True:
        rows.append(("skipped images", f"{len(skipped)} unreadable, left out (--skip-bad-images)"))
        rows += [
            (" ", f"{item.get('split', '?')}/{item.get('id', '?')}: {item.get('reason', '?')}")
            for item in skipped
        ]
    _key_value_table(rows)


def _source_text(dataset: Any, attrs: dict[str, Any]) -> str:
    """Where the images came from, and how the store can tell whether they changed."""
    root = _field(dataset, "data_root")
    if root == "?":
        return (
            f"{attrs.get('dataset_source')} (not recorded in the identity: made before tosca checked sources)"
        )
    if _field(dataset, "source_sha256") not in ("?", None):
        return f"{root} (archive sha256 {str(dataset['source_sha256'])[:12]})"
    files = _field(dataset, "files_sha256")
    return f"{root} (files fingerprint {str(files)[:12]}: names, sizes, modification times)"


def _left_out_text(recorded: Any) -> str:
    """'2 hidden files or folders (e.g. .DS_Store); ...' or 'nothing'."""
    from featcache.sources.listing import LeftOut

    return LeftOut.from_attrs(recorded).described() or "nothing"


def _precision_text(precision: str) -> Text:
    from featcache.options import PRECISIONS

    text = Text(f"{precision}: {PRECISIONS.get(precision, 'as recorded')}")
    if precision != "fp32":
        text.append(" (not the fp32 default)", style="yellow")
    return text


def _decoder_text(decoder: str) -> str:
    from featcache.options import DECODERS

    return f"{decoder}: {DECODERS[decoder]}" if decoder in DECODERS else decoder


@cache_app.command("verify")
@user_errors
def cache_verify(
    store: Path = typer.Argument(..., help="Store path."),
    fix: bool = typer.Option(
        False,
        "--fix",
        help="Clear the done flag of every chunk that fails its checksum or holds NaN/inf, so the same "
        "`tosca extract` recomputes just those chunks.",
    ),
) -> None:
    """Check every chunk is done and matches its checksum, values are finite, shapes match (exit 1 if not)."""
    from featcache.foundation.locks import holder
    from featcache.store import fix_store, verify_notes, verify_store

    st = _open_store(store)
    if fix:
        faults = fix_store(store)
        for fault in faults:
            err.print(f"[yellow]fixed[/] {escape(printable(fault))}: marked not done", highlight=False)
        if faults:
            err.print("run the same `tosca extract` to recompute them", highlight=False)
        st = _open_store(store)
    problems = verify_store(st)
    for note in verify_notes(st):
        err.print(f"[yellow]note[/] {escape(printable(note))}", highlight=False)
    writer = holder(store)
    if writer is not None and any("chunks not done" in p for p in problems):
        err.print(
            f"[yellow]note[/] an extraction is writing it now ({escape(printable(writer))})", highlight=False
        )
    if problems:
        for problem in problems:
            err.print(f"[red]FAIL[/] {escape(printable(problem))}", highlight=False)
        raise typer.Exit(1)
    out.print(f"OK {printable(store)}", markup=False, highlight=False)


if __name__ == "__main__":
    sys.exit(app())
