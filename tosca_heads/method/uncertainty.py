"""How sure each figure is, and the tests behind every verdict: pure functions over per-image
outcomes, the one place every table, claim and sweep takes its intervals, tests and ties from.

What is kept per run, split and method (TOSCA under one router, or a baseline): `Outcomes`, which
images it answered right after each task (`correct` [T, N]), with each image's class and the task
that brought that class. Every figure is recomputed from them, never by training again.

- **A_last** (and the routing accuracy) of one run is a plain accuracy over the images of every
  class seen: an exact binomial interval (Clopper-Pearson, `clopper_pearson`).
- **A_bar and forgetting** are functions of several A_t on nested image sets: a seeded bootstrap
  over images that recomputes them from the resampled images (`intervals`), stratified by class
  (each class keeps its number of images, as a test set is built), its percentile interval.
- **Over seeds**: mean, standard deviation (n - 1) and n (`spread`); the interval and standard
  error of a mean over seeds (`intervals` of several runs) resample the seeds as well as the
  images, and a mean A_last is never surer than one run's exact interval of its images.
- **A difference** ("A beats B", "A within X of B", a bold entry, a sweep's test check): a paired
  bootstrap (`paired_difference`): every replicate draws the same images for both sides, and the
  seeds of each side (the same seed positions when both have as many: paired by seed too); the
  difference of the two means is recomputed, and its percentile interval at `LEVEL` decides
  (`beats`, `within`): "holds", "does not hold", or "not distinguishable at this sample size". A
  figure with no images behind it (a similarity of modules) is compared over seeds by a paired t
  interval (`seed_difference`).
- **A sweep's ties**: points whose mean is within one standard error of the best's (`ties`); the
  standard error of a mean accuracy is the bootstrap's, never below its images' binomial one by
  Agresti and Coull's "plus four" (`plus_four_se`: a split answered all right still has noise).

The bootstrap draws each class's images with replacement from a generator seeded with `SEED`: the
draws depend only on the seed and the classes' sizes, so every method on the same images is scored
on the same draws, whichever others it is computed with, on any machine, thread or worker count.
Right answers are counted in float32 over whole numbers (exact), so no sum's order moves a bit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tosca_heads.method.distributions import beta_quantile, t_quantile
from tosca_heads.method.metrics import EXACT as EXACT_KIND
from tosca_heads.method.metrics import Metric, metric_named, resampled, with_interval

LEVEL = 0.95  # every interval and test: two-sided 95%
REPLICATES = 1000  # bootstrap replicates
SEED = 0  # the bootstrap's generator


def methods_said() -> dict[str, object]:
    """How every interval in a file was computed (metrics.json's "uncertainty"): per metric with an
    interval, as it declares (`metrics.Metric.interval`), and how differences are tested."""
    said: dict[str, object] = {"level": LEVEL}
    for metric in with_interval():
        if metric.from_routing:
            said[metric.name] = "exact binomial (Clopper-Pearson) over the images"
        elif metric.interval == EXACT_KIND:
            said[metric.name] = (
                "one run: exact binomial (Clopper-Pearson) over its images; a mean over seeds: the bootstrap"
            )
        else:
            said[metric.name] = (
                f"stratified bootstrap over images (each class keeps its count), {REPLICATES} replicates, "
                f"seed {SEED}, percentile interval; a mean over seeds draws the seeds too"
            )
    said["differences"] = "paired bootstrap: the same images (and seeds) drawn for both sides"
    return said


HOLDS, FAILS, UNCLEAR = "holds", "does not hold", "not distinguishable at this sample size"
BOOTSTRAP = "bootstrap"  # a stratified bootstrap over images (and seeds)
EXACT = "clopper-pearson"  # an exact binomial interval
PAIRED = "paired bootstrap"
SEEDS_T = "paired t over seeds"


class DifferentImages(ValueError):
    """Two outcomes to compare are not on the same images (the caller says which, in one line)."""


@dataclass(frozen=True)
class Outcomes:
    """One run's answers on one split: `correct[t, i]` whether image i was answered right after task
    t (False before its class was seen), `classes[i]` its class (the store's label) and `task[i]` the
    task that brought that class (the same for every image of a class); `rows` the store rows of
    the split they are (for `same_images`); `routed[t, i]` whether a router sent image i to its own
    task's module after task t (None for a method without a router)."""

    correct: np.ndarray  # bool [T, N]
    classes: np.ndarray  # int [N]
    task: np.ndarray  # int [N]
    rows: np.ndarray  # int [N]
    routed: np.ndarray | None = None  # bool [T, N]

    @property
    def tasks(self) -> int:
        return int(self.correct.shape[0])

    @property
    def images(self) -> int:
        """Images of the classes seen after the last task: what A_last is measured on."""
        return int((self.task < self.tasks).sum())

    def right(self) -> int:
        """Images answered right after the last task."""
        return int(self.correct[-1][self.task < self.tasks].sum())


def same_images(a: Outcomes, b: Outcomes) -> bool:
    """Both on the same images (rows and classes), so they can be compared image by image."""
    return np.array_equal(a.rows, b.rows) and np.array_equal(a.classes, b.classes)


# ------------------------------------------------------------------------------------------ exact


def clopper_pearson(right: int, n: int, level: float = LEVEL) -> tuple[float, float]:
    """The exact binomial interval of an accuracy of `right` out of `n` (NaN, NaN when n is 0)."""
    if n <= 0:
        return math.nan, math.nan
    alpha = 1.0 - level
    low = 0.0 if right == 0 else beta_quantile(alpha / 2, right, n - right + 1)
    high = 1.0 if right == n else beta_quantile(1 - alpha / 2, right + 1, n - right)
    return low, high


def plus_four_se(accuracy: float, n: int) -> float:
    """The standard error of an accuracy over n images by Agresti and Coull's "plus four": two right
    and two wrong answers added, so a split answered all right (or all wrong) is not taken for one
    without noise (NaN when n is 0)."""
    if n <= 0 or math.isnan(accuracy):
        return math.nan
    p = (accuracy * n + 2) / (n + 4)
    return math.sqrt(p * (1 - p) / (n + 4))


def spread(values: Sequence[float]) -> tuple[float, float, int]:
    """Mean, standard deviation (n - 1; NaN for one value) and n of figures over seeds."""
    finite = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not finite:
        return math.nan, math.nan, 0
    std = float(np.std(finite, ddof=1)) if len(finite) > 1 else math.nan
    return float(np.mean(finite)), std, len(finite)


def bracket(low: float | None, high: float | None, scale: float = 100.0, digits: int = 2) -> str:
    """'[92.10, 93.90]' (in % with the default scale); '' when there is no interval."""
    if low is None or high is None or math.isnan(low) or math.isnan(high):
        return ""
    return f"[{scale * low:.{digits}f}, {scale * high:.{digits}f}]"


# ------------------------------------------------------------------------------------------ the bootstrap


@dataclass(frozen=True)
class _Draws:
    """Per replicate (the first row: the images as observed), per class and column of the stacked
    outcomes: how many of the drawn images were answered right."""

    classes: np.ndarray  # [C] the classes, sorted
    sizes: np.ndarray  # [C] their images (a stratified draw keeps them)
    sums: np.ndarray  # [1 + B, C, K]


def _draw(runs: Sequence[Outcomes], replicates: int, seed: int) -> _Draws:
    """Draw each class's images with replacement, `replicates` times, and count the right answers of
    every run and task among them. The draws depend only on the seed and the classes' sizes, so
    every method on the same images is scored on the same draws (a paired bootstrap), whichever
    others it is drawn with. Counts are whole numbers summed in float32 (exact below 2**24), so
    the order of a sum, and any thread count, give the same bits."""
    first = runs[0]
    for other in runs[1:]:
        if not same_images(first, other):
            raise DifferentImages("the outcomes are not on the same images")
    rng = np.random.default_rng(seed)
    order = np.argsort(first.classes, kind="stable")
    classes, starts, sizes = np.unique(first.classes[order], return_index=True, return_counts=True)
    columns = np.concatenate([r.correct for r in runs], axis=0).T[order].astype(np.float32)  # [N, K]
    sums = np.zeros((1 + replicates, len(classes), columns.shape[1]))
    for c, (start, n) in enumerate(zip(starts, sizes, strict=True)):
        picks = rng.integers(0, n, size=(replicates, n)) + n * np.arange(replicates)[:, None]
        counts = np.bincount(picks.ravel(), minlength=replicates * n).reshape(replicates, n)
        block = columns[start : start + n]
        sums[0, c] = block.sum(0)
        sums[1:, c] = counts.astype(np.float32) @ block
    return _Draws(classes, sizes.astype(float), sums)


def _class_tasks(run: Outcomes, classes: np.ndarray) -> np.ndarray:
    """The task of each class of `classes` in this run (its images all share it)."""
    labels, first = np.unique(run.classes, return_index=True)
    return run.task[first][np.searchsorted(labels, classes)]


def _metrics(draws: _Draws, run: Outcomes, column: int, wanted: Sequence[Metric]) -> dict[str, np.ndarray]:
    """Each `wanted` metric of one run (its columns from `column`), per replicate [1 + B], computed
    from each replicate's accuracy curve and matrix as `method.metrics` computes it from a run's."""
    tasks = run.tasks
    sums = draws.sums[:, :, column : column + tasks]  # [R, C, T]
    task_of = _class_tasks(run, draws.classes)
    onehot = (task_of[:, None] == np.arange(tasks)[None, :]).astype(float)  # [C, T]; later tasks: none
    right = np.einsum("rct,cj->rtj", sums, onehot)  # [R, stage, block]
    sizes = draws.sizes @ onehot  # [block]
    seen = np.tril(np.ones((tasks, tasks)))  # stage t sees blocks 0..t
    with np.errstate(invalid="ignore", divide="ignore"):
        a_t = (right * seen).sum(2) / (seen * sizes).sum(1)  # [R, T]
        blocks = right / sizes  # [R, T, T]
    return {m.name: replicated(m, a_t, blocks) for m in wanted}


def replicated(metric: Metric, a_t: np.ndarray, blocks: np.ndarray) -> np.ndarray:
    """`metric` of every replicate [R] from its curves `a_t` [R, T] and matrices `blocks` [R, T, T]
    (stage t's row holds blocks 0..t): the metric's own vectorised form where it has one
    (`Metric.replicates`), else its `compute` once per replicate."""
    if metric.replicates is not None:
        return np.asarray(metric.replicates(a_t, blocks), dtype=float)
    tasks = a_t.shape[1]
    return np.array(
        [
            metric.compute(curve.tolist(), [block[t, : t + 1].tolist() for t in range(tasks)])
            for curve, block in zip(a_t, blocks, strict=True)
        ],
        dtype=float,
    )


def _per_run(
    draws: _Draws, runs: Sequence[Outcomes], wanted: Sequence[Metric], column: int = 0
) -> dict[str, np.ndarray]:
    """Per metric, [1 + B, runs]: the metric of each run (stacked from `column` on), per replicate."""
    found = []
    for run in runs:
        found.append(_metrics(draws, run, column, wanted))
        column += run.tasks
    return {m.name: np.stack([f[m.name] for f in found], 1) for m in wanted}


def _mean_over_runs(values: np.ndarray, seed: int) -> np.ndarray:
    """[1 + B, S] -> [1 + B]: the observed row's mean over its runs, and each replicate's mean over
    S runs drawn with replacement (one run: that run). The draws depend only on the seed and S, so
    two sides of a difference with as many seeds draw the same seeds: paired by seed too."""
    runs = values.shape[1]
    if runs == 1:
        return values[:, 0]
    rng = np.random.default_rng([seed, runs])
    picked = rng.integers(0, runs, size=(values.shape[0] - 1, runs))
    drawn = np.take_along_axis(values[1:], picked, 1).mean(1)
    return np.concatenate([[values[0].mean()], drawn])


def _percentiles(values: np.ndarray, level: float) -> tuple[float, float]:
    finite = values[np.isfinite(values)]
    if not len(finite):
        return math.nan, math.nan
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(finite, [tail, 100 - tail])
    return float(low), float(high)


@dataclass(frozen=True)
class Interval:
    """A figure (a mean over `runs`), its interval at `level` by `method`, its standard error,
    and what it rests on: `images` per run and `runs` (seeds)."""

    value: float
    low: float
    high: float
    se: float
    images: int
    runs: int
    method: str
    level: float = LEVEL

    def record(self) -> list[float | None]:
        """[low, high] as a JSON file keeps it (None for NaN)."""
        return [None if math.isnan(v) else round(v, 6) for v in (self.low, self.high)]


def intervals_of(
    named: dict[str, Sequence[Outcomes]],
    level: float = LEVEL,
    replicates: int = REPLICATES,
    seed: int = SEED,
) -> dict[str, dict[str, Interval]]:
    """Per name (a router, a method), every metric recomputed from per-image answers
    (`metrics.resampled()`: A_bar, A_last, forgetting and each plug-in's that declares an
    interval) of the mean over its runs (seeds on the same images, every name on the same ones),
    each with its interval: an `EXACT` metric (an accuracy, A_last) of one run by Clopper-Pearson
    over its images, everything else by the stratified bootstrap over images and runs. The
    bootstrap's standard error is kept beside. A mean accuracy over seeds (on the same images,
    whose noise averaging seeds does not remove) is never surer than one run of it: its interval
    holds the exact one of its images, its standard error is at least their "plus four" one
    (`plus_four_se`)."""
    if not named:
        return {}
    wanted = resampled()
    stacked = [run for runs in named.values() for run in runs]
    draws = _draw(stacked, replicates, seed)
    found: dict[str, dict[str, Interval]] = {}
    column = 0
    for name, runs in named.items():
        found[name], per_run = {}, _per_run(draws, runs, wanted, column)
        n = runs[0].images
        for metric in wanted:
            values = _mean_over_runs(per_run[metric.name], seed)
            low, high = _percentiles(values[1:], level)
            se = float(np.nanstd(values[1:], ddof=1)) if replicates > 1 else math.nan
            observed = float(values[0])
            if metric.interval == EXACT_KIND and len(runs) == 1:
                found[name][metric.name] = exact_interval(observed, n, level)
                continue
            if metric.interval == EXACT_KIND:  # an accuracy: never less noisy than its images allow
                se = max(se, plus_four_se(observed, n))
                exact = clopper_pearson(round(observed * n), n, level)
                low, high = min(low, exact[0]), max(high, exact[1])
            found[name][metric.name] = Interval(observed, low, high, se, n, len(runs), BOOTSTRAP, level)
        column += sum(run.tasks for run in runs)
    return found


def intervals(runs: Sequence[Outcomes], level: float = LEVEL, seed: int = SEED) -> dict[str, Interval]:
    """Every resampled metric of the mean over `runs` with its interval (`intervals_of`)."""
    return intervals_of({"": runs}, level, seed=seed)[""]


def exact_interval(accuracy: float, n: int, level: float = LEVEL) -> Interval:
    """An accuracy of one run over `n` images (its right answers: `accuracy` x n, rounded) with its
    exact binomial interval and its "plus four" standard error."""
    right = round(accuracy * n) if n and not math.isnan(accuracy) else 0
    low, high = clopper_pearson(right, n, level)
    p = right / n if n else math.nan
    return Interval(p, low, high, plus_four_se(p, n), n, 1, EXACT, level)


def accuracy_interval(accuracy: float | None, n: int, level: float = LEVEL) -> tuple[float, float]:
    """The exact interval of an accuracy recorded as a fraction of `n` images (a routing accuracy)."""
    if accuracy is None or n <= 0 or math.isnan(accuracy):
        return math.nan, math.nan
    return clopper_pearson(round(accuracy * n), n, level)


# ------------------------------------------------------------------------------------------ differences


@dataclass(frozen=True)
class Difference:
    """mean(A) - mean(B) of a metric on the same images, its interval at `level` by `method`, and
    what it rests on: `images`, and the runs (seeds) of each side."""

    value: float
    low: float
    high: float
    images: int
    runs_a: int
    runs_b: int
    method: str
    level: float = LEVEL

    def said(self, scale: float = 100.0, unit: str = " points", digits: int = 2) -> str:
        """'+2.31 points [+0.80, +3.90] (95% paired bootstrap, 600 images, 3 vs 3 seed(s))'."""
        if math.isnan(self.value):
            return "not measured"
        what = f"{self.images:,} images, " if self.images else ""
        low, high = (f"{scale * v:+.{digits}f}" for v in (self.low, self.high))
        return (
            f"{scale * self.value:+.{digits}f}{unit} [{low}, {high}] "
            f"({100 * self.level:g}% {self.method}, {what}{self.runs_a} vs {self.runs_b} seed(s))"
        )


def paired_difference(
    a: Sequence[Outcomes],
    b: Sequence[Outcomes],
    metric: str,
    level: float = LEVEL,
    replicates: int = REPLICATES,
    seed: int = SEED,
) -> Difference:
    """mean over A's runs minus mean over B's of a metric, by a paired bootstrap: each replicate
    draws the same images for both (stratified by class) and the seeds of each side."""
    draws = _draw([*a, *b], replicates, seed)
    values = _per_run(draws, [*a, *b], [metric_named(metric)])[metric]
    diff = _mean_over_runs(values[:, : len(a)], seed) - _mean_over_runs(values[:, len(a) :], seed)
    low, high = _percentiles(diff[1:], level)
    return Difference(float(diff[0]), low, high, a[0].images, len(a), len(b), PAIRED, level)


def seed_difference(a: Sequence[float], b: Sequence[float], level: float = LEVEL) -> Difference:
    """mean(a - b) over paired seeds (a figure with no images behind it, such as the similarity of
    a run's modules), with the t interval of the mean paired difference; one seed has no spread
    to test against: its interval is unbounded."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    d = d[np.isfinite(d)]
    if not len(d):
        return Difference(math.nan, math.nan, math.nan, 0, 0, 0, SEEDS_T, level)
    mean = float(d.mean())
    if len(d) < 2:
        return Difference(mean, -math.inf, math.inf, 0, 1, 1, SEEDS_T, level)
    half = t_quantile(1 - (1 - level) / 2, len(d) - 1) * float(d.std(ddof=1)) / math.sqrt(len(d))
    return Difference(mean, mean - half, mean + half, 0, len(d), len(d), SEEDS_T, level)


def beats(diff: Difference) -> str:
    """ "A beats B" from the interval of A - B: holds when it lies above 0, does not hold when it
    lies at or below 0, else not distinguishable at this sample size."""
    if math.isnan(diff.value):
        return "not measured"
    if diff.low > 0:
        return HOLDS
    if diff.high <= 0:
        return FAILS
    return UNCLEAR


def within(diff: Difference, margin: float) -> str:
    """ "A within `margin` of B, either way" from the interval of A - B: holds when it lies inside
    [-margin, margin], does not hold when it lies wholly outside, else not distinguishable."""
    if math.isnan(diff.value):
        return "not measured"
    if -margin <= diff.low and diff.high <= margin:
        return HOLDS
    if diff.low > margin or diff.high < -margin:
        return FAILS
    return UNCLEAR


def combined(verdicts: Sequence[str]) -> str:
    """A claim over several stores: holds when it holds on every store measured, does not hold when
    it fails on one, else not distinguishable (or not measured, when none was)."""
    measured = [v for v in verdicts if v != "not measured"]
    if not measured:
        return "not measured"
    if FAILS in measured:
        return FAILS
    return HOLDS if all(v == HOLDS for v in measured) else UNCLEAR


def ties(means: Sequence[float], errors: Sequence[float]) -> np.ndarray:
    """The one-standard-error rule: which points are tied with the best (highest mean), namely
    those whose mean is at least the best's minus the best's standard error. Without a standard
    error for the best (NaN), only the points equal to it."""
    means = np.asarray(means, dtype=float)
    if not len(means) or np.isnan(means).all():
        return np.zeros(len(means), dtype=bool)
    best = int(np.nanargmax(means))
    error = float(errors[best])
    floor = means[best] - (0.0 if math.isnan(error) else error)
    return np.nan_to_num(means, nan=-np.inf) >= floor
