"""Evaluation after each task: every stored module on the seen test features, routed, scored.

A finished task's module is frozen, so its normalised outputs on the test features never change:
they are computed once and kept (within a memory budget), and each later stage recomputes only
the cosine classifier part (its rows drift, and new classes arrive). The test rows are held
sorted by incremental class id, so the rows seen after task t are a prefix of that order.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from tosca_heads.engine.cores import evaluation_working
from tosca_heads.engine.kernels import bmm, normalize_rows
from tosca_heads.engine.layout import ParamLayout
from tosca_heads.engine.numeric_errors import NumericalError, scale_refusal
from tosca_heads.engine.outputs import module_outputs
from tosca_heads.method.class_statistics import FrozenModel
from tosca_heads.method.features import FeatureSource
from tosca_heads.method.linalg import pin_this_thread
from tosca_heads.method.protocol import TaskStream
from tosca_heads.method.scale import outside_cosine_reach
from tosca_heads.method.ties import TIED, TIED_ROUTE
from tosca_heads.routers import ROUTERS, ReferenceView, route
from tosca_heads.routers.scores import module_scores, predict, shuffled_order

# one configuration's {router: {A_t, blocks, routing, confusion, correct, routed}}: `correct` and
# `routed` per image of the split, packed (answered right; routed to its own task's module)
Scores = dict[str, dict[str, Any]]
CACHE_BYTES_CPU = 1 << 30  # module outputs kept across stages (CIFAR-100, 20 tasks, G = 1: 614 MB)
CHUNK_BYTES = 64 << 20  # logits computed at once
FORWARD_BYTES = 256 << 20  # one [G, rows, d] activation of a module forward over test rows
# On a CPU the logits are multiplied 512 test rows at a time: MKL ran [512, 768] @ [768, 100] at
# about 60 GFLOP/s and the whole [10,240, 768] at 35 (one core of the dev machine); row blocks of
# a matmul give bit-identical results, so the routing figures do not move.
CPU_MATMUL_ROWS = 512


def default_cache_bytes(device: torch.device) -> int:
    """On CUDA, a quarter of the free memory; on the CPU, 1 GiB."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free // 4
    return CACHE_BYTES_CPU


@dataclass(frozen=True)
class Snapshot:
    """What evaluation after a task reads: the frozen modules so far and that moment's classifier.

    The trainer never writes into these tensors again (each task makes new ones), so a snapshot
    can be evaluated while the next task trains."""

    layout: ParamLayout
    modules: tuple[torch.Tensor, ...]  # one [G, size] per finished task
    weight: torch.Tensor  # [G, C, d]
    sigma: torch.Tensor  # [G]
    frozen: FrozenModel | None = None  # the frozen-feature routers' classifiers after this task

    @property
    def groups(self) -> int:
        return int(self.weight.shape[0])


