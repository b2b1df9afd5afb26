"""RanPAC's seconds per task on a demo-shaped store, before (main at d73a8da: every product and the
Cholesky on one thread) and now (`tosca_heads.method.linalg`'s fixed tiles on 1, 2, 4... worker
threads): the speedup, the bit-identity check across thread counts, where a task's time goes
(Gram update, solve, evaluation), and an estimate for more cores from the per-tile times.

    python benchmarks/ranpac_speed.py [--threads 1,2] [--tasks 5] [--projection-dim 10000] [--no-before]

The features are synthetic (timing does not depend on their values) in the demo store's shapes:
EuroSAT at 300 images per class and split, EfficientNet-Lite0 (dimension 1,280), 10 classes in 5
tasks of 2, 3,000 training rows (600 a task) and 3,000 test rows, M = 10,000. Each task:
`partial_fit` on its rows, then `decision_function` on the test rows of the classes seen (what
`tosca baselines` scores). Phases: the Gram update (the projection of the task's rows, H'H and H'Y), the ridge
choice (before: the first task only, an SVD of its projection; now: the authors' rule at every task), the solve (the Cholesky
factor of G + ridge I and two triangular solves) and the evaluation. The code before is
main's own file at d73a8da (read with `git show`), run as `tosca baselines` ran it there: on one
thread.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import subprocess
import sys
import time
import types
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from tosca_foundation.limits import usable_cores
from tosca_heads.method import baseline_estimators, closed_form, linalg

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "d73a8da"
PHASES = ("gram", "ridge", "solve", "evaluation")


def demo_shaped(
    tasks: int, seed: int = 0
) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray, np.ndarray]:
    """Per task (features, labels) of 2 classes x 300 rows, and the test rows (300 a class)."""
    rng = np.random.default_rng(seed)
    classes = 2 * tasks
    centres = rng.gamma(2.0, 0.5, size=(classes, 1280)).astype(np.float32)

    def rows(per_class: int) -> tuple[np.ndarray, np.ndarray]:
        y = np.repeat(np.arange(classes), per_class)
        return np.abs(centres[y] + rng.normal(scale=0.7, size=(len(y), 1280))).astype(np.float32), y

    (x, y), (test_x, test_y) = rows(300), rows(300)
    return [(x[(y // 2) == t], y[(y // 2) == t]) for t in range(tasks)], test_x, test_y


class Timer:
    """Seconds spent in named functions, by wrapping them where the code looks them up."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @contextlib.contextmanager
    def wrap(self, owner: object, name: str, phase: str) -> Iterator[None]:
        original = getattr(owner, name)

        def timed(*args: object, **kwargs: object) -> object:
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[phase] += time.perf_counter() - start

        setattr(owner, name, timed)
        try:
            yield
        finally:
            setattr(owner, name, original)


class Run:
    """One configuration's RanPAC through the tasks: its module (before or now), thread count,
    model, each task's seconds by phase and A_t."""

    def __init__(self, module: types.ModuleType, threads: int, m: int, before: bool):
        self.module, self.threads, self.before = module, threads, before
        self.model = module.RanPAC(projection_dim=m, seed=0)
        self.per_task: list[dict[str, float]] = []
        self.accuracies: list[float] = []

    def pinned(self) -> contextlib.AbstractContextManager:
        """As `tosca baselines` runs it: main's process-wide one thread before, one thread now for
        the calling thread (linalg's workers take the rest)."""
        if self.before:
            return self.module.single_threaded(torch.device("cpu"))
        return linalg.single_threaded()

    @property
    def solve_site(self) -> tuple[object, str]:
        """Where its solve is looked up: the module's `ridge_solve` before, the ridge system's now."""
        return (self.module, "ridge_solve") if self.before else (closed_form.RidgeSystem, "solve")

    @property
    def ridge_site(self) -> tuple[object, str]:
        """Its ridge choice: the first task's `_select_ridge` before, the authors' rule at every task now."""
        return (self.module.RanPAC, "_select_ridge") if self.before else (closed_form, "authors_ridge")

    def task(self, t: int, data: tuple) -> None:
        tasks, test_x, test_y = data
        x, y = tasks[t]
        timer = Timer()
        with (
            linalg_threads(self.threads),
            self.pinned(),
            timer.wrap(*self.solve_site, "solve"),
            timer.wrap(*self.ridge_site, "ridge"),
        ):
            start = time.perf_counter()
            self.model.partial_fit(x, y)
            fitted = time.perf_counter() - start
            seen = test_y < 2 * (t + 1)
            start = time.perf_counter()
            predicted = self.model.predict(test_x[seen])
            timer.seconds["evaluation"] = time.perf_counter() - start
        timer.seconds["gram"] = fitted - timer.seconds["solve"] - timer.seconds["ridge"]
        self.per_task.append(dict(timer.seconds))
        self.accuracies.append(float((predicted == test_y[seen]).mean()))


