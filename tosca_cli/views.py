"""How the `tosca` commands show what comes back: the tables, progress lines and summaries of each
command, apart from tosca_cli.app, which only turns options into one request and one call. Everything
here reads plain results (RunResult, a sweep's outcome, a comparison, a suite's result) and
prints; nothing here decides or computes a number."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tosca_cli.progress import Board, Task, progress
from tosca_cli.terminal import as_json, err, footnote, heading, key_values, note, out, say, table
from tosca_foundation.text import printable
from tosca_foundation.units import human_bytes

COLUMNS_SAID = (
    "columns: over the task's last epoch, ce = mean cross-entropy per training sample, l1 term = mean "
    "L1 penalty (l1 x |module|_1), loss = ce + l1 term (curves.csv and metrics.json say the same); "
    "train = accuracy on that task's training samples (%); route = share of test samples {router} sends to "
    "their own task's module (%); train s, eval s = seconds of training and evaluation; then each router "
    "= A_t, test accuracy on every class seen so far (%)"
)


def extract_summary(summary: Any) -> None:
    if summary.already_done:
        return say(f"nothing to do: {summary.store} is complete ({summary.chunks_skipped} chunks done)")
    rate = f"{summary.images_computed:,} in {summary.seconds:.1f} s ({summary.images_per_second:.1f} img/s)"
    rows = [
        ("store", summary.store, False),
        ("samples", ", ".join(f"{k} {v:,}" for k, v in summary.samples.items()), False),
        ("feature dim", summary.dim, False),
        ("views", summary.views, False),
        ("chunks", f"{summary.chunks_computed} computed, {summary.chunks_skipped} already done", False),
        ("precision / decoder", f"{summary.extra.get('precision')} / {summary.extra.get('decoder')}", False),
        ("compute", summary.extra.get("compute"), False),
        ("images", rate, False),
        ("store size", human_bytes(summary.store_bytes), False),
    ]
    if summary.extra.get("skipped_images"):
        rows.append(("skipped images", f"{summary.extra['skipped_images']} (see `tosca cache info`)", False))
    key_values(rows)


def import_summary(summary: Any) -> None:
    """`tosca import`'s answer: the store made (or found whole), its rows and fingerprint."""
    if summary.already_done:
        return say(f"nothing to do: {summary.store} is complete ({summary.chunks_kept} chunks done)")
    key_values(
        [
            ("store", summary.store, False),
            ("samples", ", ".join(f"{k} {v:,}" for k, v in summary.rows.items()), False),
            ("features", f"dim {summary.dim}, {summary.views} views, {summary.classes} classes", False),
            ("chunks", f"{summary.chunks_written} written, {summary.chunks_kept} already done", False),
            ("seconds", f"{summary.seconds:.1f}", False),
            ("fingerprint", summary.fingerprint, False),
        ]
    )


def export_summary(summary: Any) -> None:
    """`tosca export`'s answer: what was written where."""
    say(
        f"exported {summary.rows:,} rows of {summary.dim} features ({summary.views} views) as {summary.format} -> {summary.to}"
    )


def in_registry_order(routers: list[str]) -> list[str]:
    """The routers as the registry lists them (`tosca list`), whatever order they were asked in: the
    columns of every run's tables stand in one order, whichever routers it ran."""
    from tosca_heads.routers import ROUTERS

    order = {name: i for i, name in enumerate(ROUTERS)}
    return sorted(dict.fromkeys(routers), key=lambda name: order.get(name, len(order)))


def stage_printer(routers: list[str]) -> Callable[[Any, bool], None]:
    """One aligned row per task as it finishes (ce, l1 term, loss, train acc, A_t per router in the
    registry's order, seconds); the routing accuracy shown is the first router's. The header comes
    with the first row, and a line on stderr saying what its columns are. A row wider than the
    terminal goes on as many lines as it takes, each column under its head (`widths.Rows`)."""
    from tosca_cli.widths import Rows, columns_here
    from tosca_heads.routers import router_label

    routers = in_registry_order(routers)
    heads = ["task", "", "ce", "l1 term", "loss", "train", "route", "train s", "eval s"]
    heads += [router_label(m) for m in routers]
    sizes = [4, 7, 8, 8, 8, 6, 6, 7, 6, *(max(6, len(router_label(m))) for m in routers)]
    started: list[Rows] = []

    def show(stage: Any, trained: bool) -> None:
        if not started:
            say(COLUMNS_SAID.format(router=routers[0]), err)
            started.append(Rows(heads, sizes, keys=2, limit=columns_here(out.file)))
            for line in started[0].header():
                say(line, style="bold")
        cells = [
            str(stage.task),
            "trained" if trained else "reused",
            *losses(stage.stats),
            f"{100 * stage.stats['train_acc']:.1f}",
            f"{100 * stage.routers[routers[0]]['routing']:.1f}",
            f"{stage.stats['seconds']:.2f}",
            f"{stage.eval_seconds:.2f}",
            *(f"{100 * stage.routers[m]['A_t']:.2f}" for m in routers),
        ]
        for line in started[0].lines(cells):
            say(line)

    return show


