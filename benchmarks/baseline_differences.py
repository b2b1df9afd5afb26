"""What two remaining differences from the authors' code cost, measured on a real store: A_t after
each task with tosca's choice and with the authors' (docs/method.md's table of differences).

    python benchmarks/baseline_differences.py STORE [--only ridge,randumb]

On the store's train and test splits (B0 Inc2, class order seed 1993, as `tosca baselines`):

- ridge: tosca's ridge (RanPAC's rule on a seeded 80/20 split of the first task, grid 1e-8 ..
  1e13, kept for every task) against the authors' (RanPAC.py with no random projection:
  `optimise_ridge_parameter` on each task's rows, grid 1e-8 .. 1e8, float32 floor:
  `closed_form.authors_ridge`), the joint system solved with each (`closed_form.RidgeSystem`);
- randumb: gamma = 1/(d var) of the first task's features (tosca: streaming) against that of every
  training image at once (the authors' offline `RBFSampler(gamma='scale')` on all data).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ranpac_ridge_rule import accuracy_after, stream_rows

from tosca_heads.method import closed_form, linalg
from tosca_heads.method.baselines.randumb import RanDumb
from tosca_heads.method.baselines.ridge import Ridge


def _run(model: object, tasks: list, test_x: np.ndarray, test_y: np.ndarray) -> tuple[list[float], float]:
    accuracies, seconds = [], 0.0
    for x, y in tasks:
        start = time.perf_counter()
        model.partial_fit(x, y)  # type: ignore[attr-defined]
        seconds += time.perf_counter() - start
        accuracies.append(accuracy_after(model.decision_function(test_x), test_y, int(y.max()) + 1))  # type: ignore[attr-defined]
    return accuracies, seconds


class AuthorsRidge:
    """Ridge on the raw features with the authors' ridge chosen again at every task."""

    def __init__(self) -> None:
        self.ridges_: list[float] = []

    def partial_fit(self, x: np.ndarray, y: np.ndarray) -> None:
        h = torch.from_numpy(x).double()
        if not self.ridges_:
            self.system = closed_form.RidgeSystem(h.shape[1])
        classes = max(self.system.classes, int(y.max()) + 1)
        targets = F.one_hot(torch.from_numpy(y).long(), classes).double()
        with linalg.workers() as run:
            ridge = closed_form.authors_ridge(h, targets, len(self.ridges_), run)[0]
            self.system.add(h, targets, run)
            self.weights = self.system.solve(ridge, run)
        self.ridges_.append(ridge)

    def decision_function(self, x: np.ndarray) -> np.ndarray:
        return (torch.from_numpy(x).double() @ self.weights).numpy()


def _row(name: str, accuracies: list[float], seconds: float, said: str) -> str:
    return f"| {name} | {said} | {' '.join(f'{a:.2f}' for a in accuracies)} | {seconds:.2f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store")
    parser.add_argument("--only", default="ridge,randumb")
    args = parser.parse_args()
    tasks, test_x, test_y, _ = stream_rows(args.store)
    chosen = set(args.only.split(","))
    print("| method | choice | A_t after each task | seconds |")
    print("|---|---|---|---|")
    if "ridge" in chosen:
        ours = Ridge()
        accuracies, seconds = _run(ours, tasks, test_x, test_y)
        print(_row("ridge", accuracies, seconds, f"tosca: {ours.ridge_:g} (first task, kept)"))
        theirs = AuthorsRidge()
        accuracies, seconds = _run(theirs, tasks, test_x, test_y)
        every = " ".join(f"{r:g}" for r in theirs.ridges_)
        print(_row("ridge", accuracies, seconds, f"authors: {every} (per task)"))
    if "randumb" in chosen:
        model = RanDumb()
        accuracies, seconds = _run(model, tasks, test_x, test_y)
        print(_row("randumb", accuracies, seconds, f"tosca: gamma {model.gamma_:.4g} (first task)"))
        everything = np.concatenate([x for x, _ in tasks])
        gamma = float(1.0 / (everything.shape[1] * everything.var()))
        accuracies, seconds = _run(RanDumb(gamma=gamma), tasks, test_x, test_y)
        print(_row("randumb", accuracies, seconds, f"authors: gamma {gamma:.4g} (all training data)"))


if __name__ == "__main__":
    main()
