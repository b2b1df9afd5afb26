"""`tosca routers RUN`: every router of a finished run in one table, beside the baselines of the same
protocol (store, task split, validation split, tasks) when `tosca baselines` has written them under
the same runs folder; baselines of the store under another protocol are said, never set beside."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tosca_foundation.errors import UserError
from tosca_heads.applied.predict import default_router
from tosca_heads.method import uncertainty
from tosca_heads.method.metrics import RANKED, figures
from tosca_heads.records import cell
from tosca_heads.records.baselines_folder import REDO, baseline_result, bounds
from tosca_heads.records.run_cell import read_run
from tosca_heads.routers import ROUTERS, reference_text


@dataclass
class RoutersReport:
    """The rows of `tosca routers` for the run folder `run` (accuracies in %, test split; each
    registered metric as computed from the run's answers; `val_A_last` on the validation split where the
    run has one), the run's best honest router, the split it was chosen on, the run's tasks, and
    where that router sends each task's test images (`misrouting`, one row per task)."""

    run: Path
    rows: list[dict[str, Any]]
    best: str
    tasks: int
    chosen_on: str = "test"
    misrouting: list[dict[str, Any]] = field(default_factory=list)
    # baselines of the run's store measured under another protocol (task split, validation split
    # or number of tasks): never set beside the run, each said (method, folder, what differs)
    left_out: list[tuple[str, str, str]] = field(default_factory=list)
    # the honest routers not distinguishable from `best` on `chosen_on` (a paired bootstrap of the
    # difference in A_last on the same images); None: not tested (the run kept no answers)
    ties: list[str] | None = None
    store: str = ""  # the run's store, as its config.json names it (for the `tosca baselines` to run)


def misrouting(matrix: list[list[int]], most: int = 3) -> list[dict[str, Any]]:
    """Per true task of a routing confusion matrix: its images, the share routed right, and the
    tasks its misrouted images went to (the `most` biggest, by count: [(task, count), ...])."""
    rows = []
    for task, counts in enumerate(matrix):
        images = sum(counts)
        wrong = sorted(((n, t) for t, n in enumerate(counts) if t != task and n), key=lambda p: (-p[0], p[1]))
        rows.append(
            {
                "task": task,
                "images": images,
                "routed_right": _percent(counts[task] / images) if images else None,
                "misrouted": images - counts[task],
                "misrouted_to": [(t, n) for n, t in wrong[:most]],
            }
        )
    return rows


def _percent(value: float | None) -> float | None:
    return None if value is None else 100.0 * value


def _row(
    name: str,
    kind: str,
    honest: bool | None,
    block: dict[str, Any],
    summary: str,
    held: dict[str, Any] | None = None,
    reference: str = "",
) -> dict[str, Any]:
    """One row: every figure on test (`metrics.figures()`; in % where the metric is shown in %),
    each with its interval (`_low`, `_high`: None where the run kept no answers) and the `images`
    they are over; `val_A_last` (the ranked figure, with its interval and `val_images`) on the
    validation split. A plug-in's figure is None where the block was made before it was registered."""
    row: dict[str, Any] = {"router": name, "kind": kind, "honest": honest, "reference": reference}
    test, validation = bounds(block), bounds(held, "val_")
    for metric in figures():
        scale = _percent if metric.percent else (lambda v: v)
        row[metric.name] = scale(block.get(metric.name))
        if metric.interval is not None:
            for end in ("low", "high"):
                row[f"{metric.name}_{end}"] = scale(test.get(f"{metric.name}_{end}"))
        if metric.name == RANKED:
            row[f"val_{RANKED}"] = None if held is None else scale(held[RANKED])
            for end in ("low", "high"):
                row[f"val_{RANKED}_{end}"] = scale(validation.get(f"val_{RANKED}_{end}"))
    return {**row, "summary": summary, "images": test["images"], "val_images": validation["val_images"]}


def other_protocol(asked: dict[str, Any], finished: int, config: dict[str, Any], tasks: int) -> str:
    """What makes a baseline cell of the run's store (`asked`, its asked.json; `finished`, the tasks
    its answers cover) another protocol than the run's ('' when none): its task split, its
    validation split, or its number of tasks."""
    if asked.get("stream") != config["stream"]:
        return "another task split than the run's"
    if asked.get("validation_split") != config.get("validation"):
        return "another validation split than the run's"
    if finished != tasks:
        return f"{finished} tasks where the run has {tasks}"
    return ""


def baseline_rows(
    run_dir: Path, config: dict[str, Any], tasks: int
) -> tuple[list[dict[str, Any]], list[tuple[str, str, str]]]:
    """The baselines written for the run's store under the runs folder under the run's protocol:
    the same task split, the same validation split (held-out images), as many tasks as the run has
    finished (a run stopped with --task is not set beside baselines measured on more classes). Those of
    the store under another protocol come back apart, (method, folder, what differs), to be said.
    Each is a baseline cell, read whole (`records.cell`), its figures computed from its answers."""
    rows, left_out = [], []
    for done in sorted(Path(run_dir).resolve().parent.glob(f"*/*/{cell.DONE}")):
        folder = done.parent
        asked = cell.asked_of(folder, REDO)
        if (
            asked.get("kind") != "baseline"
            or asked.get("store", {}).get("fingerprint") != config["store_fingerprint"]
        ):
            continue
        result = baseline_result(folder)
        differs = other_protocol(asked, len(result.metrics["A_t"]), config, tasks)
        if differs:
            left_out.append((result.method, str(folder.parent), differs))
            continue
        block = {**result.metrics, **{m.name: None for m in figures() if m.from_routing}}
        where = f"baseline ({folder})"
        rows.append(
            _row(
                result.method,
                "baseline",
                not result.reference,
                block,
                where,
                result.validation,
                result.reference,
            )
        )
    return rows, left_out


def routers_report(run_dir: Path) -> RoutersReport:
    """Every router of a finished run, then the baselines of its store and split."""
    run = read_run(run_dir)
    config, metrics, kept = run.config, run.metrics, run.answers
    missing = [n for n in ROUTERS if n not in metrics["routers"] and not ROUTERS[n].on_request]
    if missing:
        raise UserError(
            f"run {run_dir} was evaluated before routers {', '.join(missing)} existed; "
            f"re-evaluate it with `tosca eval {run_dir}`"
        )
    rows = []
    validation = metrics.get("validation") or {}
    for name, block in metrics["routers"].items():
        router = ROUTERS.get(name)
        honest = router.honest if router else None
        summary = router.summary if router else ""
        reference = reference_text(name) if router else ""
        rows.append(_row(name, "router", honest, block, summary, validation.get(name), reference))
    best, chosen_on = default_router(metrics)
    answers = kept.get(chosen_on)
    ties = None
    if answers is not None and best in answers:
        ties = [
            name
            for name in answers
            if name != best
            and ROUTERS.get(name) is not None
            and ROUTERS[name].honest
            and uncertainty.beats(uncertainty.paired_difference([answers[best]], [answers[name]], RANKED))
            != uncertainty.HOLDS
        ]
    confusion = run.confusion
    matrix = confusion.get("test", {}).get(best)
    baselines, left_out = baseline_rows(run_dir, config, int(metrics["finished_tasks"]))
    return RoutersReport(
        Path(run_dir),
        rows + baselines,
        best,
        int(metrics["finished_tasks"]),
        chosen_on,
        []
        if matrix is None or confusion["task"] + 1 != int(metrics["finished_tasks"])
        else misrouting(matrix),
        left_out,
        [n for n in ROUTERS if n in ties] if ties is not None else None,
        str(config.get("store", "")),
    )