def losses(stats: dict[str, Any]) -> list[str]:
    """A task's ce, l1 term and loss ('–' for a part not kept)."""
    from tosca_heads.records.run_folder import LOSS_PARTS

    return ["–" if stats.get(k) is None else f"{stats[k]:.4f}" for k in LOSS_PARTS]


def say_protocol(protocol: Any) -> None:
    """The protocol line and its warnings, on stderr before any work."""
    say(protocol.line(), err)
    for warning in protocol.warnings:
        note("warning", warning)


def run_summary(result: Any, routers: list[str], wall: float | None = None) -> None:
    """A run's table, then its times, each saying what it times: training (the SGD steps of the
    tasks trained now), evaluation (the heads' and routers' answers on the test split after each
    task) and, where the command timed itself (`wall`), all of it from the command's start: the
    store's checks, the class statistics routers fit, the files and tables, which neither counts."""
    from tosca_heads.method.metrics import columns_of, header_of
    from tosca_heads.routers import reference_text

    metrics = result.metrics()
    validation = metrics.get("validation") or {}
    figures = columns_of(bool(validation))
    rows = []
    for name in in_registry_order(routers):
        blocks = {"test": metrics["routers"][name], "validation": validation.get(name)}
        told = reference_text(name)  # what makes it a reference, as the registry says ("" for an honest one)
        rows.append([name, *(_figure_cell(column, blocks) for column in figures), told])
    title = f"{result.config['dataset']} / {result.config['backbone']} after task {len(result.stages) - 1}, test split"
    table(title, ["router", *map(header_of, figures), "reference"], rows, ("router", "reference"))
    said_intervals(metrics["routers"])
    for line in run_ties_lines(metrics["routers"], routers):
        footnote(line)
    train_s = sum(s.stats["seconds"] for s in result.stages if s.task in result.trained)
    eval_s = sum(s.eval_seconds for s in result.stages)
    whole = (
        f"; {wall:.1f} s wall from the command's start (store checks, class statistics, files)"
        if wall
        else ""
    )
    footnote(
        f"run {result.run_dir}: {len(result.trained)} task(s) trained in {train_s:.1f} s (SGD steps), "
        f"evaluation {eval_s:.1f} s (heads and routers on the test split after each task){whole}; "
        f"{metrics['params_per_task']:,} parameters per task"
    )
    plot = Path(result.run_dir) / "accuracy.png"
    if plot.is_file():
        say(f"plot {plot}")


def run_ties_lines(blocks: dict[str, Any], routers: list[str]) -> list[str]:
    """Under a run's table, the routers whose answers after the last task held ties (`method.ties`),
    those with the same counts on one line: how many, counted wrong, and how many were tied routes."""
    grouped: dict[tuple[int, int], list[str]] = {}
    images = 0
    for name in in_registry_order(routers):
        block = blocks.get(name) or {}
        if block.get("tied") and block["tied"][-1]:
            grouped.setdefault((block["tied"][-1], block["tied_routes"][-1]), []).append(name)
            images = int(block.get("images") or images)
    lines = []
    for (tied, routes), names in grouped.items():
        which = f"router {names[0]}" if len(names) == 1 else f"routers {', '.join(names)}"
        routed = f"; {routes:,} of them a tie between modules, no module picked" if routes else ""
        lines.append(
            f"{which}: {tied:,} of the {images:,} test images had a tied answer after the last task "
            f"(two or more classes tied for the top score{routed}); a tie counts as wrong (docs/guarantees.md)"
        )
    return lines


def _figure_cell(column: Any, blocks: dict[str, Any]) -> str:
    """A figure column's cell (`metrics.columns_of`) from a row's metrics blocks per split."""
    from tosca_heads.method.metrics import shown_in

    split, metric = column if isinstance(column, tuple) else ("test", column)
    return shown_in(metric, blocks.get(split))


def said_intervals(blocks: Any) -> None:
    """Under a table of figures: what their brackets are, or that they have none (files before
    format 4)."""
    line = intervals_line(blocks)
    if line is not None:
        footnote(line)


