"""What the conformance checks share: a small stream of well-separated classes (three tasks of two
classes) and the one-line refusal of a class."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch

from tosca_heads.conformance.outcome import NonConforming

T = TypeVar("T")

TASKS, PER_TASK, DIM = 3, 2, 16  # three tasks of two classes, 16-dimensional features
CLASSES = TASKS * PER_TASK


@dataclass(frozen=True)
class ToyStream:
    """Features [n, DIM] (float32 tensors, as a run hands a baseline) and incremental labels [n]
    (int64): class c's rows around 4 e_c, far enough apart that any method worth running tells them
    apart. Drawn from `seed`, so every check sees the same numbers."""

    train_x: torch.Tensor
    train_y: np.ndarray
    test_x: torch.Tensor
    test_y: np.ndarray

    @staticmethod
    def draw(per_class: int = 20, seed: int = 0) -> ToyStream:
        rng = np.random.default_rng(seed)
        means = np.eye(CLASSES, DIM) * 4.0

        def split(n: int) -> tuple[torch.Tensor, np.ndarray]:
            x = np.concatenate([rng.normal(size=(n, DIM)) + means[c] for c in range(CLASSES)])
            return torch.from_numpy(x.astype(np.float32)), np.repeat(np.arange(CLASSES), n)

        (train_x, train_y), (test_x, test_y) = split(per_class), split(10)
        return ToyStream(train_x, train_y, test_x, test_y)

    def task_rows(self, labels: np.ndarray, task: int) -> np.ndarray:
        """The rows of task `task`'s classes."""
        return np.flatnonzero((labels >= task * PER_TASK) & (labels < (task + 1) * PER_TASK))

    def seen_rows(self, labels: np.ndarray, task: int) -> np.ndarray:
        """The rows of every class seen up to and including task `task`."""
        return np.flatnonzero(labels < (task + 1) * PER_TASK)


def refuse(kind: str, name: str, why: str) -> NonConforming:
    """The one-line refusal of a class: "baseline Name: why"."""
    return NonConforming(f"{kind} {name}: {first_line(why)}")


def first_line(text: str) -> str:
    return (str(text).strip().splitlines() or [""])[0]


def calling(kind: str, name: str, what: str, call: Callable[..., T], *args: Any) -> T:
    """`call(*args)`'s answer; an exception it raises refused in one line naming `what` was called."""
    try:
        return call(*args)
    except NonConforming:
        raise
    except Exception as exc:
        raise refuse(kind, name, f"{what} raised {type(exc).__name__}: {first_line(str(exc))}") from exc


def is_count(value: Any) -> bool:
    """An int that is no bool (a count), numpy's integers included."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)
