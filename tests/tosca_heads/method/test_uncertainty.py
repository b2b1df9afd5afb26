"""The statistics every table, claim and sweep reads (`method.uncertainty`), on hand-made answers:
its figures are `method.metrics`' to the last digit, its intervals are the textbook ones and cover
what they claim to, its paired test says "holds" only where the answers clearly differ, and it gives
the same numbers on every call."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tosca_heads.method import metrics, uncertainty
from tosca_heads.method.uncertainty import FAILS, HOLDS, UNCLEAR, Outcomes

pytestmark = pytest.mark.cpu_reference


def answers(right: np.ndarray, classes: int = 6, tasks: int = 3) -> Outcomes:
    """Outcomes of [T, N] right answers on N images of `classes` equal classes, `tasks` tasks of
    equal size (classes in order), a class's images wrong before its task."""
    n = right.shape[1]
    labels = np.repeat(np.arange(classes), n // classes)
    task = labels // (classes // tasks)
    correct = right.astype(bool) & (task[None, :] <= np.arange(tasks)[:, None])
    return Outcomes(correct, labels, task, np.arange(n))


def random_answers(p: float, n: int = 600, seed: int = 0, tasks: int = 3) -> Outcomes:
    return answers(np.random.default_rng(seed).random((tasks, n)) < p, tasks=tasks)


def by_metrics(run: Outcomes) -> dict[str, float]:
    """A_bar, A_last, forgetting as `method.metrics` computes them from the accuracy matrix."""
    curve, matrix = [], []
    for t in range(run.tasks):
        seen = run.task <= t
        curve.append(metrics.accuracy(run.correct[t][seen], np.ones(seen.sum(), bool)))
        matrix.append([float(run.correct[t][run.task == j].mean()) for j in range(t + 1)])
    return {
        k: v
        for k, v in metrics.summarise(curve, matrix).items()
        if k in {m.name for m in metrics.resampled()}
    }


def test_the_figures_are_the_metrics_of_the_accuracy_matrix() -> None:
    for seed in range(3):
        run = random_answers(0.7, seed=seed)
        found = uncertainty.intervals([run])
        for metric, value in by_metrics(run).items():
            assert found[metric].value == pytest.approx(value, abs=1e-12), metric
            assert found[metric].low <= found[metric].value <= found[metric].high, metric


def test_clopper_pearson_is_the_exact_binomial_interval() -> None:
    from scipy.stats import beta

    assert uncertainty.clopper_pearson(0, 10) == (0.0, pytest.approx(1 - 0.025 ** (1 / 10)))
    assert uncertainty.clopper_pearson(10, 10) == (pytest.approx(0.025 ** (1 / 10)), 1.0)
    low, high = uncertainty.clopper_pearson(47, 60)
    assert low == pytest.approx(beta.ppf(0.025, 47, 14)) and high == pytest.approx(beta.ppf(0.975, 48, 13))
    assert all(math.isnan(v) for v in uncertainty.clopper_pearson(0, 0))


def test_the_quantiles_written_out_are_scipys() -> None:
    """distributions.py replaces scipy (which a fit must not load) to about 1e-12."""
    from scipy.special import betaincinv, stdtrit

    from tosca_heads.method.distributions import beta_quantile, t_quantile

    for n in (1, 7, 60, 1000, 50_000):
        for right in sorted({0, 1, n // 3, n - 1, n}):
            for q, (a, b) in ((0.025, (right, n - right + 1)), (0.975, (right + 1, n - right))):
                if a > 0 and b > 0:
                    assert beta_quantile(q, a, b) == pytest.approx(float(betaincinv(a, b, q)), abs=1e-12)
    for df in (1, 2, 5, 30, 1000):
        for q in (0.025, 0.6, 0.975, 0.995):
            assert t_quantile(q, df) == pytest.approx(float(stdtrit(df, q)), rel=1e-11)


def test_a_single_runs_a_last_is_exact_and_a_mean_over_seeds_never_surer_than_its_images() -> None:
    run = random_answers(0.8)
    exact = uncertainty.intervals([run])["A_last"]
    assert exact.method == uncertainty.EXACT
    assert (exact.low, exact.high) == uncertainty.clopper_pearson(run.right(), run.images)
    perfect = answers(np.ones((3, 60), bool))  # every image right: the bootstrap alone would say no noise
    both = uncertainty.intervals([perfect, perfect])["A_last"]
    assert both.method == uncertainty.BOOTSTRAP and both.high == 1.0
    assert both.low == pytest.approx(uncertainty.clopper_pearson(60, 60)[0]) and both.se > 0.02


def test_the_same_numbers_on_every_call_whatever_is_drawn_beside() -> None:
    run, other = random_answers(0.7, seed=1), random_answers(0.4, seed=2)
    alone = uncertainty.intervals_of({"a": [run]})["a"]
    beside = uncertainty.intervals_of({"b": [other], "a": [run]})["a"]
    assert alone == beside == uncertainty.intervals_of({"a": [run]})["a"]


def test_the_bootstrap_covers_a_bar_as_it_claims() -> None:
    """Over 200 test sets drawn from known per-class accuracies, the 95% interval of A_bar holds the
    true A_bar about 95% of the time (the exact interval of A_last at least that)."""
    rng = np.random.default_rng(7)
    tasks, n = 3, 300
    p_class = np.array([0.9, 0.85, 0.8, 0.7, 0.75, 0.6])
    labels = np.repeat(np.arange(6), n // 6)
    task = labels // 2
    # the true A_t: images of a class answered right with its probability, whatever the stage
    truth_t = [p_class[: 2 * (t + 1)].mean() for t in range(tasks)]
    covered = {"A_bar": 0, "A_last": 0}
    trials = 200
    for _ in range(trials):
        right = rng.random(n) < p_class[labels]
        run = Outcomes(
            np.repeat(right[None], tasks, 0) & (task[None] <= np.arange(tasks)[:, None]),
            labels,
            task,
            np.arange(n),
        )
        found = uncertainty.intervals_of({"x": [run]}, replicates=400)["x"]
        covered["A_bar"] += found["A_bar"].low <= np.mean(truth_t) <= found["A_bar"].high
        covered["A_last"] += found["A_last"].low <= truth_t[-1] <= found["A_last"].high
    assert 0.88 <= covered["A_bar"] / trials <= 0.99, covered
    assert covered["A_last"] / trials >= 0.93, covered


def test_a_paired_difference_holds_fails_or_cannot_tell() -> None:
    base = np.random.default_rng(0).random((3, 600)) < 0.6
    a = answers(base)
    better = answers(
        base | (np.random.default_rng(1).random((3, 600)) < 0.5)
    )  # right wherever a is, and more
    diff = uncertainty.paired_difference([better], [a], "A_last")
    assert diff.value > 0.1 and uncertainty.beats(diff) == HOLDS
    assert uncertainty.beats(uncertainty.paired_difference([a], [better], "A_last")) == FAILS
    # three answers apart in 600 images, one of them the other way: no test can tell
    close = base.copy()
    right, wrong = np.flatnonzero(base[-1]), np.flatnonzero(~base[-1])
    close[:, right[:2]], close[:, wrong[:1]] = False, True
    diff = uncertainty.paired_difference([answers(close)], [a], "A_last")
    assert diff.value == pytest.approx(-1 / 600) and diff.low < 0 < diff.high
    assert uncertainty.beats(diff) == UNCLEAR
    assert uncertainty.within(diff, 0.05) == HOLDS and uncertainty.within(diff, 0.0005) == UNCLEAR
    # the same answers: no difference seen, yet 600 images cannot say there is none
    same = uncertainty.paired_difference([a], [a], "A_bar")
    assert same.value == 0.0 and same.low < 0 < same.high and uncertainty.beats(same) == UNCLEAR
    assert "600 images, 1 vs 1 seed(s)" in diff.said()


def test_pairing_on_the_same_images_sees_what_two_separate_intervals_cannot() -> None:
    """B is A with 12 of 600 answers turned right: each one's interval spans 8 points, so the
    intervals overlap, yet the paired test knows B is better."""
    base = np.random.default_rng(3).random((3, 600)) < 0.7
    improved = base.copy()
    wrong = np.flatnonzero(~base[-1])[:12]
    improved[:, wrong] = True
    a, b = answers(base), answers(improved)
    ia, ib = uncertainty.intervals([a])["A_last"], uncertainty.intervals([b])["A_last"]
    assert ia.high > ib.low  # separately: overlapping
    assert uncertainty.beats(uncertainty.paired_difference([b], [a], "A_last")) == HOLDS


def test_seeds_widen_the_interval_and_a_verdict_over_seeds_pairs_them() -> None:
    runs = [random_answers(p, seed=s) for s, p in enumerate((0.6, 0.75, 0.9))]
    one = uncertainty.intervals(runs[:1])["A_bar"]
    three = uncertainty.intervals(runs)["A_bar"]
    assert three.runs == 3 and three.high - three.low > one.high - one.low
    assert uncertainty.spread([0.6, 0.75, 0.9]) == (pytest.approx(0.75), pytest.approx(0.15), 3)


def test_outcomes_of_other_images_are_refused() -> None:
    a = random_answers(0.7)
    moved = Outcomes(a.correct, a.classes, a.task, a.rows + 1)
    with pytest.raises(uncertainty.DifferentImages):
        uncertainty.paired_difference([a], [moved], "A_last")


def test_one_standard_error_ties() -> None:
    assert list(uncertainty.ties([0.80, 0.79, 0.75, 0.81], [0.02, 0.02, 0.02, 0.015])) == [
        True,
        False,
        False,
        True,
    ]
    assert list(uncertainty.ties([0.8, 0.8, 0.7], [math.nan] * 3)) == [True, True, False]  # no SE: equal only
    assert uncertainty.plus_four_se(1.0, 24) > 0.03  # all right is not no noise


def test_a_difference_over_seeds_without_images() -> None:
    one = uncertainty.seed_difference([0.30], [0.10])
    assert one.low == -math.inf and uncertainty.beats(one) == UNCLEAR  # one seed cannot tell
    clear = uncertainty.seed_difference([0.30, 0.31, 0.29], [0.10, 0.12, 0.11])
    assert uncertainty.beats(clear) == HOLDS
    noisy = uncertainty.seed_difference([0.30, 0.05, 0.29], [0.10, 0.32, 0.11])
    assert uncertainty.beats(noisy) == UNCLEAR
    assert uncertainty.combined([HOLDS, UNCLEAR]) == UNCLEAR
    assert uncertainty.combined([HOLDS, FAILS, UNCLEAR]) == FAILS
    assert uncertainty.combined(["not measured"]) == "not measured"


def test_the_bootstrap_keeps_no_array_per_class() -> None:
    """(issue 48, point 2) The draws are counted into each run's [1 + B, stage, block] right answers
    as each class is drawn: 2,000 classes x 1,000 replicates x every router's tasks were 600 MB
    at ImageNet's size, written after the last task of a fit. The observed row is the plain count."""
    rng = np.random.default_rng(0)
    classes = np.repeat(np.arange(2000), 3)
    task = classes * 4 // 2000
    correct = (rng.random((4, len(classes))) < 0.8) & (task[None] <= np.arange(4)[:, None])
    runs = [
        Outcomes(correct, classes, task, np.arange(len(classes))),
        Outcomes(correct[:2], classes, task, np.arange(len(classes))),
    ]
    draws = uncertainty._draw(runs, 1000, 0)
    assert [r.shape for r in draws.right] == [(1001, 4, 4), (1001, 2, 2)]
    for run, right, sizes in zip(runs, draws.right, draws.sizes, strict=True):
        blocks = np.arange(run.tasks)
        assert np.array_equal(sizes, [(task == j).sum() for j in blocks])
        assert np.array_equal(
            right[0], [[run.correct[t][task == j].sum() for j in blocks] for t in range(run.tasks)]
        )
