"""Continual-learning metrics composed from small functions over an accuracy matrix.

A per-router metric of your own is one function over the accuracy curve and matrix, registered
once with `@register_metric(name)` (in a plug-in, a script or a notebook): `summarise` then puts it
into every metrics block (each router's and each baseline's metrics.json), and every table and
tracker that shows a block shows it too: a sweep's results.csv/.parquet and summary, a suite's
table, the console tables of `fit`, `sweep`, `baselines` and `tosca routers`, the comparison
files, and every tracker's events (MLflow, TensorBoard, a plug-in's); tests/tosca_heads/
experiments/test_extensions.py registers one from a plug-in and finds it in each.

>>> @register_metric("doc_first_task", label="A_0", summary="accuracy after the first task")
... def first_task(curve, matrix):
...     return curve[0]
>>> summarise([0.9, 0.8], [[0.9], [0.85, 0.75]])["doc_first_task"]
0.9
>>> del METRICS["doc_first_task"]  # (a doctest leaves the registry as it found it)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from featcache.foundation.registry import Registry

Curve = list[float]
Matrix = list[list[float]]


@dataclass(frozen=True)
class Metric:
    """A registered per-router metric: `compute(curve, matrix)` gives one number, `label` heads its
    column, `low`/`high` bound a value read back from a file (a fraction by default), `percent`
    shows it in %."""

    name: str
    compute: Callable[[Curve, Matrix], float]
    label: str
    low: float = 0.0
    high: float = 1.0
    percent: bool = True

    def holds(self, value: object) -> bool:
        """A value as tosca writes it: a finite number within [low, high] (None: not computed)."""
        if value is None:
            return True
        return (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and bool(np.isfinite(value))
            and self.low <= value <= self.high
        )


METRICS: Registry[Metric] = Registry("metric", "tosca_heads.method.metrics:METRICS")


def register_metric(
    name: str,
    label: str | None = None,
    summary: str = "",
    low: float = 0.0,
    high: float = 1.0,
    percent: bool = True,
) -> Callable[[Callable[[Curve, Matrix], float]], Callable[[Curve, Matrix], float]]:
    """A decorator registering `fn(curve, matrix) -> float` as the per-router metric `name` (its
    column `label`, default the name), bounded by [low, high] where a file is read back: every
    metrics block has it from then on (results files, tables, console, trackers).

    >>> @register_metric("doc_worst_task", label="worst task")
    ... def worst_task(curve, matrix):
    ...     return min(matrix[-1])
    >>> summarise([0.95, 0.8], [[0.95], [0.9, 0.7]])["doc_worst_task"]
    0.7
    >>> del METRICS["doc_worst_task"]  # (a doctest leaves the registry as it found it)
    """

    def decorate(fn: Callable[[Curve, Matrix], float]) -> Callable[[Curve, Matrix], float]:
        if name in BUILT_IN:
            raise ValueError(f"metric name {name!r} is a built-in figure of every metrics block")
        metric = Metric(name, fn, label or name, low, high, percent)
        METRICS.add(
            name, metric, summary or (fn.__doc__ or "").strip().partition("\n")[0], module=fn.__module__
        )
        return fn

    return decorate


def shown(metric: Metric, value: object) -> str:
    """A registered metric's value as a table cell: in % (or as it is), `–` where not computed."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not np.isfinite(value):
        return "–"
    return f"{100 * value:.2f}" if metric.percent else f"{value:g}"


def shown_spread(metric: Metric, mean: object, std: object) -> str:
    """A registered metric's mean ± std over seeds as table cells say each (`shown`); the mean
    alone where there is no std (one seed)."""
    if not isinstance(std, (int, float)) or isinstance(std, bool) or not np.isfinite(std):
        return shown(metric, mean)
    return f"{shown(metric, mean)} ± {shown(metric, std)}"


def registered() -> list[Metric]:
    """The registered per-router metrics, in the order they were registered."""
    return [METRICS[name] for name in METRICS]


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
    every block has the same keys. Each registered metric (`register_metric`) follows, by its name.
    """
    return {
        "A_t": [float(a) for a in curve],
        "A_bar": average_incremental_accuracy(curve),
        "A_last": last_accuracy(curve),
        "forgetting": forgetting(matrix),
        "accuracy_matrix": [[float(a) for a in row] for row in matrix],
        "routing_accuracy_t": None if routing is None else [float(r) for r in routing],
        "routing_accuracy": None if routing is None else float(routing[-1]),
        **{m.name: float(m.compute(list(curve), [list(row) for row in matrix])) for m in registered()},
    }


# the figures every metrics block has: no registered metric takes their names
BUILT_IN = frozenset(
    ("A_t", "A_bar", "A_last", "forgetting", "accuracy_matrix", "routing_accuracy_t", "routing_accuracy")
)