def intervals_line(blocks: Any) -> str | None:
    """The line `said_intervals` says under a table of these metrics blocks (None for no blocks):
    apart, so that a test holds a quoted table (the README's demo table) to the same words."""
    blocks = list(blocks.values()) if isinstance(blocks, dict) else list(blocks)
    if any(b and b.get("intervals") for b in blocks):
        images = next(b["images"] for b in blocks if b and b.get("intervals"))
        from tosca_heads.method.metrics import intervals_said

        return f"[low, high]: 95% interval over the {images:,} samples of the split ({intervals_said()}; docs/guarantees.md)"
    if blocks:
        return "no intervals: these figures have no per-image answers kept beside them (`tosca eval RUN` keeps them)"
    return None


def per_split(board: Board, verb: str, unit: str) -> Callable[[str, int, int], None]:
    """`progress(part, done now, total of the part)` (an extraction's splits, predict's images): one
    piece of work per part, the previous one finished when the next starts."""
    tasks: dict[str, Task] = {}

    def on_progress(part: str, n: int, total: int) -> None:
        if part not in tasks:
            for task in tasks.values():
                board.finish(task)
            tasks[part] = board.task(f"{verb} {part}".strip(), total, unit)
        board.update(tasks[part], advance=n)

    return on_progress


def baseline_progress(board: Board) -> Callable[[str, int, int], None]:
    """A baseline's tasks as they end (`on_task(method, task, tasks)`), one piece of work per
    method, started when the baseline starts (`task` -1): its "done in" is the wall time its
    table's seconds count, not the time after its first task."""
    tasks: dict[str, Task] = {}

    def on_task(name: str, task: int, total: int) -> None:
        if name not in tasks:
            tasks[name] = board.task(f"baseline {name}", total, "tasks")
        board.update(tasks[name], completed=task + 1)

    return on_task


def suite_progress(board: Board) -> Callable[[Any, int, int], None]:
    """A suite's cells as they end, the total known before the first (`cell` None)."""
    holder: list[Task] = []

    def on_cell(cell: Any, finished: int, total: int) -> None:
        if not holder:
            holder.append(board.task("suite", total, "cells", at_once=True))
        board.update(holder[0], completed=finished, total=total, note=f"last: {cell.key}" if cell else "")

    return on_cell


def sweep_with_progress(run: Callable[..., Any], rank_by: str, swept: list[str]) -> Any:
    """A sweep's points as they end, with the running best single run on the split the sweep ranks
    on (`running_best`), by its swept flags. The total is known when the sweep starts, and said then."""
    with progress() as board:
        holder: list[Task] = []
        best: dict[str, Any] = {}

        def started(pending: int) -> None:
            if not pending:  # no `0/0` bar (`Board.task`): why nothing runs, in words
                say("sweep: every point is in the folder already; nothing to run", err)
            holder.append(board.task("sweep", pending, "points", at_once=True))

        def on_point(rows: list[dict[str, Any]], finished: int, total: int) -> None:
            note = running_best(best, rows, rank_by, swept)
            if not holder:
                started(total)
            board.update(holder[0], completed=finished, total=total, note=note)

        return run(on_point, started)


def running_best(best: dict[str, Any], rows: list[dict[str, Any]], rank_by: str, swept: list[str]) -> str:
    """The sweep's progress note after a point's rows: the best single run so far (kept in `best`)
    on the split the sweep ranks on (validation where the points hold one out; else test, and the
    note says it is tuned on test); never the test figure of a sweep that ranks on validation."""
    from tosca_heads.method.metrics import RANKED
    from tosca_heads.studies.results import flag_text

    mine = [r for r in rows if r["router"] == rank_by]
    ranked = next((r for r in mine if r["split"] == "validation"), None) or next(iter(mine), rows[0])
    if not best or ranked[RANKED] > best["score"]:
        best.update(
            score=ranked[RANKED],
            split=ranked["split"],
            label=", ".join(f"{f}={flag_text(ranked[f])}" for f in swept),
        )
    where = (
        "on validation" if best["split"] == "validation" else "on TEST (no validation split: tuned on test)"
    )
    return f"best single run so far {where}: A_last({rank_by}) {100 * best['score']:.2f}% at {best['label']}"


def sweep_header(plan: Any, device: str) -> None:
    """The sweep's first lines: its points, store, workers, folder and protocol."""
    where = (
        f"resuming {plan.out} (same grid, same store)"
        if plan.resuming
        else f"folder {plan.out} (the same command resumes it)"
    )
    on = f"--device {device} (each worker decides)" if plan.remote else plan.device
    say(
        f"sweep: {len(plan.points)} runs ({plan.shape()}) on {plan.fit.store.path}, {plan.workers or 'remote'} worker(s) on {on}; {where}",
        err,
    )
    say_protocol(plan.fit.protocol)
    if len(plan.splits) > 1:
        say(f"the split is swept: {', '.join(plan.splits)}", err)


