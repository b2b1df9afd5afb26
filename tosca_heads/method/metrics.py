"""Continual-learning metrics composed from small functions over an accuracy matrix."""

from __future__ import annotations

import numpy as np


def accuracy(pred: np.ndarray, labels: np.ndarray) -> float:
    return float((pred == labels).mean()) if len(labels) else float("nan")


def block_accuracies(pred: np.ndarray, labels: np.ndarray, task_of: np.ndarray, n_tasks: int) -> list[float]:
    """Accuracy on each task block's test samples (blocks 0..n_tasks-1)."""
    return [accuracy(pred[task_of == j], labels[task_of == j]) for j in range(n_tasks)]


def average_incremental_accuracy(curve: list[float]) -> float:
    return float(np.mean(curve))


def last_accuracy(curve: list[float]) -> float:
    return float(curve[-1])


def forgetting(matrix: list[list[float]]) -> float:
    """Mean over old blocks of (best accuracy before the last stage - accuracy at the last stage)."""
    if len(matrix) < 2:
        return 0.0
    final = matrix[-1]
    drops = [max(row[j] for row in matrix[:-1] if j < len(row)) - final[j] for j in range(len(matrix) - 1)]
    return float(np.mean(drops))


def summarise(
    curve: list[float], matrix: list[list[float]], routing: list[float] | None = None
) -> dict[str, object]:
    """The metrics block of every metrics.json (TOSCA's routers and the baselines alike).

    Methods without a router (the baselines) pass routing=None and get null routing fields, so
    every block has the same keys.
    """
    return {
        "A_t": [float(a) for a in curve],
        "A_bar": average_incremental_accuracy(curve),
        "A_last": last_accuracy(curve),
        "forgetting": forgetting(matrix),
        "accuracy_matrix": [[float(a) for a in row] for row in matrix],
        "routing_accuracy_t": None if routing is None else [float(r) for r in routing],
        "routing_accuracy": None if routing is None else float(routing[-1]),
    }