def module_before() -> types.ModuleType | None:
    """main's tosca_heads/method/baseline_estimators.py at d73a8da, as a module of its own (None outside a
    git checkout that has that commit)."""
    try:
        source = subprocess.run(
            ["git", "show", f"{BEFORE}:tosca_heads/method/baseline_estimators.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    module = types.ModuleType("baselines_before")
    sys.modules[module.__name__] = module  # its dataclasses and annotations look themselves up
    exec(compile(source, f"{BEFORE}:baselines.py", "exec"), module.__dict__)
    return module


@contextlib.contextmanager
def linalg_threads(threads: int) -> Iterator[None]:
    before = os.environ.get("TOSCA_LINALG_THREADS")
    os.environ["TOSCA_LINALG_THREADS"] = str(threads)
    try:
        yield
    finally:
        if before is None:
            del os.environ["TOSCA_LINALG_THREADS"]
        else:
            os.environ["TOSCA_LINALG_THREADS"] = before


def median(values: list[float]) -> float:
    return float(np.median(values))


def per_tile_seconds(rows: int, repeats: int = 5) -> dict[str, float]:
    """One thread's seconds for each kind of tile operation the new code runs."""
    gen = torch.Generator().manual_seed(0)
    b = linalg.TILE
    a = torch.randn(b, b, generator=gen, dtype=torch.float64)
    spd = a @ a.T + b * torch.eye(b, dtype=torch.float64)
    h = torch.rand(rows, b, generator=gen, dtype=torch.float64)
    x = torch.rand(rows, 1280, generator=gen)
    test = torch.rand(linalg.ROWS, 1280, generator=gen)  # one row block of evaluation
    p = torch.randn(1280, b, generator=gen)
    q = torch.randn(b, 10, generator=gen, dtype=torch.float64)
    c = spd.clone()
    ops = {
        "projection": lambda: torch.relu(x @ p).double(),
        "gram": lambda: h.T @ h,
        "potrf": lambda: torch.linalg.cholesky_ex(spd),
        "trsm": lambda: torch.linalg.solve_triangular(spd.mT, a, upper=True, left=False),
        "update": lambda: c.addmm_(a, a.mT, alpha=-1e-9),
        "solve_step": lambda: q.addmm_(a, q, alpha=-1e-9),
        "evaluation": lambda: torch.relu(test @ p).double(),
    }
    found = {}
    with linalg.single_threaded():
        for name, op in ops.items():
            op()
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                op()
                times.append(time.perf_counter() - start)
            found[name] = min(times)
    return found


def makespan(costs: list[float], workers: int) -> float:
    """The time `workers` threads take for items handed out in order to the first free one."""
    free = [0.0] * workers
    for cost in costs:
        free[free.index(min(free))] += cost
    return max(free)


def modelled_task(tile: dict[str, float], m: int, test_rows: float, workers: int) -> float:
    """A task's Gram update, solve and evaluation (of `test_rows` rows) on `workers` threads, from
    the per-tile times: every phase of linalg's schedule, each ending when its last item does."""
    n = len(linalg.spans(m))
    total = makespan([tile["projection"]] * n, workers)
    total += makespan([tile["gram"]] * (n * (n + 1) // 2), workers)
    for k in range(n):
        total += tile["potrf"] + makespan([tile["trsm"]] * (n - k - 1), workers)
        total += makespan([tile["update"]] * ((n - k - 1) * (n - k) // 2), workers)
        total += 2 * makespan([tile["solve_step"]] * (n - k - 1), workers)
    blocks = test_rows / linalg.ROWS
    return total + makespan([tile["evaluation"] * min(1.0, blocks)] * n * max(1, round(blocks)), workers)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--threads", default=",".join(str(t) for t in sorted({1, 2, usable_cores()})))
    parser.add_argument("--tasks", type=int, default=5)
    parser.add_argument("--projection-dim", type=int, default=10_000, help="RanPAC's projection size M")
    parser.add_argument("--no-before", action="store_true", help="skip main's single-threaded code")
    args = parser.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    data = demo_shaped(args.tasks)
    rows = len(data[0][0][1])
    print(
        f"RanPAC, M = {args.projection_dim:,}, {args.tasks} tasks of {rows} rows (dim 1,280), {usable_cores()} usable cores"
    )
    runs = {}
    before = None if args.no_before else module_before()
    if before is not None:
        runs["before (1 thread)"] = Run(before, 1, args.projection_dim, before=True)
    for count in threads:
        runs[f"now, {count} thread(s)"] = Run(baseline_estimators, count, args.projection_dim, before=False)
    # task by task, every configuration in turn (the order rotated): a machine whose speed drifts
    # slows them alike
    names = list(runs)
    for t in range(args.tasks):
        for name in names[t % len(names) :] + names[: t % len(names)]:
            runs[name].task(t, data)
    results = {name: (run.per_task, run.model.weights_, run.accuracies) for name, run in runs.items()}
    print("\n| code | s/task | Gram update | ridge choice (task 1) | solve | evaluation | A_last |")
    print("|---|---|---|---|---|---|---|")
    for name, (per_task, _, accuracies) in results.items():
        totals = [sum(t.values()) for t in per_task]
        phase = {p: median([t.get(p, 0.0) for t in per_task]) for p in PHASES}
        print(
            f"| {name} | {np.mean(totals):.2f} | {phase['gram']:.2f} | {per_task[0].get('ridge', 0.0):.2f} "
            f"| {phase['solve']:.2f} | {phase['evaluation']:.2f} | {100 * accuracies[-1]:.2f} |"
        )
    now = [name for name in results if name.startswith("now")]
    one = np.mean([sum(t.values()) for t in results[now[0]][0]])
    for name in now[1:]:
        mean = np.mean([sum(t.values()) for t in results[name][0]])
        print(f"{name}: {mean / one:.2f} of one thread's time ({one / mean:.2f}x)")
    digests = {name: hashlib.sha256(results[name][1].numpy().tobytes()).hexdigest()[:16] for name in now}
    same = len(set(digests.values())) == 1
    print(f"weights after the last task, sha256: {digests}: {'the same bits' if same else 'DIFFERENT'}")
    if before is not None:
        old, new = results["before (1 thread)"], results[now[0]]
        gap = float((old[1] - new[1]).abs().max() / old[1].abs().max())
        print(f"before against now: weights {gap:.1e} apart (relative), A_t equal: {old[2] == new[2]}")
    tile = per_tile_seconds(rows)
    test_rows = float(np.mean([np.sum(data[2] < 2 * (t + 1)) for t in range(args.tasks)]))
    print("\nper tile, one thread (ms): " + ", ".join(f"{k} {1000 * v:.1f}" for k, v in tile.items()))
    print("modelled s/task (Gram update + solve + evaluation; an ESTIMATE from the per-tile times):")
    for workers in (1, 2, 4, 8, 16):
        print(f"  {workers:2d} thread(s): {modelled_task(tile, args.projection_dim, test_rows, workers):.2f}")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
