"""`tosca routers RUN`: every router of a finished run in one table, beside the baselines of the same
store and task split when `tosca baselines` has written them under the same runs folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from featcache.foundation.errors import UserError
from featcache.foundation.files import read_json
from tosca_heads.routers.registry import ROUTERS


def _percent(value: float | None) -> float | None:
    return None if value is None else 100.0 * value


def run_metrics(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(config.json, metrics.json) of a run, refusing folders that are not finished runs."""
    from tosca_heads.experiments.runfiles import read_run_config

    run_dir = Path(run_dir)
    config = read_run_config(run_dir)
    path = run_dir / "metrics.json"
    if not path.is_file():
        raise UserError(f"run {run_dir} has no metrics.json yet; train it with `tosca fit --run {run_dir}`")
    metrics = read_json(path, "run metrics", f"`tosca eval {run_dir}` rewrites it")
    modes = metrics.get("modes")
    if not isinstance(modes, dict) or not all(
        isinstance(m, dict)
        and all(isinstance(m.get(k), (int, float)) for k in ("A_bar", "A_last", "forgetting"))
        for m in modes.values()
    ):
        raise UserError(f"run metrics {path} were edited or damaged; `tosca eval {run_dir}` rewrites them")
    return config, metrics


def router_rows(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for name, block in metrics["modes"].items():
        router = ROUTERS.get(name)
        rows.append(
            {
                "router": name,
                "kind": "router",
                "honest": bool(router.honest) if router else None,
                "A_bar": _percent(block["A_bar"]),
                "A_last": _percent(block["A_last"]),
                "forgetting": _percent(block["forgetting"]),
                "routing_accuracy": _percent(block["routing_accuracy"]),
                "summary": router.summary if router else "",
            }
        )
    return rows


def baseline_rows(run_dir: Path, config: dict[str, Any]) -> list[dict[str, Any]]:
    """The baselines written for the run's store fingerprint and task split under the runs folder."""
    rows = []
    for path in sorted(Path(run_dir).resolve().parent.glob("*/*/metrics.json")):
        try:
            payload = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if (
            not isinstance(payload, dict)
            or "method" not in payload
            or payload.get("store_fingerprint") != config["store_fingerprint"]
        ):
            continue
        if payload.get("stream") != config["stream"]:
            continue
        block = (payload.get("modes") or {}).get("none")
        if not isinstance(block, dict) or not all(
            isinstance(block.get(k), (int, float)) for k in ("A_bar", "A_last", "forgetting")
        ):
            continue  # edited or damaged: not a baseline row to trust
        rows.append(
            {
                "router": payload["method"],
                "kind": "baseline",
                "honest": True,
                "A_bar": _percent(block["A_bar"]),
                "A_last": _percent(block["A_last"]),
                "forgetting": _percent(block["forgetting"]),
                "routing_accuracy": None,
                "summary": f"baseline ({path.parent})",
            }
        )
    return rows


def best_honest_router(metrics: dict[str, Any]) -> str:
    """The honest router with the highest A_last in a run's metrics (ties: the registry's order)."""
    candidates = [n for n in ROUTERS if ROUTERS[n].honest and n in metrics["modes"]]
    if not candidates:
        raise UserError("this run's metrics.json has no honest router; re-evaluate it with `tosca eval RUN`")
    return max(candidates, key=lambda n: metrics["modes"][n]["A_last"])


def routers_report(run_dir: Path) -> list[dict[str, Any]]:
    config, metrics = run_metrics(run_dir)
    missing = [n for n in ROUTERS if n not in metrics["modes"]]
    if missing:
        raise UserError(
            f"run {run_dir} was evaluated before routers {', '.join(missing)} existed; "
            f"re-evaluate it with `tosca eval {run_dir}`"
        )
    return router_rows(metrics) + baseline_rows(run_dir, config)
