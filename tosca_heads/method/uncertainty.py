"""How sure each figure is, and the tests behind every verdict: pure functions over per-image
outcomes, the one place every table, claim and sweep takes its intervals, tests and ties from.

What is kept per run, split and method (TOSCA under one router, or a baseline): `Outcomes`, which
images it answered right after each task (`correct` [T, N]), with each image's class and the task
that brought that class. Every figure is recomputed from them, never by training again.

- **A_last** (and the routing accuracy) of one run is a plain accuracy over the images of every
  class seen: an exact binomial interval (Clopper-Pearson, `clopper_pearson`).
- **A_bar and forgetting** are functions of several A_t on nested image sets: a seeded bootstrap
  over images that recomputes them from the resampled images (`intervals`), stratified by class
  (each class keeps its number of images, as a test set is built), its percentile interval,
  widened where needed to hold the floor its counts allow (below).
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
- **The floor** (`floor_of`; issue 47, point 5): a bootstrap has nothing to resample where each
  class is all right or all wrong, and would call 87.5% of 8 images [87.5, 87.5]. So every
  bootstrap interval (A_bar, forgetting, a difference) is widened to hold the interval the counts
  behind the figure allow: the figure as a sum over images of what each one's answers add (the
  metric's `weights`), a ladder of counts per group of images alike, each count's exact
  (Clopper-Pearson) interval, combined by MOVER (Zou and Donner 2008; Newcombe 1998 for a paired
  difference: the images one side got right and the other wrong, b and c of n). For one task
  A_bar's floor is A_last's exact interval; a run answered all right has A_bar's floor below
  1 by the exact distance of every block all right; nothing forgotten still has forgetting's
  floor either side of 0, shrinking as the images grow; identical answers are "not
  distinguishable", never "does not hold". On a normal test set (10 tasks of 200 images) the
  floor lies a little outside the bootstrap (+7% to +16% of its width for A_bar and forgetting,
  about the unstratified binomial interval) and decides there; over three seeds the bootstrap is
  wider and decides. A plug-in metric that declares no `weights` has no floor: where its
  bootstrap interval is a point, it has no interval (NaN: never bold, "not distinguishable").
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
from functools import lru_cache

import numpy as np

from tosca_heads.method.distributions import beta_quantile, t_quantile
from tosca_heads.method.metrics import EXACT as EXACT_KIND
from tosca_heads.method.metrics import Metric, metric_named, resampled, with_interval

LEVEL = 0.95  # every interval and test: two-sided 95%
REPLICATES = 1000  # bootstrap replicates
SEED = 0  # the bootstrap's generator
FLOOR_SAID = (
    "the exact interval its counts allow (Clopper-Pearson intervals of the counts behind it, "
    "combined by MOVER: floor_of); none where it is still a point"
)


def methods_said() -> dict[str, object]:
    """How every interval in a file was computed (metrics.json's "uncertainty"): per metric with an
    interval, as it declares (`metrics.Metric.interval`), and how differences are tested."""
    said: dict[str, object] = {"level": LEVEL}
    for metric in with_interval():
        if metric.from_routing:
            said[metric.name] = "exact binomial (Clopper-Pearson) over the images"
        elif metric.interval == EXACT_KIND:
            said[metric.name] = (
                "one run: exact binomial (Clopper-Pearson) over its images; a mean over seeds: the bootstrap, "
                "widened to hold the exact interval of its images"
            )
        else:
            said[metric.name] = (
                f"stratified bootstrap over images (each class keeps its count), {REPLICATES} replicates, "
                f"seed {SEED}, percentile interval; a mean over seeds draws the seeds too; "
                + (
                    f"widened to hold {FLOOR_SAID}"
                    if metric.weights is not None
                    else "none where it has zero width (no floor declared)"
                )
            )
    said["differences"] = (
        "paired bootstrap: the same images (and seeds) drawn for both sides; "
        f"its interval widened to hold {FLOOR_SAID} (a metric that declares no floor: none where it has zero width)"
    )
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
    task's module after task t (None for a method without a router); `chosen[i]` the task whose
    module the router picked for image i after the last task (-1: its class not seen yet; None
    where the route itself is not kept), what a routing confusion is counted from."""

    correct: np.ndarray  # bool [T, N]
    classes: np.ndarray  # int [N]
    task: np.ndarray  # int [N]
    rows: np.ndarray  # int [N]
    routed: np.ndarray | None = None  # bool [T, N]
    chosen: np.ndarray | None = None  # int [N]: the task picked after the last task

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
    """Per run, per replicate (the first row: the images as observed): how many of the drawn images
    of each task's classes it answered right after each task (`right` [1 + B, stage, block]), and
    how many images each block has (`sizes` [block]: a stratified draw keeps them)."""

    right: list[np.ndarray]
    sizes: list[np.ndarray]


def _draw(runs: Sequence[Outcomes], replicates: int, seed: int) -> _Draws:
    """Draw each class's images with replacement, `replicates` times, and count the right answers of
    every run after every task among them, summed over the classes of each task block as each class
    is drawn (memory: [1 + B, T, T] per run, never per class). The draws depend only on the seed and
    the classes' sizes, so every method on the same images is scored on the same draws (a paired
    bootstrap), whichever others it is drawn with. Counts are whole numbers (exact in float32 below
    2**24, in float64 below 2**53), so the order of a sum, and any thread count, give the same bits."""
    first = runs[0]
    for other in runs[1:]:
        if not same_images(first, other):
            raise DifferentImages("the outcomes are not on the same images")
    rng = np.random.default_rng(seed)
    order = np.argsort(first.classes, kind="stable")
    classes, starts, sizes = np.unique(first.classes[order], return_index=True, return_counts=True)
    blocks = [_class_tasks(run, classes) for run in runs]  # each class's task, per run
    columns = np.cumsum([0] + [run.tasks for run in runs])  # each run's columns of a class's block
    right = [np.zeros((1 + replicates, run.tasks, run.tasks)) for run in runs]
    sized = [np.zeros(run.tasks) for run in runs]
    for c, (start, n) in enumerate(zip(starts, sizes, strict=True)):
        picks = rng.integers(0, n, size=(replicates, n)) + n * np.arange(replicates)[:, None]
        counts = np.bincount(picks.ravel(), minlength=replicates * n).reshape(replicates, n)
        members = order[start : start + n]
        block = np.concatenate([run.correct[:, members] for run in runs]).T.astype(np.float32)  # [n, K]
        observed, drawn = block.sum(0), counts.astype(np.float32) @ block  # [K], [B, K]
        for i, run in enumerate(runs):
            task = int(blocks[i][c])
            if task >= run.tasks:  # a class of a later task: in no block yet
                continue
            lo, hi = columns[i], columns[i + 1]
            right[i][0, :, task] += observed[lo:hi]
            right[i][1:, :, task] += drawn[:, lo:hi]
            sized[i][task] += n
    return _Draws(right, sized)


def _class_tasks(run: Outcomes, classes: np.ndarray) -> np.ndarray:
    """The task of each class of `classes` in this run (its images all share it)."""
    labels, first = np.unique(run.classes, return_index=True)
    return run.task[first][np.searchsorted(labels, classes)]


def _metrics(right: np.ndarray, sizes: np.ndarray, wanted: Sequence[Metric]) -> dict[str, np.ndarray]:
    """Each `wanted` metric of one run per replicate [1 + B], computed from each replicate's
    accuracy curve and matrix (its right answers per stage and block, `_Draws`) as `method.metrics`
    computes it from a run's."""
    tasks = right.shape[1]
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


def _per_run(draws: _Draws, first: int, runs: int, wanted: Sequence[Metric]) -> dict[str, np.ndarray]:
    """Per metric, [1 + B, runs]: the metric of each of the drawn runs first..first+runs-1, per replicate."""
    found = [_metrics(draws.right[i], draws.sizes[i], wanted) for i in range(first, first + runs)]
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
    over its images, everything else by the stratified bootstrap over images and runs, widened to
    hold the floor its counts allow (`floor_of`; none where it is still a point). The
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
    first = 0
    for name, runs in named.items():
        found[name], per_run = {}, _per_run(draws, first, len(runs), wanted)
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
            else:  # never narrower than the exact intervals of its counts, never past its bounds
                low, high = _held(observed, low, high, floor_of(metric, runs, level=level))
                low, high = max(low, metric.low), min(high, metric.high)  # (NaN stays NaN)
            found[name][metric.name] = Interval(observed, low, high, se, n, len(runs), BOOTSTRAP, level)
        first += len(runs)
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


# ------------------------------------------------------------------------------------------ the floor


@lru_cache(maxsize=65_536)
def _exact(right: int, n: int, level: float) -> tuple[float, float]:
    """`clopper_pearson`, kept: a floor asks the same few counts of the same few sizes again."""
    return clopper_pearson(right, n, level)


@dataclass(frozen=True)
class _Form:
    """A figure of the mean over runs as a sum over images: what each image's answers add
    (`values`), the least and most they could add (`least`, `most`), and the weights its answers
    carry in every run (`weights` [runs x T, N]: images alike carry the same)."""

    values: np.ndarray
    least: np.ndarray
    most: np.ndarray
    weights: np.ndarray

    def minus(self, other: _Form) -> _Form:
        """This figure minus `other`'s, on the same images."""
        return _Form(
            self.values - other.values,
            self.least - other.most,
            self.most - other.least,
            np.concatenate([self.weights, other.weights]),
        )


def _form(metric: Metric, runs: Sequence[Outcomes]) -> _Form:
    """`metric` of the mean over `runs` as a sum over images (`Metric.weights`, each run at its own
    accuracy matrix: its own best stages); an image of a class not seen adds nothing."""
    values, least, most, weights = [], [], [], []
    for run in runs:
        tasks = run.tasks
        seen = run.task < tasks
        block = np.where(seen, run.task, 0)
        sizes = np.bincount(run.task[seen], minlength=tasks).astype(float)
        answers = run.correct.astype(float) * seen
        right = np.stack([np.bincount(block, weights=row, minlength=tasks) for row in answers])  # [T, T]
        with np.errstate(divide="ignore", invalid="ignore"):
            matrix = np.nan_to_num(right / sizes)
        per_image = np.asarray(metric.weights(matrix, sizes), dtype=float)[:, block] * seen  # type: ignore[misc]
        values.append((per_image * answers).sum(0))
        least.append(np.minimum(per_image, 0.0).sum(0))
        most.append(np.maximum(per_image, 0.0).sum(0))
        weights.append(per_image)
    return _Form(
        np.mean(values, axis=0), np.mean(least, axis=0), np.mean(most, axis=0), np.concatenate(weights)
    )


def _distances(values: np.ndarray, least: float, most: float, level: float) -> tuple[float, float]:
    """How far below and above the sum of `values` (one group's images, each between `least` and
    `most`) its counts allow it to lie. The sum is n x `least` plus, per level the images reach (the
    values seen, and `most`), the step up to it times how many images reach it: a count, with its
    exact interval. The steps' distances add as the counts correlate (`_correlated_sum`)."""
    n = len(values)
    levels = np.unique(np.append(values[values > least], most))
    steps = np.diff(levels, prepend=least) * n
    counts = n - np.searchsorted(np.sort(values), levels, side="left")
    share = counts / n
    bounds = np.array([_exact(int(c), n, level) for c in counts], dtype=float).reshape(-1, 2)
    return (
        _correlated_sum(steps * (share - bounds[:, 0]), share, bounds[:, 0]),
        _correlated_sum(steps * (bounds[:, 1] - share), share, bounds[:, 1]),
    )


def _correlated(higher: np.ndarray | float, lower: np.ndarray | float) -> np.ndarray:
    """The correlation of "reaches a level" with "reaches a lower one", of shares `higher` <=
    `lower`: sqrt(higher (1 - lower) / (lower (1 - higher)))."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sqrt(
            np.asarray(higher) * (1 - np.asarray(lower)) / (np.asarray(lower) * (1 - np.asarray(higher)))
        )


def _correlated_sum(distances: np.ndarray, share: np.ndarray, reached: np.ndarray) -> float:
    """sqrt(d' R d) for the distances d of nested counts (reaching a level implies reaching the
    lower ones) of `share`s falling as the levels rise, R their correlations (`_correlated`). Their
    product factors into one of the higher level's share and one of the lower's, so the sum takes
    one pass whatever the number of levels (a group's images, at most). A count of all or none of
    the images (at most one per side moves: the lowest level's down, the highest's up) shows no
    correlation: it is taken at the share its exact interval reaches (`reached`), at most 1."""
    varies = (share > 0) & (share < 1)
    d, p = distances[varies], share[varies]
    below = np.concatenate([[0.0], np.cumsum(d * np.sqrt((1 - p) / p))[:-1]])  # sum over the lower levels
    terms = [*(d * d), *(2 * d * np.sqrt(p / (1 - p)) * below)]
    for k in np.flatnonzero(~varies & (distances > 0)):
        rho = np.minimum(_correlated(np.minimum(reached[k], p), np.maximum(reached[k], p)), 1.0)
        terms += [distances[k] ** 2, *(2 * distances[k] * d * np.nan_to_num(rho, nan=1.0))]
    return math.sqrt(max(math.fsum(terms), 0.0))  # (fsum: exact, whatever the order)


def floor_of(
    metric: Metric, runs: Sequence[Outcomes], against: Sequence[Outcomes] = (), level: float = LEVEL
) -> tuple[float, float] | None:
    """How far below and above the observed mean of `metric` over `runs` (minus its mean over
    `against`, a difference on the same images) the counts of right answers allow it to lie: the
    least any interval of it may reach (None where the metric declares no `weights`).

    The figure is a sum over images of what each one's answers add (`Metric.weights`, taken at
    the observed best stages). Images alike (whose answers carry the same weights in every run)
    form a group; within a group the sum is a ladder of counts (how many images reach each level
    an image could add, up to the most it could), each count with its exact interval
    (Clopper-Pearson), their distances added as the nested counts correlate; groups are other
    images, drawn apart, whose distances add in quadrature: the method of variance estimates
    recovery (MOVER, Zou and Donner 2008), as Newcombe (1998) combines two proportions. An
    accuracy is one count: its exact interval. A paired difference of accuracies is the images one
    side got right and the other wrong, and the other way round: b and c of n, one step each. A
    figure seen without spread (all right, nothing forgotten, the same answers) still has the
    exact distance of a count of all or none of its images: never zero from a finite sample."""
    if metric.weights is None:
        return None
    form = _form(metric, runs)
    if against:
        form = form.minus(_form(metric, against))
    _, group = np.unique(form.weights, axis=1, return_inverse=True)
    group = group.ravel()
    below, above = [], []
    for g in range(int(group.max()) + 1 if len(group) else 0):
        members = np.flatnonzero(group == g)
        least, most = float(form.least[members[0]]), float(form.most[members[0]])
        if most > least:
            down, up = _distances(form.values[members], least, most, level)
            below.append(down**2)
            above.append(up**2)
    return math.sqrt(math.fsum(below)), math.sqrt(math.fsum(above))


def _held(value: float, low: float, high: float, floor: tuple[float, float] | None) -> tuple[float, float]:
    """The bootstrap's interval widened to hold [value - below, value + above] (`floor_of`); no
    interval (NaN) where it is still a point: no finite sample measures a figure exactly."""
    if floor is not None:
        low, high = min(low, value - floor[0]), max(high, value + floor[1])
    if not high > low:
        return math.nan, math.nan
    return low, high


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
    draws the same images for both (stratified by class) and the seeds of each side; its interval
    widened to hold the floor the two sides' counts allow (`floor_of`: a class apart on a few
    images is never "holds"), none where it is still a point (a metric without a floor)."""
    draws = _draw([*a, *b], replicates, seed)
    values = _per_run(draws, 0, len(a) + len(b), [metric_named(metric)])[metric]
    diff = _mean_over_runs(values[:, : len(a)], seed) - _mean_over_runs(values[:, len(a) :], seed)
    low, high = _percentiles(diff[1:], level)
    low, high = _held(float(diff[0]), low, high, floor_of(metric_named(metric), a, b, level))
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