def sweep_plan(planned: Any, as_json_: bool) -> None:
    """`sweep --dry-run`: the summary, then one row per point (to run, or in the folder already)."""
    plan = planned.plan
    if as_json_:
        return as_json(
            {
                "points": len(plan.points),
                "to_run": planned.pending,
                "out": str(plan.out),
                **planned.estimate.fields(),
            }
        )
    counts = {"point(s) to run": planned.pending, "in the folder already": len(plan.points) - planned.pending}
    plan_head(f"sweep {plan.shape()} on {plan.fit.store.path}, {len(plan.points)} points", counts)
    estimate_lines(planned.estimate)  # (worked out now: the line above is said first)
    say(f"folder {plan.out}" + (" (resumed)" if plan.resuming else " (new)"))


def sweep_table(outcome: Any, rank_by: str, shown: list[str], top: int = 10) -> None:
    from tosca_heads.method.metrics import RANKED, figures
    from tosca_heads.routers import router_label
    from tosca_heads.studies.results import choice_lines, flag_text, short_name, spread_of

    if outcome.frame.empty:
        return say(f"sweep {outcome.out}: no results")
    flags = outcome.varying or ["r", "l1"]
    on_validation = outcome.chosen["split"] == "validation"

    def spread(row: Any, column: str) -> str:
        return spread_of(row, column)

    ranked = f"{'val_' if on_validation else ''}A_last_{rank_by}"

    def standard_error(row: Any) -> str:
        se = row.get(f"{ranked}_se")
        return "–" if se is None or se != se else f"{100 * se:.2f}"

    others = [m for m in figures() if m.name != RANKED]  # each under the ranking router
    rows = [
        [
            "*" if row["chosen"] else ("=" if row["tie"] else ""),
            *(flag_text(row[f]) for f in flags),
            *([spread(row, f"val_A_last_{rank_by}")] if on_validation else []),
            standard_error(row),
            *(spread(row, f"{RANKED}_{m}") for m in shown),
            *(spread(row, f"{short_name(m)}_{rank_by}") for m in others),
            f"{int(row['params_per_task']):,}",
            int(row["seeds"]),
        ]
        for _, row in outcome.summary.head(top).iterrows()
    ]
    label = router_label(rank_by)
    val = [f"val A_last {label}"] if on_validation else []
    columns = [
        "",
        *flags,
        *val,
        "SE",
        *(f"{RANKED} {router_label(m)}" for m in shown),
        *(f"{m.label} ({label})" for m in others),
        "params/task",
        "seeds",
    ]
    split = "validation" if on_validation else "TEST (no validation split: tuned on test)"
    title = (
        f"sweep {outcome.out}: best first by A_last ({rank_by} router) on {split}; test A_last beside; mean ± std over "
        "seeds (one seed: [its 95% interval]); SE: standard error of the ranked mean; = tied with the best "
        "(within one SE), * chosen"
    )
    table(title, columns, rows, keys=1 + len(flags))  # a point is named by its flags
    more = f" (top {top} shown; all in {outcome.out / 'summary.md'})" if len(outcome.summary) > top else ""
    footnote(
        f"{outcome.ran} run(s) in {outcome.seconds:.1f} s (up to {outcome.group} per engine run), {outcome.already_done} already done; {len(outcome.summary)} configurations{more}"
    )
    for line in choice_lines(outcome.chosen):
        footnote(line)
    for name, path in outcome.files.items():
        say(f"  {name:<18} {path}")


def comparison_table(comparison: Any) -> None:
    """`tosca baselines` and the demo's last step: every method's row, the intervals line, and the
    knob each baseline chose itself."""
    columns, rows = comparison_cells(comparison)
    # split to fit the terminal, each part repeats what names a row: a method and its routing (TOSCA
    # has a row per router)
    table(comparison_title(comparison), columns, rows, ("method", "routing", "reference"), keys=2)
    for line in comparison_notes(comparison):
        footnote(line)


def comparison_title(comparison: Any) -> str:
    return f"{comparison.title}, test split"


