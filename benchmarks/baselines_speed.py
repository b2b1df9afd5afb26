"""Every baseline's seconds on one store under `tosca baselines`' protocol, and where they go: Gram
sums, solves, evaluation and the rest; each new frozen-feature method against RanPAC's time in the
same run (the issue's bound: at most RanPAC's).

    python benchmarks/baselines_speed.py [--store cache/eurosat/effnet_lite0-demo300.zarr]
        [--methods all] [--init-cls 2] [--increment 2] [--repeats 1] [--val-fraction 0.1] [--json]
        [--set ranpac_projection_dim=2000 ...]

Each method runs through `running.baseline_runs.run_baseline` (the command's code: one
CPU thread for BLAS, `linalg`'s tiled products on `linalg_threads()` workers), on the store's
cached features, task by task, scored on the test rows of the classes seen after every task.
Its wall time is split by wrapping, for the duration of its run only:
- **Gram sums**: `linalg.add_gram` and `linalg.add_cross` (the tiled H'H and H'Y sums);
- **solves**: `linalg.cholesky`, `linalg.cholesky_solve` and torch's factorisations and solves
  (`torch.linalg.cholesky`/`eigh`/`svd`/`solve`/`inv`/`pinv`/`lstsq`, `torch.cholesky_solve`),
  outermost call only;
- **evaluation**: the estimator's `predict` (everything it calls, its solves included);
- **rest**: what is left (statistics summed with plain torch products, random features, moves).
The seconds are the best of `--repeats` runs. Accuracies are printed beside them as a check that
each run is the method's, not a timing of something else.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import platform
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from featcache.store import FeatureStore
from tosca_foundation.limits import usable_cores
from tosca_foundation.units import human_bytes
from tosca_heads.method import linalg
from tosca_heads.method.baseline_registry import BASELINES, arguments, baseline_names, given_params
from tosca_heads.method.protocol import StreamConfig, ValidationConfig
from tosca_heads.requests.plan import FitPlan
from tosca_heads.running.baseline_runs import run_baseline

ROOT = Path(__file__).resolve().parents[1]
GRAM = ("add_gram", "add_cross")
SOLVE_LINALG = ("cholesky", "cholesky_solve")
SOLVE_TORCH = ("cholesky", "cholesky_ex", "eigh", "svd", "solve", "inv", "pinv", "lstsq")


class Split:
    """Seconds by part, counting only the outermost wrapped call (a solve inside `predict` is
    evaluation's)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.depth = 0

    def wrap(self, part: str, function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if self.depth:
                return function(*args, **kwargs)
            self.depth += 1
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[part] += time.perf_counter() - start
                self.depth -= 1

        return timed


@contextlib.contextmanager
def patched(targets: list[tuple[Any, str, str]], split: Split) -> Iterator[None]:
    """Each (namespace, attribute, part) wrapped for the duration, restored after."""
    saved = [(space, name, getattr(space, name)) for space, name, _ in targets]
    try:
        for space, name, part in targets:
            setattr(space, name, split.wrap(part, getattr(space, name)))
        yield
    finally:
        for space, name, original in saved:
            setattr(space, name, original)


def targets_for(method: str) -> list[tuple[Any, str, str]]:
    """What to wrap for one method: linalg's and torch's functions (also where its module imported
    them by name), and its class's `predict`."""
    cls = BASELINES[method]
    module = sys.modules[cls.__module__]
    found: list[tuple[Any, str, str]] = [(cls, "predict", "evaluation")]
    for name in GRAM:
        found.append((linalg, name, "Gram sums"))
        if getattr(module, name, None) is getattr(linalg, name):
            found.append((module, name, "Gram sums"))
    for name in SOLVE_LINALG:
        found.append((linalg, name, "solves"))
        if getattr(module, name, None) is getattr(linalg, name):
            found.append((module, name, "solves"))
    found += [(torch.linalg, name, "solves") for name in SOLVE_TORCH if hasattr(torch.linalg, name)]
    found.append((torch, "cholesky_solve", "solves"))
    return found


def measure(method: str, plan: FitPlan, repeats: int, given: dict[str, Any]) -> dict[str, Any]:
    best: dict[str, Any] | None = None
    for _ in range(repeats):
        split = Split()
        with patched(targets_for(method), split):
            start = time.perf_counter()
            result = run_baseline(method, plan, **arguments(method, given))
            seconds = time.perf_counter() - start
        if best is None or seconds < best["seconds"]:
            parts = {part: split.seconds.get(part, 0.0) for part in ("Gram sums", "solves", "evaluation")}
            parts["rest"] = max(seconds - sum(parts.values()), 0.0)
            best = {
                "method": method,
                "seconds": seconds,
                "parts": parts,
                "A_last": result.metrics["A_last"],
                "A_bar": result.metrics["A_bar"],
                "parameters": result.parameters,
                "state_bytes": result.metrics.get("state_bytes"),
                "reference": result.reference,
            }
    assert best is not None
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, default=ROOT / "cache/eurosat/effnet_lite0-demo300.zarr")
    parser.add_argument("--methods", default="all", help="comma-separated, or all")
    parser.add_argument("--init-cls", type=int, default=2)
    parser.add_argument("--increment", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument(
        "--val-fraction",
        type=float,
        default=0.0,
        help="a validation split, as `tosca baselines --val-fraction`",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    parser.add_argument(
        "--set", action="append", default=[], help="a baseline's parameter, METHOD_NAME=VALUE (repeatable)"
    )
    args = parser.parse_args()
    store = FeatureStore.open(args.store)
    plan = FitPlan.build(
        store, StreamConfig(args.init_cls, args.increment), ValidationConfig(args.val_fraction)
    )
    methods = baseline_names(args.methods.split(","))
    pairs = dict(item.split("=", 1) for item in args.set)
    given = given_params(methods, pairs, spell=lambda key: key, text=True)
    rows = [measure(method, plan, args.repeats, given) for method in methods]
    ranpac = next((r["seconds"] for r in rows if r["method"] == "ranpac"), None)
    facts = {
        "store": str(args.store),
        "split": f"B0 Inc{args.increment} (first task {args.init_cls}), {plan.stream.num_tasks} tasks",
        "machine": f"{platform.machine()}, {usable_cores()} usable cores, torch {torch.__version__}",
        "linalg_threads": linalg.linalg_threads(),
        "omp": os.environ.get("OMP_NUM_THREADS", ""),
    }
    if args.json:
        print(json.dumps({**facts, "rows": rows}))
        return
    print(f"{facts['store']}: {facts['split']}; {facts['machine']}; linalg threads {facts['linalg_threads']}")
    head = f"{'method':<12} {'seconds':>8} {'x RanPAC':>8} {'Gram':>6} {'solves':>7} {'eval':>6} {'rest':>6}"
    print(head + f" {'A_last':>7} {'A_bar':>7} {'params':>12} {'state':>10}")
    for row in rows:
        share = {part: row["parts"][part] / max(row["seconds"], 1e-12) for part in row["parts"]}
        ratio = f"{row['seconds'] / ranpac:.2f}" if ranpac else "-"
        print(
            f"{row['method']:<12} {row['seconds']:>8.2f} {ratio:>8} {share['Gram sums']:>6.0%} "
            f"{share['solves']:>7.0%} {share['evaluation']:>6.0%} {share['rest']:>6.0%} "
            f"{100 * row['A_last']:>7.2f} {100 * row['A_bar']:>7.2f} {row['parameters']:>12,} "
            f"{human_bytes(row['state_bytes']) if row['state_bytes'] is not None else '-':>10}"
            + ("  (reference)" if row["reference"] else "")
        )
    if ranpac:
        slower = [r["method"] for r in rows if r["seconds"] > ranpac and r["method"] != "ranpac"]
        print(f"slower than RanPAC here: {', '.join(slower) or 'none'}")


if __name__ == "__main__":
    main()
