"""RanPAC's ridge rule against its authors' on a real store: the ridge chosen at each task, A_t after
each task, and the seconds, at several M.

    python benchmarks/ranpac_ridge_rule.py STORE [--projection-dims 2000,5000,10000] [--no-authors] [--no-before]

Three runs per M on the store's train and test splits (B0 Inc2, class order seed 1993, as `tosca
baselines`):

- now: `RanPAC` as it is (the authors' rule at every task, in the smaller form of the solve);
- authors: their RanPAC.py `replace_fc` and `optimise_ridge_parameter` transcribed line by line on
  the same projection and the same shuffle of each task's rows (float32 on the CPU: their G, Q
  and solves are CPU tensors), so any difference is the rule's arithmetic, not the data;
- before: main's RanPAC at f1a7264 (one ridge, chosen on the first task in float64 over 1e-8 ..
  1e13, then kept; the M x M Gram form with its eigendecomposition fallback).

The authors' run solves 17 M x M float32 systems a task: minutes at M = 10,000 on a small CPU.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from featcache import open_store
from tosca_heads.method import closed_form
from tosca_heads.method.baseline_estimators import RanPAC
from tosca_heads.method.protocol import TaskStream

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "f1a7264"


def stream_rows(
    store_path: str,
) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray, np.ndarray, TaskStream]:
    store = open_store(store_path)
    x, labels = np.asarray(store.features("train"), dtype=np.float32), store.labels("train")
    test_x, test_labels = np.asarray(store.features("test"), dtype=np.float32), store.labels("test")
    stream = TaskStream.build(int(labels.max()) + 1, 2, 2)
    y, test_y = stream.remap(labels), stream.remap(test_labels)
    tasks = [
        (x[np.isin(y, stream.task_classes(t))], y[np.isin(y, stream.task_classes(t))])
        for t in range(stream.num_tasks)
    ]
    return tasks, test_x, test_y, stream


def accuracy_after(scores: np.ndarray, test_y: np.ndarray, seen: int) -> float:
    rows = test_y < seen
    return float((scores[rows].argmax(1) == test_y[rows]).mean() * 100)


def run_model(
    model: object, tasks: list, test_x: np.ndarray, test_y: np.ndarray
) -> tuple[list[float], list[float], float]:
    accuracies, ridges, seconds = [], [], 0.0
    for x, y in tasks:
        start = time.perf_counter()
        model.partial_fit(x, y)  # type: ignore[attr-defined]
        seconds += time.perf_counter() - start
        ridges.append(float(model.ridge_))  # type: ignore[attr-defined]
        accuracies.append(accuracy_after(model.decision_function(test_x), test_y, int(y.max()) + 1))  # type: ignore[attr-defined]
    return accuracies, ridges, seconds


def authors(
    m: int, seed: int, tasks: list, test_x: np.ndarray, test_y: np.ndarray
) -> tuple[list[float], list[float], float]:
    """RanPAC.py's replace_fc / optimise_ridge_parameter, float32 on the CPU, on tosca's projection
    (ReLU(x W_rand)) and tosca's seeded shuffle of each task's rows (their loader's shuffle)."""
    w_rand = torch.randn(tasks[0][0].shape[1], m, generator=torch.Generator().manual_seed(seed))
    total = int(max(y.max() for _, y in tasks)) + 1
    g, q = torch.zeros(m, m), torch.zeros(m, total)
    accuracies, ridges, seconds = [], [], 0.0
    for t, (x, labels) in enumerate(tasks):
        start = time.perf_counter()
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed + t))
        features_h = F.relu(torch.from_numpy(x)[order] @ w_rand)
        y = F.one_hot(torch.from_numpy(labels)[order].long(), total).float()
        q, g = q + features_h.T @ y, g + features_h.T @ features_h
        candidates = 10.0 ** np.arange(-8, 9)
        n_fit = int(features_h.shape[0] * 0.8)
        q_val = features_h[:n_fit].T @ y[:n_fit]
        g_val = features_h[:n_fit].T @ features_h[:n_fit]
        losses = []
        for ridge in candidates:
            wo = torch.linalg.solve(g_val + ridge * torch.eye(m), q_val).T
            losses.append(F.mse_loss(features_h[n_fit:] @ wo.T, y[n_fit:]))
        ridge = candidates[np.argmin(np.array(losses))]
        wo = torch.linalg.solve(g + ridge * torch.eye(m), q).T
        seconds += time.perf_counter() - start
        ridges.append(float(ridge))
        scores = (F.relu(torch.from_numpy(test_x) @ w_rand) @ wo.T).numpy()
        accuracies.append(accuracy_after(scores[:, : int(labels.max()) + 1], test_y, int(labels.max()) + 1))
    return accuracies, ridges, seconds


def module_before() -> types.ModuleType:
    source = subprocess.run(
        ["git", "show", f"{BEFORE}:tosca_heads/method/baseline_estimators.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    module = types.ModuleType("baselines_before")
    sys.modules[module.__name__] = module
    exec(compile(source, f"{BEFORE}:baseline_estimators.py", "exec"), module.__dict__)
    return module


def said(name: str, m: int, found: tuple[list[float], list[float], float]) -> str:
    accuracies, ridges, seconds = found
    ridges_said = " ".join(f"{r:.0e}" for r in ridges)
    return f"M={m:>6,} {name:8s} A_t {' '.join(f'{a:.2f}' for a in accuracies)}  ridges {ridges_said}  {seconds:.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store")
    parser.add_argument("--projection-dims", default="2000,5000,10000")
    parser.add_argument("--no-authors", action="store_true")
    parser.add_argument("--no-before", action="store_true")
    args = parser.parse_args()
    tasks, test_x, test_y, stream = stream_rows(args.store)
    print(
        f"{args.store}: {stream.describe()}, {sum(len(y) for _, y in tasks):,} training rows, "
        f"{len(test_y):,} test rows; authors' grid {closed_form.AUTHORS_RIDGES[0]:.0e} .. {closed_form.AUTHORS_RIDGES[-1]:.0e}"
    )
    before = None if args.no_before else module_before()
    for m in (int(v) for v in args.projection_dims.split(",")):
        now = RanPAC(projection_dim=m, seed=0)
        print(
            said("now", m, run_model(now, tasks, test_x, test_y)),
            f"state {now.state_bytes() / 2**20:.1f} MiB",
            flush=True,
        )
        if not args.no_authors:
            print(said("authors", m, authors(m, 0, tasks, test_x, test_y)), flush=True)
        if before is not None:
            old = before.RanPAC(projection_dim=m, seed=0)
            found = run_model(old, tasks, test_x, test_y)
            print(said("before", m, found), f"state {old.state_bytes() / 2**20:.1f} MiB", flush=True)


if __name__ == "__main__":
    main()