def comparison_notes(comparison: Any) -> list[str]:
    """The lines under the comparison table: what its brackets are, then the knob each baseline
    chose itself (its value and how)."""
    intervals = intervals_line([r.metrics for r in comparison.results])
    knobs = [
        f"{r.method}: {r.metrics['knob']} {r.metrics[r.metrics['knob']]:g}, chosen by {r.metrics['chosen_by']}"
        for r in comparison.results
        if r.metrics.get("knob") in r.metrics
    ]
    from tosca_heads.method.ties import ties_said

    residuals = [  # DS-AL: how much its compensation stream had to learn
        f"{r.method}: its compensation stream's targets (the main stream's residuals on each task's new "
        f"classes) were at most {r.metrics['largest_residual']:.2g}"
        + ("; C = 0: its answers are ACIL's" if r.metrics.get("compensation") == 0 else "")
        for r in comparison.results
        if "largest_residual" in r.metrics
    ]
    ties = [  # ties counted as wrong: how many, after the last task
        ties_said(r.method, r.metrics["tied"][-1], r.metrics["tied_of"])
        for r in comparison.results
        if r.metrics.get("tied") and r.metrics["tied"][-1]
    ]
    return [*([intervals] if intervals is not None else []), *knobs, *residuals, *ties]


def comparison_cells(comparison: Any) -> tuple[list[str], list[list[str]]]:
    """The comparison table's column heads and cells, as printed: apart from the printing, so that
    a test holds the README's demo table to what the demo prints, cell by cell."""
    from tosca_heads.method.metrics import columns_of, header_of
    from tosca_heads.records.baselines_folder import counted

    validation = any(r.validation is not None for r in comparison.results)
    figures = columns_of(validation)
    rows = [
        [
            r.method,
            r.routing,
            *(_figure_cell(column, {"test": r.metrics, "validation": r.validation}) for column in figures),
            counted(r.parameters),
            f"{r.seconds:.1f}",
            r.reference,
        ]
        for r in comparison.results
    ]
    columns = ["method", "routing", *map(header_of, figures), "parameters", "seconds", "reference"]
    return columns, rows


def extraction_estimator(device: str) -> Callable[[Any], Any]:
    """A suite's dry run asks stage 1 how long each store not on disk yet takes to extract."""

    def estimate(store: Any) -> Any:
        from featcache.extraction import default_workers
        from featcache.extraction_estimate import estimate_extraction
        from tosca_foundation.devices import resolve_device

        return estimate_extraction(
            store.model,
            store.dataset,
            store.data_root,
            store.limit_per_class,
            resolve_device(device),
            default_workers(),
        )

    return estimate


def plan_summary(what: str, counts: dict[str, int], estimate: Any) -> None:
    """A plan's first lines: what runs, what waits, the estimated wall time by part, what is missing."""
    plan_head(what, counts)
    estimate_lines(estimate)


def plan_head(what: str, counts: dict[str, int]) -> None:
    """A plan's first line: what runs, what waits."""
    say(f"{what}: " + ", ".join(f"{n} {label}" for label, n in counts.items()))


def estimate_lines(estimate: Any) -> None:
    """The estimate in its words (`tosca_foundation.time_estimates.Estimate.lines`)."""
    for kind, line in estimate.lines():
        if kind == "missing":
            note("missing", line)
        else:
            say(line)


def suite_plan(result: Any, as_json_: bool) -> None:
    rows = [list(row) for row in result.plan_rows()]
    estimate = result.estimate
    if as_json_:
        keys = ("store", "cell", "status", "folder")
        plan = [dict(zip(keys, map(str, row), strict=True)) for row in rows]
        said = estimate.fields() if estimate else {"estimate_seconds": result.estimate_seconds}
        return as_json({"cells": plan, **said})
    count = {
        status: sum(1 for c in result.cells if c.status == status)
        for status in ("missing", "to extract", "done", "reused", "changed")
    }
    counts = {
        "cell(s) to run": count["missing"],
        "waiting for their store to be extracted (run too)": count["to extract"],
        "reused or done": count["done"] + count["reused"],
    }
    plan_summary(f"suite {result.spec.name}, {len(rows)} cells", counts, estimate)
    if count["changed"]:
        say(
            f"{count['changed']} cell(s) hold results of another configuration: the run stops on them "
            "(pass another --out, or delete their folders to recompute)"
        )
    table(
        f"suite {result.spec.name}: {len(rows)} cells",
        ["store", "cell", "status", "folder"],
        rows,
        ("store", "cell", "status", "folder"),
    )


def suite_summary(result: Any) -> None:
    """A finished suite: its tables (as its files hold them, fitted to the terminal), its claims,
    what ran and the files written."""
    from tosca_heads.studies.suite.tables import shown_tables

    if result.tables is None:  # a scenario suite: one table, no claims
        from tosca_heads.studies.suite.scenario_suite import shown_table

        file_table(shown_table(result.spec, result.scenario_line, result.table))
    else:
        for shown in shown_tables(result.spec, result.tables).values():
            file_table(shown)
        for line in [*(result.out / "claims.md").read_text(encoding="utf-8").splitlines(), ""]:
            say(line)
    ran = sum(1 for c in result.cells if c.status == "ran")
    footnote(
        f"{ran} cell(s) run in {result.seconds:.0f} s, {len(result.cells) - ran} already done; "
        f"missing: {len(result.missing)}"
    )
    for name, path in result.files.items():
        say(f"  {name:<15} {path}")


