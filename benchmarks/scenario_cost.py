"""Each scenario's whole table on one store beside the class-incremental table on the same store
(issue 56, point 4: within 3x its time), with every method's figures, a 95% bootstrap interval of
A_last (test images resampled, 1,000 draws, seed 0) and which differences from the best method
hold by the paired bootstrap (the same draws for both methods).

    python benchmarks/scenario_cost.py --store STORE [--methods tosca,simplecil,...]
        [--scenarios cil,til,fscil,blurry,dil] [--read-as-for-dil cifar100_superclasses]
        [--routers lda,ncm,...] [--recurring task_rows] [--module-per task] [--later-modules train]
        [--set gacl_buffer_size=2048 ...] [--json] [--out report.json]

Everything runs through `tosca_heads.applied.scenario_runs.run_scenario` (the command's code);
a method a scenario refuses is listed with its one-line reason and left out of that table's time.
TOSCA is trained once per scenario and answers with each router of `--routers` (a row each; its
seconds are the training's and every router's answers together).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from featcache.store import FeatureStore
from tosca_foundation.errors import UserError
from tosca_heads.applied.scenario_runs import run_scenario, store_labels
from tosca_heads.method.scenarios import scenario

DRAWS = 1000


def _last_correct(plan: Any, answers: list[np.ndarray]) -> np.ndarray:
    rows = plan.steps[-1].eval_rows
    return (answers[-1] == plan.test_ids[rows]).astype(np.float64)


def bootstrap(correct: dict[str, np.ndarray]) -> tuple[dict[str, tuple[float, float]], dict[str, bool]]:
    """Each method's 95% interval of A_last and whether its difference from the best holds (the
    paired interval of the difference excludes 0), on the same resampled images."""
    rng = np.random.default_rng(0)
    n = len(next(iter(correct.values())))
    draws = rng.integers(0, n, size=(DRAWS, n))
    means = {m: c[draws].mean(1) for m, c in correct.items()}
    best = max(correct, key=lambda m: correct[m].mean())
    intervals = {m: (float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))) for m, v in means.items()}
    holds = {m: bool(np.percentile(means[best] - v, 2.5) > 0) for m, v in means.items() if m != best}
    return intervals, holds


def against_best_baseline(correct: dict[str, np.ndarray], baselines: list[str]) -> dict[str, dict[str, Any]]:
    """Each TOSCA row against the strongest baseline (the highest A_last): the difference, its
    paired 95% interval (the same resampled images for both) and the verdict: "above" or "below"
    where the interval excludes 0, else "tie". Empty where no baseline ran."""
    if not baselines:
        return {}
    rng = np.random.default_rng(0)
    n = len(next(iter(correct.values())))
    draws = rng.integers(0, n, size=(DRAWS, n))
    best = max(baselines, key=lambda m: correct[m].mean())
    out = {}
    for label, c in correct.items():
        if label in baselines:
            continue
        diff = c[draws].mean(1) - correct[best][draws].mean(1)
        low, high = float(np.percentile(diff, 2.5)), float(np.percentile(diff, 97.5))
        verdict = "above" if low > 0 else ("below" if high < 0 else "tie")
        out[label] = {
            "baseline": best,
            "difference": float(c.mean() - correct[best].mean()),
            "interval": (low, high),
            "verdict": verdict,
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--methods", default="tosca,simplecil,ridge,slda,fecam,acil,gacl")
    parser.add_argument("--scenarios", default="cil,til,fscil,blurry,dil")
    parser.add_argument("--read-as-for-dil", default="cifar100_superclasses")
    parser.add_argument(
        "--set", action="append", default=[], help="METHOD_PARAM=VALUE, e.g. gacl_buffer_size=2048"
    )
    parser.add_argument("--routers", default="lda", help="TOSCA's honest routers, comma-separated")
    parser.add_argument("--recurring", default="task_rows", help="TOSCA: task_rows or first_task")
    parser.add_argument("--module-per", default="task", help="TOSCA: task or step")
    parser.add_argument("--later-modules", default="train", help="TOSCA: train or first")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", default="", help="also write the report as JSON to this file")
    args = parser.parse_args()
    methods = tuple(args.methods.split(","))
    method_params: dict[str, dict[str, Any]] = {}
    for text in args.set:
        key, _, value = text.partition("=")
        method, _, name = key.partition("_")
        if method == "ds":  # ds_al_...
            method, _, name = key.partition("_al_")
            method = "ds_al"
        method_params.setdefault(method, {})[name] = float(value) if "." in value else int(value)
    method_params.setdefault("tosca", {}).update(
        routers=tuple(args.routers.split(",")),
        recurring=args.recurring,
        module_per=args.module_per,
        later_modules=args.later_modules,
    )
    store = FeatureStore.open(args.store)
    report = []
    for name in args.scenarios.split(","):
        read_as = args.read_as_for_dil if name == "dil" else ""
        start = time.perf_counter()
        plan = scenario(name).plan(store_labels(store, read_as))
        results, refused = [], {}
        for method in methods:
            try:
                results += run_scenario(store, name, (method,), None, method_params, read_as)
            except UserError as exc:
                refused[method] = str(exc)
        seconds = time.perf_counter() - start
        correct = {r.label: _last_correct(plan, r.answers) for r in results}
        intervals, holds = bootstrap(correct) if correct else ({}, {})
        routed = {r.label: correct[r.label] for r in results if r.router}
        versus = against_best_baseline(correct, [r.label for r in results if not r.router])
        router_holds = bootstrap(routed)[1] if len(routed) > 1 else {}  # among TOSCA's routers only
        report.append(
            {
                "scenario": name,
                "plan": plan.describe(),
                "table_seconds": seconds,
                "methods": [
                    {
                        "method": r.label,
                        "figures": r.figures,
                        "seconds": r.seconds,
                        "A_last_95": intervals[r.label],
                        "below_best_holds": holds.get(r.label),
                        "below_best_router_holds": router_holds.get(r.label),
                        "against_best_baseline": versus.get(r.label),
                        "last_step_correct": correct[r.label].astype(int).tolist(),  # for any later pair
                    }
                    for r in results
                ],
                "refused": refused,
            }
        )
        if not args.json:
            print(f"\n## {plan.describe()}  (table: {seconds:.1f} s)")
            for r in results:
                low, high = intervals[r.label]
                figures = "  ".join(f"{k} {100 * v:.2f}" for k, v in r.figures.items())
                mark = (
                    ""
                    if r.label not in holds
                    else (" (below best: holds)" if holds[r.label] else " (tie with best)")
                )
                if r.label in router_holds:
                    mark += (
                        " [below the best router: holds]"
                        if router_holds[r.label]
                        else " [ties the best router]"
                    )
                if r.label in versus:
                    v = versus[r.label]
                    mark += f" {{vs {v['baseline']}: {100 * v['difference']:+.2f}, {v['verdict']}}}"
                print(
                    f"{r.label:<18} {figures}  A_last 95% [{100 * low:.2f}, {100 * high:.2f}]  {r.seconds:.1f} s{mark}"
                )
            for method, why in refused.items():
                print(f"{method:<10} refused: {why}")
    cil = next((r["table_seconds"] for r in report if r["scenario"] == "cil"), None)
    if cil and not args.json:
        print("\nscenario  table seconds  x cil")
        for r in report:
            print(f"{r['scenario']:<9} {r['table_seconds']:>13.1f}  {r['table_seconds'] / cil:.2f}")
    if args.json:
        print(json.dumps(report, indent=1, default=float))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1, default=float))


if __name__ == "__main__":
    main()
