"""The frozen-feature routers' classifiers after each task, computed once per process and task split.

They depend only on the store's clean training features and the task split, never on the point
being trained, and building them is a sizeable share of a sweep point's cost (docs/benchmarks.md).
A sweep worker trains many points of the same store and split one after another, so it keeps
them here. Runs that write files keep their own
`ClassStatistics` (they save its state), so this serves runs that write nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import torch

from tosca_heads.method.class_statistics import ClassStatistics, FrozenModel
from tosca_heads.routers.learned import RouterLearners

MAX_SPLITS = 4  # task splits kept at once per process (each holds one model per task)


class StatisticsMemo:
    """Models after tasks 0, 1, ... of one store and task split, extended in task order on demand."""

    def __init__(self, dim: int, routers: tuple[str, ...] = ()):
        self.statistics = ClassStatistics(dim, learners=RouterLearners(routers) if routers else None)
        self.models: list[FrozenModel] = []
        self.lock = threading.Lock()

    def model_after(
        self, task: int, read: Callable[[int], tuple[torch.Tensor, np.ndarray, range]]
    ) -> FrozenModel:
        """The model over the classes of tasks 0..task; read(t) gives task t's clean features,
        incremental labels and class range when it has to be added."""
        with self.lock:
            while len(self.models) <= task:
                features, labels, classes = read(len(self.models))
                self.statistics.partial_fit(features, labels, classes)
                self.models.append(self.statistics.model())
            return self.models[task]


_MEMOS: dict[tuple, StatisticsMemo] = {}
_MEMOS_LOCK = threading.Lock()


def shared_statistics(key: tuple, dim: int, routers: tuple[str, ...] = ()) -> StatisticsMemo:
    """This process's memo for `key` (the store's fingerprint, the task split and the on-request
    routers whose learners it keeps: `routers`)."""
    with _MEMOS_LOCK:
        if key not in _MEMOS:
            if len(_MEMOS) >= MAX_SPLITS:
                _MEMOS.pop(next(iter(_MEMOS)))
            _MEMOS[key] = StatisticsMemo(dim, routers)
        return _MEMOS[key]