def file_table(shown: Any) -> None:
    """A table as its files hold it (`records.table.Table`: title, header, rows, bold cells), then
    its note: on the terminal as every table is (`terminal.table`). A bold cell is bold on a
    terminal, and marked as markdown marks it (`**56.25**`) where styles are not shown (a log)."""
    from rich.text import Text

    marked = "{}" if out.is_terminal else "**{}**"
    rows = [
        [
            Text(marked.format(printable(cell)), style="bold") if (i, j) in shown.bold else cell
            for j, cell in enumerate(row)
        ]
        for i, row in enumerate(shown.rows)
    ]
    header = list(shown.header)
    table(shown.title, header, rows, (header[0],))
    footnote(shown.note)
    say("")


class DemoDisplay:
    """How `tosca demo` shows each step (tosca_heads.studies.demo.DemoDisplay)."""

    def ahead(self, line: str) -> None:
        say(line)

    def section(self, title: str) -> None:
        self._close()
        heading(title)

    def _board(self) -> Board:
        """One progress board per step, closed when the next step starts."""
        self._close()
        self._open = progress()
        return self._open.__enter__()

    def _close(self) -> None:
        if getattr(self, "_open", None) is not None:
            self._open.__exit__(None, None, None)
            self._open = None

    def stage(self, stage: Any, trained: bool) -> None:
        from tosca_heads.studies.demo import ROUTERS

        if not hasattr(self, "_stages"):
            self._stages = stage_printer(list(ROUTERS))
        self._stages(stage, trained)

    def fitted(self, result: Any) -> None:
        from tosca_heads.studies.demo import ROUTERS

        run_summary(result, list(ROUTERS))

    def point(self) -> Any:
        board, holder = self._board(), []
        self._sweep = (board, holder)

        def on_point(rows: Any, finished: int, total: int) -> None:
            if not holder:
                holder.append(board.task("sweep", total, "points"))
            board.update(holder[0], completed=finished, total=total)

        return on_point

    def sweep_started(self, plan: Any) -> None:
        """The sweep's points, said as it starts (a redirected log shows them at once, not when the
        first point ends)."""
        board, holder = self._sweep
        pending = plan.pending or []
        if not pending:  # a rerun: every point is in the folder already
            return
        holder.append(board.task("sweep", len(pending), "points", at_once=True))

    def swept(self, outcome: Any) -> None:
        from tosca_heads.studies.demo import SWEEP_ROUTERS

        self._close()

        sweep_table(outcome, "entropy", list(SWEEP_ROUTERS))

    def baseline_task(self) -> Any:
        return baseline_progress(self._board())

    def compared(self, comparison: Any, plots: list[Path], tables: list[Path]) -> None:
        self._close()
        comparison_table(comparison)
        say("plots:")
        for path in plots:
            say(f"  {path}")
        say(f"tables: {', '.join(map(str, tables))}")


def routers_table(report: Any) -> None:
    """`tosca routers`: every router of a run beside the baselines of its protocol (the others said
    below), and which one `tosca predict` takes by default (and on which split it was chosen)."""
    from tosca_heads.method.metrics import RANKED, columns_of, header_of, shown

    if hasattr(report, "scenario"):  # a scenario run (`tosca fit --scenario`): its own figures
        return scenario_run_table(report)
    validation = any(row[f"val_{RANKED}"] is not None for row in report.rows)
    figures = columns_of(validation)

    def cell(row: dict[str, Any], column: Any) -> str:  # a report row's figures are in % already
        metric, key = (
            (column[1], f"val_{column[1].name}") if isinstance(column, tuple) else (column, column.name)
        )
        return shown(metric, row.get(key), row.get(f"{key}_low"), row.get(f"{key}_high"), in_percent=True)

    rows = []
    for row in report.rows:
        mine = row["kind"] == "router"
        name = row["router"] + (
            " *"
            if row["router"] == report.best and mine
            else " ="
            if mine and row["router"] in (report.ties or ())
            else ""
        )
        rows.append([name, *(cell(row, column) for column in figures), row["reference"], row["summary"]])
    title = f"routers of {report.run} ({report.tasks} tasks); accuracies in %, test split"
    columns = ["router", *map(header_of, figures), "reference", "what it is"]
    table(title, columns, rows, ("router", "reference", "what it is"))
    said_intervals(
        [{"intervals": True, "images": r["images"]} if r.get("images") else {} for r in report.rows[:1]]
    )
    for method, folder, differs in report.left_out:
        footnote(f"left out: {method} in {folder}: {differs} (another protocol, never set beside the run)")
    if not any(row["kind"] == "baseline" for row in report.rows):
        no_baselines(report)
    if report.chosen_on == "validation":
        footnote(
            f"* the best honest router of this run on its validation split: {report.best} (the default of `tosca predict`)"
        )
    else:
        footnote(
            f"* the best honest router of this run on the TEST split: {report.best} (the default of `tosca predict`; "
            "the run holds out no validation split, so this choice is tuned on test)"
        )
    where = "validation" if report.chosen_on == "validation" else "test"
    if report.ties:
        footnote(
            f"= not distinguishable from {report.best} on {where} (A_last, 95% paired bootstrap over the same images): "
            + ", ".join(report.ties)
        )
    elif report.ties is None:
        footnote("(ties with it not tested: the run kept no per-image answers; `tosca eval RUN` keeps them)")
    if report.misrouting:
        misrouting_table(report)