class ModuleScorer:
    """Every module of a snapshot on fixed rows: its normalised outputs (kept within a memory
    budget, since a frozen module's never change), and from them, with that snapshot's classifier,
    each module's entropy, energy and argmax class (`routers.scores.module_scores`). Evaluation and
    `predict` both score through it, so a run's figures and its predictions on the same features
    are the same computation."""

    def __init__(self, features: torch.Tensor, device: torch.device, cache_bytes: int | None = None):
        self.features, self.device = features, device
        self.cache_bytes = default_cache_bytes(device) if cache_bytes is None else cache_bytes
        self._cache: dict[int, tuple[torch.Tensor, int]] = {}  # task -> (unit outputs [G, N, d], rows filled)
        self._cached_bytes = 0

    def units(self, state: Snapshot, module: int, n: int) -> torch.Tensor:
        """Normalised outputs of a module on the first n rows: [G, n, d]."""
        if module in self._cache:
            cache, filled = self._cache[module]
        else:
            size = state.groups * self.features.numel() * 4
            if self._cached_bytes + size > self.cache_bytes:
                return self._forward(
                    state,
                    module,
                    0,
                    n,
                    torch.empty(state.groups, n, self.features.shape[1], device=self.device),
                )
            cache, filled = torch.empty(state.groups, *self.features.shape, device=self.device), 0
            self._cached_bytes += size
        if filled < n:
            self._forward(state, module, filled, n, cache[:, filled:n])
            filled = n
        self._cache[module] = (cache, filled)
        return cache[:, :n]

    def _forward(self, state: Snapshot, module: int, lo: int, hi: int, out: torch.Tensor) -> torch.Tensor:
        """Normalised module outputs of rows lo..hi into `out`, a few rows at a time (a module's
        intermediate tensors are [G, rows, d] each: thousands of rows x hundreds of configurations
        would not fit a GPU at once)."""
        step = max(1, FORWARD_BYTES // (state.groups * self.features.shape[1] * 4))
        for start in range(lo, hi, step):
            stop = min(hi, start + step)
            rows = self.features[start:stop]
            module_outputs(state.layout, state.modules[module], rows, True, out[:, start - lo : stop - lo])
        return out

    @torch.no_grad()
    def logits(self, state: Snapshot, module: int, lo: int, hi: int) -> torch.Tensor:
        """One module's logits on rows lo..hi: [G, rows, C], as `scores` computes them."""
        w_unit = normalize_rows(state.weight).transpose(1, 2)
        return self._logits(self.units(state, module, hi)[:, lo:hi], w_unit) * state.sigma.view(-1, 1, 1)

    @torch.no_grad()
    def scores(
        self, state: Snapshot, modules: int, n: int, top_probability: bool = False
    ) -> tuple[torch.Tensor, ...]:
        """Over the first n rows and modules 0..modules-1: entropy, argmax class and energy, each
        [G, M, n] (and, with `top_probability`, the softmax probability of the argmax class)."""
        groups = state.groups
        w_unit = normalize_rows(state.weight).transpose(1, 2)  # [G, d, C]
        sigma = state.sigma.view(-1, 1, 1)
        entropy = torch.empty(groups, modules, n, device=self.device)
        energy = torch.empty(groups, modules, n, device=self.device)
        predictions = torch.empty(groups, modules, n, dtype=torch.long, device=self.device)
        top = torch.empty(groups, modules, n, device=self.device) if top_probability else None
        for i in range(modules):
            units = self.units(state, i, n)
            for lo, hi in self._blocks(n, groups * w_unit.shape[-1]):
                logits = self._logits(units[:, lo:hi], w_unit) * sigma
                entropy[:, i, lo:hi], predictions[:, i, lo:hi], energy[:, i, lo:hi] = module_scores(logits)
                if top is not None:
                    top[:, i, lo:hi] = torch.softmax(logits, -1).amax(-1)
        return (entropy, predictions, energy) if top is None else (entropy, predictions, energy, top)

    def _blocks(self, n: int, row_width: int) -> Iterator[tuple[int, int]]:
        """The row ranges whose logits are computed and scored at once: chunks of CHUNK_BYTES of
        logits, and on a CPU each chunk's blocks of CPU_MATMUL_ROWS, scored one block at a time
        (a block's logits stay in cache; every figure of a row is the same whatever rows share
        its block, tested)."""
        step = max(1, CHUNK_BYTES // max(1, row_width * 4))
        block = CPU_MATMUL_ROWS if self.device.type == "cpu" else step
        for chunk in range(0, n, step):
            end = min(n, chunk + step)
            for lo in range(chunk, end, block):
                yield lo, min(end, lo + block)

    def _logits(self, units: torch.Tensor, w_unit: torch.Tensor) -> torch.Tensor:
        """Cosines of unit outputs [G, rows, d] with unit classifier rows [G, d, C]: [G, rows, C]."""
        if self.device.type != "cpu":
            return bmm(units.contiguous(), w_unit)
        out = torch.empty(units.shape[0], units.shape[1], w_unit.shape[-1])
        for lo in range(0, units.shape[1], CPU_MATMUL_ROWS):
            hi = min(units.shape[1], lo + CPU_MATMUL_ROWS)
            bmm(units[:, lo:hi].contiguous(), w_unit, out=out[:, lo:hi])
        return out


class StageEvaluator:
    """Scores a group after each task, under every router, on the rows of one split seen so far
    (the test split, or the validation rows held out of the train split)."""

    def __init__(
        self,
        stream: TaskStream,
        labels: np.ndarray,
        source: FeatureSource,
        device: torch.device,
        cache_bytes: int | None = None,
        split: str = "test",
        rows: np.ndarray | None = None,
    ):
        self.stream, self.device, self.split = stream, device, split
        self.test_labels = labels  # incremental class ids of `rows` (store order)
        rows = np.arange(len(labels)) if rows is None else np.asarray(rows, dtype=np.int64)
        self.rows = rows
        self.order = np.argsort(labels, kind="stable")  # positions in `rows`, by class
        self.position = np.empty_like(self.order)
        self.position[self.order] = np.arange(len(self.order))  # position in `rows` -> sorted position
        self.labels = torch.from_numpy(labels[self.order]).to(device)
        self.true_task = torch.from_numpy(stream.task_of(labels[self.order])).to(device)
        features = source.clean(split, rows[self.order]).to(device)
        if not bool(torch.isfinite(features).all()):
            raise NumericalError(
                f"the {split} features hold NaN or inf; check the store with `tosca cache verify STORE`"
            )
        peak = outside_cosine_reach(features)
        if peak is not None:
            raise scale_refusal(f"the {split} features", peak, features.shape[-1])
        self.scorer = ModuleScorer(features, device, cache_bytes)

    @property
    def features(self) -> torch.Tensor:
        return self.scorer.features

    def images(self) -> dict[str, np.ndarray]:
        """What each image of the split is, in the order of every `correct` array: its store row, its
        class (the store's label) and the task that brings that class (`method.uncertainty`)."""
        return {
            "rows": self.rows,
            "classes": self.stream.order[self.test_labels],
            "task": self.stream.task_of(self.test_labels),
        }

    def seen(self, task: int) -> int:
        """How many rows (a prefix of the sorted order) belong to the classes seen after `task`."""
        return int(np.searchsorted(self.test_labels[self.order], self.stream.seen_classes(task)))

    @torch.no_grad()
    def evaluate(self, task: int, state: Snapshot) -> tuple[list[Scores], float]:
        """Per configuration: {router: {A_t, blocks (accuracy per task block), routing}}; and the seconds."""
        start = time.perf_counter()
        n = self.seen(task)
        entropy, predictions, energy = self.scorer.scores(state, task + 1, n)
        view = self._view(task, state, entropy, energy, n)
        results = self._score(task, view, predictions)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return results, time.perf_counter() - start

    def _view(
        self, task: int, state: Snapshot, entropy: torch.Tensor, energy: torch.Tensor, n: int
    ) -> ReferenceView:
        seen_rows = np.flatnonzero(self.test_labels < self.stream.seen_classes(task))  # store order
        class_ordered = self.position[seen_rows[np.argsort(self.test_labels[seen_rows], kind="stable")]]
        shuffled = self.position[seen_rows[shuffled_order(n, task)]]
        classes = np.arange(self.stream.seen_classes(task))
        return ReferenceView(
            entropy=entropy,
            energy=energy,
            frozen=None if state.frozen is None else state.frozen.to(self.device),
            features=self.features[:n],
            class_task=torch.from_numpy(self.stream.task_of(classes)).to(self.device),
            true_task=self.true_task[:n],
            class_ordered=torch.from_numpy(class_ordered).to(self.device),
            shuffled=torch.from_numpy(shuffled).to(self.device),
        )

    def _score(self, task: int, view: ReferenceView, predictions: torch.Tensor) -> list[Scores]:
        n = view.true_task.shape[0]
        labels, true_task = self.labels[:n], view.true_task
        counts = torch.bincount(true_task, minlength=task + 1).double()
        scores: dict[str, tuple[torch.Tensor, ...]] = {}
        for name in ROUTERS:
            router = ROUTERS[name]
            if not router.available(view):  # no statistics kept, or an on-request router not asked for
                continue
            chosen = route(name, view)  # TIED where the router's top was tied: a wrong route
            answers = predict(predictions, chosen)  # TIED where the answer's top (or route) tied
            correct = (answers == labels).double()
            blocks = torch.zeros(correct.shape[0], task + 1, dtype=torch.float64, device=self.device)
            blocks.index_add_(1, true_task, correct)
            scores[name] = (
                correct.mean(1).cpu(),
                (blocks / counts).cpu(),
                (chosen == true_task).double().mean(1).cpu(),
                _routing_confusion(true_task, chosen, task + 1),
                self._in_split_order(correct.bool().cpu().numpy()),
                self._in_split_order((chosen == true_task).cpu().numpy()),
                self._chosen_in_split_order(chosen.cpu().numpy()),
                (answers == TIED).sum(1).cpu(),
                (chosen == TIED).sum(1).cpu(),
            )
        return [
            {
                router: {
                    "A_t": float(a_t[g]),
                    "blocks": [float(v) for v in blocks[g]],
                    "routing": float(routing[g]),
                    "confusion": confusion[g],
                    "correct": right[g],
                    "routed": routed[g],
                    "chosen": picked[g],
                    "tied": int(tied[g]),  # answers tied (a tied route among them): counted wrong
                    "tied_routes": int(tied_routes[g]),
                }
                for router, (a_t, blocks, routing, confusion, right, routed, picked, tied, tied_routes) in (
                    scores.items()
                )
            }
            for g in range(view.groups)
        ]

    def _in_split_order(self, correct: np.ndarray) -> np.ndarray:
        """[G, n] per-image flags of the seen rows in class order (answered right, or routed right)
        -> [G, bytes]: every row of the split in its own order (`images`), a row of a class not
        seen yet False, packed 8 to a byte."""
        full = np.zeros((correct.shape[0], len(self.order)), dtype=bool)
        full[:, self.order[: correct.shape[1]]] = correct
        return np.packbits(full, axis=1)

    def _chosen_in_split_order(self, chosen: np.ndarray) -> np.ndarray:
        """[G, n] the task each seen row (in class order) was routed to -> [G, N] int16 in the
        split's own order (`images`), -1 for a row of a class not seen yet, `TIED_ROUTE` for a tied
        route: the route kept, from which a routing confusion is counted when read
        (`records.run_cell`)."""
        full = np.full((chosen.shape[0], len(self.order)), -1, dtype=np.int16)
        full[:, self.order[: chosen.shape[1]]] = np.where(chosen == TIED, TIED_ROUTE, chosen)
        return full


def _routing_confusion(true_task: torch.Tensor, chosen: torch.Tensor, tasks: int) -> list[list[list[int]]]:
    """Per configuration, the confusion matrix of the routing (scikit-learn's `confusion_matrix`
    with labels 0..tasks-1, counted here so that the engine needs no scikit-learn, which a GPU
    image lacks: docs/gpu.md): row t counts the images of task t by the task whose module the
    router picked (the diagonal is routed right); a tied route (`method.ties`) is in no cell."""
    picked = chosen.cpu().numpy()
    cells = true_task.cpu().numpy() * tasks + picked  # [G, n]: truth x picked
    return [
        np.bincount(row[pick >= 0], minlength=tasks * tasks).reshape(tasks, tasks).tolist()
        for row, pick in zip(cells, picked, strict=True)
    ]


class StageQueue:
    """Evaluations in task order, each run at once or, with `overlap`, on one background thread
    while the next task trains (on a multi-core CPU the two share the machine). Each evaluation
    scores every split's evaluator (test, and validation where the run holds one out) on one
    snapshot."""

    def __init__(self, evaluators: dict[str, StageEvaluator], overlap: bool):
        self.evaluators = evaluators
        self._pool = ThreadPoolExecutor(1, initializer=_quiet_thread) if overlap else None
        self._queue: deque[tuple[Any, Future | tuple]] = deque()

    def submit(self, task: int, state: Callable[[], Snapshot], payload: Any) -> None:
        """state() gives the snapshot to score; it runs on the evaluation thread too, in task order
        (so work it does, such as updating the routers' statistics, leaves the training thread)."""
        if self._pool is None:
            self._queue.append((payload, self._run(task, state)))
        else:
            self._queue.append((payload, self._pool.submit(self._run_beside, task, state)))

    def _run_beside(self, task: int, state: Callable[[], Snapshot]) -> tuple[dict[str, list[Scores]], float]:
        """On the evaluation thread, marked at work meanwhile (the step leaves it a core)."""
        with evaluation_working():
            return self._run(task, state)

    def _run(self, task: int, state: Callable[[], Snapshot]) -> tuple[dict[str, list[Scores]], float]:
        snapshot = state()
        scored, seconds = {}, 0.0
        for split, evaluator in self.evaluators.items():
            scored[split], spent = evaluator.evaluate(task, snapshot)
            seconds += spent
        return scored, seconds

    def ready(self, wait: bool = False) -> Iterator[tuple[Any, dict[str, list[Scores]], float]]:
        """Finished evaluations in task order: (payload, {split: per-configuration routers'
        scores}, seconds)."""
        while self._queue:
            payload, result = self._queue[0]
            if isinstance(result, Future):
                if not (wait or result.done()):
                    return
                result = result.result()
            self._queue.popleft()
            yield payload, *result

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


def _quiet_thread() -> None:
    """The evaluation thread computes as the training thread does: denormals flushed, one thread
    (this thread's BLAS and parallel loops: the same bits whatever the process's thread count)."""
    torch.set_flush_denormal(True)
    pin_this_thread()
