"""Evaluation after each task: every stored module on the seen test features, routed, scored.

A finished task's module is frozen, so its normalised outputs on the test features never change:
they are computed once and kept (within a memory budget), and each later stage recomputes only
the cosine classifier part (its rows drift, and new classes arrive). The test rows are held
sorted by incremental class id, so the rows seen after task t are a prefix of that order.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from tosca_heads.engine.kernels import bmm, luca_forward, normalize_rows
from tosca_heads.engine.trainer import GroupTrainer
from tosca_heads.features import FeatureSource
from tosca_heads.router import MODES, entropy_and_prediction, predict, route, shuffled_order
from tosca_heads.stream import TaskStream

CACHE_BYTES_CPU = 1 << 30  # module outputs kept across stages (CIFAR-100, 20 tasks, G = 1: 614 MB)
CHUNK_BYTES = 64 << 20  # logits computed at once


def default_cache_bytes(device: torch.device) -> int:
    """On CUDA, a quarter of the free memory; on the CPU, 1 GiB."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free // 4
    return CACHE_BYTES_CPU


class StageEvaluator:
    """Scores a group after each task, under every routing mode, on the test rows seen so far."""

    def __init__(
        self,
        stream: TaskStream,
        test_labels: np.ndarray,
        source: FeatureSource,
        device: torch.device,
        cache_bytes: int | None = None,
    ):
        self.stream, self.device = stream, device
        self.test_labels = test_labels  # incremental class ids, store order
        self.order = np.argsort(test_labels, kind="stable")  # store rows, by class
        self.position = np.empty_like(self.order)
        self.position[self.order] = np.arange(len(self.order))  # store row -> sorted position
        self.labels = torch.from_numpy(test_labels[self.order]).to(device)
        self.true_task = torch.from_numpy(stream.task_of(test_labels[self.order])).to(device)
        self.features = source.clean("test", self.order).to(device)
        self.cache_bytes = default_cache_bytes(device) if cache_bytes is None else cache_bytes
        self._cache: dict[int, tuple[torch.Tensor, int]] = {}  # task -> (unit outputs [G, N, d], rows filled)
        self._cached_bytes = 0

    def seen(self, task: int) -> int:
        """How many test rows (a prefix of the sorted order) belong to the classes seen after `task`."""
        return int(np.searchsorted(self.test_labels[self.order], self.stream.seen_classes(task)))

    def _units(self, trainer: GroupTrainer, module: int, n: int) -> torch.Tensor:
        """Normalised outputs of a module on the first n sorted test rows: [G, n, d]."""
        params = trainer.layout.views(trainer.modules_[module])
        if module in self._cache:
            cache, filled = self._cache[module]
        else:
            size = trainer.groups * self.features.numel() * 4
            if self._cached_bytes + size > self.cache_bytes:
                return normalize_rows(luca_forward(params, self.features[:n], trainer.layout.flow))
            cache, filled = torch.empty(trainer.groups, *self.features.shape, device=self.device), 0
            self._cached_bytes += size
        if filled < n:
            cache[:, filled:n] = normalize_rows(
                luca_forward(params, self.features[filled:n], trainer.layout.flow)
            )
            filled = n
        self._cache[module] = (cache, filled)
        return cache[:, :n]

    @torch.no_grad()
    def evaluate(self, task: int, trainer: GroupTrainer) -> tuple[list[dict[str, dict[str, Any]]], float]:
        """Per configuration: {mode: {A_t, blocks (accuracy per task block), routing}}; and the seconds."""
        start = time.perf_counter()
        n, modules, groups = self.seen(task), task + 1, trainer.groups
        w_unit = normalize_rows(trainer.weight_).transpose(1, 2)  # [G, d, C]
        sigma = trainer.sigma_.view(-1, 1, 1)
        entropy = torch.empty(groups, modules, n, device=self.device)
        predictions = torch.empty(groups, modules, n, dtype=torch.long, device=self.device)
        step = max(1, CHUNK_BYTES // max(1, groups * w_unit.shape[-1] * 4))
        for i in range(modules):
            units = self._units(trainer, i, n)
            for lo in range(0, n, step):
                hi = min(n, lo + step)
                logits = bmm(units[:, lo:hi].contiguous(), w_unit) * sigma
                entropy[:, i, lo:hi], predictions[:, i, lo:hi] = entropy_and_prediction(logits)
        results = self._score(task, entropy, predictions, n)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return results, time.perf_counter() - start

    def _score(
        self, task: int, entropy: torch.Tensor, predictions: torch.Tensor, n: int
    ) -> list[dict[str, dict[str, Any]]]:
        labels, true_task = self.labels[:n], self.true_task[:n]
        seen_rows = np.flatnonzero(self.test_labels < self.stream.seen_classes(task))  # store order
        class_ordered = self.position[seen_rows[np.argsort(self.test_labels[seen_rows], kind="stable")]]
        shuffled = self.position[seen_rows[shuffled_order(n, task)]]
        to_device = lambda a: torch.from_numpy(a).to(self.device)  # noqa: E731
        counts = torch.bincount(true_task, minlength=task + 1).double()
        scores: dict[str, tuple[torch.Tensor, ...]] = {}
        for mode in MODES:
            chosen = route(mode, entropy, true_task, to_device(class_ordered), to_device(shuffled))
            correct = (predict(predictions, chosen) == labels).double()
            blocks = torch.zeros(correct.shape[0], task + 1, dtype=torch.float64, device=self.device)
            blocks.index_add_(1, true_task, correct)
            scores[mode] = (
                correct.mean(1).cpu(),
                (blocks / counts).cpu(),
                (chosen == true_task).double().mean(1).cpu(),
            )
        return [
            {
                mode: {
                    "A_t": float(a_t[g]),
                    "blocks": [float(v) for v in blocks[g]],
                    "routing": float(routing[g]),
                }
                for mode, (a_t, blocks, routing) in scores.items()
            }
            for g in range(entropy.shape[0])
        ]