def no_baselines(report: Any) -> None:
    """Why `tosca routers` shows no baseline, and the command that makes them: `tosca baselines` with
    the run (its split and validation split) and a folder beside it, where `tosca routers` looks."""
    import shlex

    run = Path(report.run)
    beside = run.parent / f"baselines-{run.name}"
    command = shlex.join(
        ["tosca", "baselines", "--store", report.store, "--run", str(run), "--out", str(beside)]
    )
    say(  # one line: the command in it stays whole to copy
        f"no baselines beside these routers: none was run on this run's store under its protocol (task split, "
        f"validation split, {report.tasks} tasks) in {run.parent}; to set them beside it: {command}"
    )


def misrouting_table(report: Any) -> None:
    """Where the best router sends each task's test images (the run's confusion.json)."""
    rows = [
        [
            row["task"],
            row["images"],
            "–" if row["routed_right"] is None else f"{row['routed_right']:.1f}",
            row["misrouted"],
            ", ".join(f"task {t}: {n}" for t, n in row["misrouted_to"]) or "–",
        ]
        for row in report.misrouting
    ]
    title = f"where {report.best} routes each task's test images (confusion.json)"
    table(title, ["task", "images", "routed right %", "misrouted", "misrouted to (most)"], rows, ())


def catalogue() -> dict[str, list[dict[str, str]]]:
    """`tosca list`: every name a command takes, from the registries' entries (plug-ins included,
    once the command line has loaded them), with its other names, what it is and where it comes
    from. Nothing a registry names is loaded: no torch."""
    from featcache.backbones import BACKBONES
    from featcache.images.decoder_names import DECODERS
    from featcache.sources.datasets import DATASETS
    from tosca_heads.method.baseline_registry import BASELINES, paper_of
    from tosca_heads.method.recipe import PRESETS as RECIPES
    from tosca_heads.routers import ROUTERS
    from tosca_heads.studies.suite.presets import PRESETS as SUITES
    from tosca_heads.trackers.logger_registry import LOGGERS

    def rows(registry: Any, what: Callable[[Any], str] = lambda e: e.description) -> list[dict[str, str]]:
        return [
            {
                "name": e.name,
                "aliases": ", ".join(e.aliases),
                "what": what(e),
                "from": "built-in" if e.built_in else f"plug-in {e.origin}",
            }
            for e in registry.entries()
        ]

    def honesty(entry: Any) -> str:
        said = "honest" if not entry.reference else f"reference ({entry.reference})"
        return said + (f": {entry.description}" if entry.description else "")

    def with_paper(entry: Any) -> str:
        paper = paper_of(entry.name)
        return entry.description + (f" [{paper}]" if paper else "")

    def preset(name: str, what: str) -> dict[str, str]:
        return {"name": name, "aliases": "", "what": what, "from": "built-in"}

    return {
        "backbones": rows(BACKBONES),
        "datasets": rows(DATASETS),
        "routers": rows(ROUTERS, honesty),
        "baselines": rows(BASELINES, with_paper),
        "trackers": rows(LOGGERS),
        "decoders": rows(DECODERS),
        "presets": [
            *(preset(n, "recipe preset (fit, sweep: --preset)") for n in RECIPES),
            *(preset(n, "suite preset (suite --preset)") for n in SUITES),
        ],
    }


def catalogue_tables(listed: dict[str, list[dict[str, str]]]) -> None:
    for kind, rows in listed.items():
        table(
            kind,
            ["name", "what it is", "from"],
            [
                [r["name"] + (f" (also {r['aliases']})" if r["aliases"] else ""), r["what"], r["from"]]
                for r in rows
            ],
            ("name", "what it is", "from"),
        )


