"""`tosca routers RUN`: every router of a finished run in one table, beside the baselines of the same
store and task split when `tosca baselines` has written them under the same runs folder."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from featcache.foundation.errors import UserError
from tosca_heads.experiments.predict import default_router
from tosca_heads.experiments.records.baseline import NO_ROUTING, read_baseline
from tosca_heads.experiments.records.run import read_confusion, read_metrics, read_run_config
from tosca_heads.routers import ROUTERS, reference_text


@dataclass
class RoutersReport:
    """The rows of `tosca routers` (accuracies in %, test split; `val_A_last` on the validation
    split where the run has one), the run's best honest router, the split it was chosen on, the
    run's tasks, and where that router sends each task's test images (`misrouting`, one row per
    task; empty for a run written before confusion.json existed)."""

    rows: list[dict[str, Any]]
    best: str
    tasks: int
    chosen_on: str = "test"
    misrouting: list[dict[str, Any]] = field(default_factory=list)


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
    return {
        "router": name,
        "kind": kind,
        "honest": honest,
        "reference": reference,
        "A_bar": _percent(block["A_bar"]),
        "A_last": _percent(block["A_last"]),
        "val_A_last": None if held is None else _percent(held["A_last"]),
        "forgetting": _percent(block["forgetting"]),
        "routing_accuracy": _percent(block.get("routing_accuracy")),
        "summary": summary,
    }


def baseline_rows(run_dir: Path, config: dict[str, Any], tasks: int) -> list[dict[str, Any]]:
    """The baselines written for the run's store fingerprint, task split and validation split (the
    same training images) under the runs folder, over as many tasks as the run has finished (a run
    stopped with --task is not set beside baselines measured on more classes)."""
    rows = []
    for path in sorted(Path(run_dir).resolve().parent.glob("*/*/metrics.json")):
        payload = read_baseline(path)
        if payload is None or payload.get("store_fingerprint") != config["store_fingerprint"]:
            continue
        if payload.get("stream") != config["stream"] or payload.get("finished_tasks") != tasks:
            continue
        if payload.get("validation_split") != config.get("validation"):  # trained on other images
            continue
        block = {**payload["routers"][NO_ROUTING], "routing_accuracy": None}
        held = (payload.get("validation") or {}).get(NO_ROUTING)
        reference = payload.get("reference") or ""
        where = f"baseline ({path.parent})"
        rows.append(_row(payload["method"], "baseline", not reference, block, where, held, reference))
    return rows


def routers_report(run_dir: Path) -> RoutersReport:
    """Every router of a finished run, then the baselines of its store and split."""
    config = read_run_config(run_dir)
    metrics = read_metrics(run_dir)
    missing = [n for n in ROUTERS if n not in metrics["routers"]]
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
    confusion = read_confusion(run_dir) or {}
    matrix = confusion.get("test", {}).get(best)
    return RoutersReport(
        rows + baseline_rows(run_dir, config, int(metrics["finished_tasks"])),
        best,
        int(metrics["finished_tasks"]),
        chosen_on,
        []
        if matrix is None or confusion["task"] + 1 != int(metrics["finished_tasks"])
        else misrouting(matrix),
    )
