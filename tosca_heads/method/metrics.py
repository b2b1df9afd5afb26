"""Continual-learning metrics composed from small functions over an accuracy matrix: one registry
for the built-in figures and a lab's own alike.

Every figure of a metrics block is an entry of `METRICS`: the built-ins (A_bar, A_last, forgetting,
the routing accuracy) are registered here first, a plug-in's own with `@register_metric(name)` (in a
plug-in, a script or a notebook) after them. `figures()` is the one list every table, file and
tracker iterates: `summarise` puts each into every metrics block (each router's and each baseline's
metrics.json), and every table and tracker that shows a block shows it too: a sweep's
results.csv/.parquet and summary, a suite's table and claims, the console tables of `fit`, `sweep`,
`baselines` and `tosca routers`, the comparison files, and every tracker's events (MLflow,
TensorBoard, a plug-in's); tests/tosca_heads/studies/test_extensions.py registers one from a
plug-in and finds it in each.

A metric declares how sure it is (`interval`): `EXACT`, a plain accuracy over the images of every
class seen after the last task (Clopper-Pearson for one run); `BOOTSTRAP`, anything else computed
from the accuracy matrix (a stratified bootstrap over images recomputes it, `method.uncertainty`); or
None (no interval, never bold, no verdict). A metric with an interval is compared between methods by
the paired bootstrap on the same images (a suite's bold entries and claims), in the direction it
declares (`better`: "higher" or "lower"), exactly as A_last is.

A bootstrap has nothing to resample where each class is all right or all wrong: its interval would
be a point. A metric may declare its `weights` (what one right answer of a task's block at a stage
adds to it near the observed answers: the built-ins do), and its interval and its differences are
then never narrower than the exact intervals of the counts behind it (`uncertainty.floor_of`). A
plug-in that declares none gets no interval (NaN: never bold, "not distinguishable") wherever its
bootstrap interval has zero width, never a zero-width one.

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

from tosca_foundation.arguments import check_types
from tosca_foundation.errors import UserValueError
from tosca_foundation.names import did_you_mean
from tosca_foundation.registry import Registry

Curve = list[float]
Matrix = list[list[float]]

EXACT = "exact"  # an accuracy over the last task's images: exact binomial (Clopper-Pearson) for one run
BOOTSTRAP = "bootstrap"  # recomputed from each class's images drawn with replacement (stratified)
INTERVALS = (EXACT, BOOTSTRAP)  # what a metric may declare (or None: no interval)
BETTER = ("higher", "lower")

# (matrix [T, T] of block accuracies (stage, block), sizes [T] of the blocks' images) -> [T, T]: what
# one right answer of block j's images at stage t adds to the metric, near the observed answers
# (where it is that linear sum of right answers: a best stage is taken as observed); None: no floor
Weights = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Metric:
    """A figure of every metrics block: `compute(curve, matrix)` gives one number (the routing
    accuracy, `from_routing`, is the routing curve's last value instead), `label` heads its column,
    `low`/`high` bound a value read back from a file (a fraction by default), `percent` shows it
    in %, `interval` says how sure it is (`EXACT`, `BOOTSTRAP` or None) and `better` which way a
    comparison ranks it; `replicates` is its vectorised form over bootstrap replicates, `weights`
    its linear form over the answers (`Weights`: the floor of its interval, `uncertainty.floor_of`)."""

    name: str
    compute: Callable[[Curve, Matrix], float]
    label: str
    low: float = 0.0
    high: float = 1.0
    percent: bool = True
    interval: str | None = None
    better: str = "higher"
    from_routing: bool = False
    # the same figure over many bootstrap replicates at once, (a_t [R, T], blocks [R, T, T]) -> [R]
    # (`uncertainty.replicated`); None: `compute` once per replicate
    replicates: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None
    weights: Weights | None = None

    @property
    def resampled(self) -> bool:
        """Recomputed from per-image answers (every metric with an interval but the routing
        accuracy, whose per-image routes are not kept): it has a bootstrap and a paired test."""
        return self.interval is not None and not self.from_routing

    def value(self, curve: Curve, matrix: Matrix, routing: Curve | None) -> float | None:
        """This metric of one router's (or baseline's) scores; None where it does not apply (the
        routing accuracy of a method without a router)."""
        if self.from_routing:
            return None if routing is None else float(routing[-1])
        return float(self.compute(list(curve), [list(row) for row in matrix]))

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
    interval: str | None = None,
    better: str = "higher",
    weights: Weights | None = None,
) -> Callable[[Callable[[Curve, Matrix], float]], Callable[[Curve, Matrix], float]]:
    """A decorator registering `fn(curve, matrix) -> float` as the per-router metric `name` (its
    column `label`, default the name), bounded by [low, high] where a file is read back: every
    metrics block has it from then on (results files, tables, console, trackers). With `interval`
    (`BOOTSTRAP`, or `EXACT` for an accuracy over the last task's images) it gets its interval,
    its bold entries and its verdicts as A_last does, ranked by `better` ("higher" or "lower").
    `weights(matrix, sizes)` (`Weights`) gives its interval an exact floor from the answers' counts;
    without it, a bootstrap interval of zero width is no interval (NaN), never a point.

    >>> @register_metric("doc_worst_task", label="worst task", interval="bootstrap")
    ... def worst_task(curve, matrix):
    ...     return min(matrix[-1])
    >>> summarise([0.95, 0.8], [[0.95], [0.9, 0.7]])["doc_worst_task"]
    0.7
    >>> del METRICS["doc_worst_task"]  # (a doctest leaves the registry as it found it)
    """
    check_types("register_metric", register_metric, locals())
    if interval not in (None, *INTERVALS):
        raise UserValueError(
            f"register_metric: interval {interval!r}{did_you_mean(interval, INTERVALS)} is not one of None, "
            f"{', '.join(map(repr, INTERVALS))}"
        )
    if better not in BETTER:
        raise UserValueError(
            f"register_metric: better {better!r}{did_you_mean(better, BETTER)} is not one of "
            f"{', '.join(map(repr, BETTER))}"
        )
    if not low < high:
        raise UserValueError(f"register_metric: low {low!r} must be below high {high!r}")

    def decorate(fn: Callable[[Curve, Matrix], float]) -> Callable[[Curve, Matrix], float]:
        if name in CURVES or name in BUILT_IN:
            raise ValueError(f"metric name {name!r} is a built-in figure of every metrics block")
        metric = Metric(name, fn, label or name, low, high, percent, interval, better, weights=weights)
        METRICS.add(
            name, metric, summary or (fn.__doc__ or "").strip().partition("\n")[0], module=fn.__module__
        )
        return fn

    return decorate


def figures() -> list[Metric]:
    """Every figure of a metrics block, the built-ins first, then each registered one in the order
    it was registered: the one list every table, file and tracker iterates."""
    return [METRICS[name] for name in METRICS]


def with_interval() -> list[Metric]:
    """The figures that carry an interval (`Metric.interval`)."""
    return [m for m in figures() if m.interval is not None]


def resampled() -> list[Metric]:
    """The figures recomputed from per-image answers: each has a bootstrap interval and a paired test."""
    return [m for m in figures() if m.resampled]


def metric_named(name: str) -> Metric:
    """The metric `name` (a KeyError names what is registered when it is none)."""
    if name not in METRICS:
        raise KeyError(f"no metric {name!r}; registered: {', '.join(METRICS)}")
    return METRICS[name]


RANKED = "A_last"  # the figure every choice ranks by: a sweep's point, predict's router, a bold entry


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and bool(np.isfinite(value))


def shown(
    metric: Metric,
    value: object,
    low: object = None,
    high: object = None,
    digits: int = 1,
    in_percent: bool = False,
) -> str:
    """A metric's value as a table cell, in % (or as it is), with its interval where there is one:
    '94.17 [89.2, 98.1]'; `–` where not computed. `in_percent`: the numbers are in % already."""
    if not _finite(value):
        return "–"
    scale = 100.0 if metric.percent and not in_percent else 1.0
    text = f"{scale * value:.2f}" if metric.percent else f"{value:g}"  # type: ignore[operator]
    if _finite(low) and _finite(high):
        text += f" [{scale * low:.{digits}f}, {scale * high:.{digits}f}]"  # type: ignore[operator]
    return text


def shown_in(metric: Metric, block: dict[str, object] | None, digits: int = 1) -> str:
    """A metric of a metrics block as a table cell, with the block's interval of it (`shown`)."""
    if block is None:
        return "–"
    intervals = block.get("intervals")
    low, high = intervals.get(metric.name, (None, None)) if isinstance(intervals, dict) else (None, None)
    return shown(metric, block.get(metric.name), low, high, digits)


def columns_of(validation: bool) -> list[Metric | tuple[str, Metric]]:
    """A table's figure columns: every figure (`figures()`), the validation split's `RANKED` one
    (("validation", metric)) right after its test column where the table has a validation split."""
    found: list[Metric | tuple[str, Metric]] = []
    for m in figures():
        found.append(m)
        if validation and m.name == RANKED:
            found.append(("validation", m))
    return found


def intervals_said() -> str:
    """How the intervals of a table are computed, per kind, from what each figure declares: 'A_last
    and routing acc: exact binomial; A_bar and forgetting: a stratified bootstrap over samples, never
    narrower than their counts allow'."""
    words = {
        EXACT: "exact binomial",
        BOOTSTRAP: "a stratified bootstrap over samples, never narrower than their counts allow",
    }  # (in the tables' notes)
    parts = []
    for kind, said in words.items():
        labels = [m.label for m in with_interval() if m.interval == kind]
        if labels:
            listed = labels[0] if len(labels) == 1 else f"{', '.join(labels[:-1])} and {labels[-1]}"
            parts.append(f"{listed}: {said}")
    return "; ".join(parts)


def header_of(column: Metric | tuple[str, Metric]) -> str:
    """A figure column's heading ('A_last', 'val A_last')."""
    return f"val {column[1].label}" if isinstance(column, tuple) else column.label


def accuracy(pred: np.ndarray, labels: np.ndarray) -> float:
    return float((pred == labels).mean()) if len(labels) else float("nan")


def block_accuracies(pred: np.ndarray, labels: np.ndarray, task_of: np.ndarray, n_tasks: int) -> list[float]:
    """Accuracy on each task block's test samples (blocks 0..n_tasks-1)."""
    return [accuracy(pred[task_of == j], labels[task_of == j]) for j in range(n_tasks)]


def average_incremental_accuracy(curve: list[float]) -> float:
    return float(np.mean(curve))


def last_accuracy(curve: list[float]) -> float:
    return float(curve[-1])


def forgetting_of_replicates(a_t: np.ndarray, blocks: np.ndarray) -> np.ndarray:
    """`forgetting` of every replicate at once: blocks [R, T, T] (stage, block) -> [R]."""
    tasks = blocks.shape[1]
    if tasks < 2:
        return np.zeros(len(blocks))
    drops = [blocks[:, j : tasks - 1, j].max(1) - blocks[:, tasks - 1, j] for j in range(tasks - 1)]
    return np.mean(drops, axis=0)


def a_bar_weights(matrix: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """A_bar = mean over t of A_t: a right answer at stage t adds 1 / (T x the images seen at t)."""
    tasks = len(sizes)
    with np.errstate(divide="ignore", invalid="ignore"):
        per = 1.0 / (tasks * np.cumsum(sizes))
    return np.tril(np.ones((tasks, tasks))) * np.nan_to_num(per, posinf=0.0)[:, None]


def a_last_weights(matrix: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """A_last: a right answer at the last stage adds 1 / the images seen."""
    weights = np.zeros((len(sizes), len(sizes)))
    weights[-1] = 1.0 / sizes.sum() if sizes.sum() else 0.0
    return weights


def forgetting_weights(matrix: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """forgetting: old block j's right answer at its best earlier stage (the first, as observed) adds
    1 / ((T - 1) n_j), one at the last stage takes as much away."""
    tasks = len(sizes)
    weights = np.zeros((tasks, tasks))
    for j in range(tasks - 1):
        if sizes[j]:
            best = j + int(np.argmax(matrix[j : tasks - 1, j]))
            weights[best, j] += 1.0 / ((tasks - 1) * sizes[j])
            weights[tasks - 1, j] -= 1.0 / ((tasks - 1) * sizes[j])
    return weights


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
    """The metrics block of every metrics.json (TOSCA's routers and the baselines alike): the
    curves it is computed from, then every figure (`figures()`) by its name.

    Methods without a router (the baselines) pass routing=None and get null routing fields, so
    every block has the same keys."""
    block: dict[str, object] = {
        "A_t": [float(a) for a in curve],
        "accuracy_matrix": [[float(a) for a in row] for row in matrix],
        "routing_accuracy_t": None if routing is None else [float(r) for r in routing],
    }
    return {**block, **{m.name: m.value(curve, matrix, routing) for m in figures()}}


# the lists every metrics block keeps beside its figures: no metric takes their names
CURVES = frozenset(("A_t", "accuracy_matrix", "routing_accuracy_t"))


def _built_in(
    name: str, compute: Callable[[Curve, Matrix], float], label: str, summary: str, **declared: object
) -> None:
    METRICS.add(name, Metric(name, compute, label, **declared), summary)  # type: ignore[arg-type]


_built_in(
    "A_bar",
    lambda curve, matrix: average_incremental_accuracy(curve),
    "A_bar",
    "average incremental accuracy: the mean over tasks of A_t",
    interval=BOOTSTRAP,
    replicates=lambda a_t, blocks: a_t.mean(1),
    weights=a_bar_weights,
)
_built_in(
    "A_last",
    lambda curve, matrix: last_accuracy(curve),
    "A_last",
    "A_t after the last task",
    interval=EXACT,
    replicates=lambda a_t, blocks: a_t[:, -1],
    weights=a_last_weights,
)
_built_in(
    "forgetting",
    lambda curve, matrix: forgetting(matrix),
    "forgetting",
    "the mean drop of each old task's accuracy from its best earlier value",
    low=-1.0,
    interval=BOOTSTRAP,
    better="lower",
    replicates=forgetting_of_replicates,
    weights=forgetting_weights,
)
_built_in(
    "routing_accuracy",
    lambda curve, matrix: float("nan"),
    "routing acc",
    "how often the router picks the image's own task's module (TOSCA's routers only)",
    interval=EXACT,
    from_routing=True,
)
BUILT_IN = frozenset(METRICS)  # the figures tosca itself registers (a plug-in's come after them)