def scenario_table(results: list[Any], title: str = "") -> None:
    """`tosca scenario` and `tosca baselines --scenario`: the plan in one line, then each method's
    figures (in %) and seconds under `title` (default: the scenario's name)."""
    if not results:
        return
    say(f"scenario {results[0].plan}")
    figures = list(results[0].figures)
    rows = [[r.label, *(f"{100 * r.figures[f]:.2f}" for f in figures), f"{r.seconds:.1f}"] for r in results]
    heading = f"{title}: figures in %" if title else f"{results[0].scenario}: figures in %"
    table(heading, ["method", *figures, "seconds"], rows, ("method",))


def scenario_sweep_header(plan: Any, to: Any = err) -> None:
    """A scenario sweep's plan before it runs: the stream, the split it ranks on, the routers."""
    say(f"sweep under scenario {plan.reading.test.describe()}", to)
    if plan.ranked_on == "validation":
        ranked = f"ranked on validation ({plan.validation.said()}; the stream reads the rest)"
    else:
        ranked = "ranked on TEST (no validation split: the choice is tuned on test)"
    router = "the told module (no router)" if plan.told_task else f"{plan.rank_by}'s A_last"
    say(
        f"{len(plan.points)} point(s), {ranked}, by {router}; every point answers with {len(plan.answered)} router(s)",
        to,
    )


def scenario_sweep_plan(planned: Any, as_json_: bool) -> None:
    """`sweep --scenario NAME --dry-run`: the plan's lines, what runs and what is kept, the estimate."""
    plan = planned.plan
    if as_json_:
        return as_json(
            {
                "scenario": plan.kind.name,
                "points": len(plan.points),
                "to_run": planned.pending,
                "ranked_on": plan.ranked_on,
                "out": str(plan.out),
                **planned.estimate.fields(),
            }
        )
    scenario_sweep_header(plan, out)
    counts = {"point(s) to run": planned.pending, "in the folder already": len(plan.points) - planned.pending}
    plan_head(
        f"sweep under scenario {plan.kind.name} on {plan.store.path}, {len(plan.points)} points", counts
    )
    estimate_lines(planned.estimate)  # (worked out now: the lines above are said first)
    say(f"folder {plan.out}" + (" (resumed)" if plan.out.exists() else " (new)"))


def scenario_sweep_table(outcome: Any) -> None:
    """The points ranked (figures in %; `*` chosen, `=` tied with the best), the point chosen and on
    which split, and the files."""
    from tosca_heads.studies.results import CHOICE_RULE
    from tosca_heads.studies.scenario_sweep import ranking_cells

    header, rows = ranking_cells(outcome.ranking, outcome.swept)
    title = (
        f"{outcome.line}: {len(rows)} point(s) by {outcome.rank_by}'s A_last on {outcome.ranked_on} "
        f"({outcome.computed} computed, {outcome.reused} reused, {outcome.seconds:.1f} s); figures in %"
    )
    table(title, header, rows, ("rank",))
    tied = int(outcome.ranking["tie"].sum()) - 1
    chosen = ", ".join(f"{k}={v}" for k, v in outcome.chosen.items())
    where = (
        "on validation"
        if outcome.ranked_on == "validation"
        else "on TEST (no validation split: tuned on test)"
    )
    rule = f"; {tied} other point(s) tied with the best, and the rule chose {CHOICE_RULE}" if tied else ""
    say(f"chosen {where}: {chosen}{rule}")
    say(f"refit it as a scenario run: {outcome.refit}")
    for name, path in outcome.files.items():
        say(f"  {name:<15} {path}")


def scenario_run_table(run: Any) -> None:
    """A scenario run (`tosca fit --scenario`, `tosca eval`, `tosca routers`): each router's figures
    on test in %, its A_last on validation beside where rows were held out, the seconds, the folder."""
    figures = list(next(iter(run.figures.values())))
    validation = run.validation is not None
    rows = [
        [
            router,
            *((f"{100 * run.validation[router]['A_last']:.2f}",) if validation else ()),
            *(f"{100 * found[f]:.2f}" for f in figures),
        ]
        for router, found in run.figures.items()
    ]
    how = "kept answers read" if run.reused else f"one training, {run.seconds:.1f} s"
    title = f"scenario {run.line}: TOSCA's routers, figures in % ({how})"
    table(title, ["router", *(("val A_last",) if validation else ()), *figures], rows, ("router",))
    if validation:
        say("val A_last: on the rows held out of the stream; the test figures are never for choosing")
    say(f"run {run.run_dir}")
