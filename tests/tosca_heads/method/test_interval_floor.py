"""No interval is narrower than its sample allows (issue 47, point 5): where each class is all right
or all wrong a stratified bootstrap has nothing to resample and would give a point; every interval
of A_bar, forgetting and every paired difference is widened to hold the floor its counts allow
(`uncertainty.floor_of`), and a plug-in without a floor gets no interval rather than a point."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tosca_heads.method import metrics, uncertainty
from tosca_heads.method.uncertainty import HOLDS, UNCLEAR, Outcomes

pytestmark = pytest.mark.cpu_reference


def by_class(right: np.ndarray, per_class: int, classes_per_task: int = 1) -> Outcomes:
    """Outcomes where every class is all right or all wrong: `right` [T, classes] per class and
    stage, `per_class` images each, `classes_per_task` classes a task (in order)."""
    tasks, classes = right.shape
    labels = np.repeat(np.arange(classes), per_class)
    task = labels // classes_per_task
    correct = right[:, labels].astype(bool) & (task[None, :] <= np.arange(tasks)[:, None])
    return Outcomes(correct, labels, task, np.arange(len(labels)))


def width(found: uncertainty.Interval | uncertainty.Difference) -> float:
    return found.high - found.low


def test_a_run_of_whole_classes_right_or_wrong_has_no_point_interval() -> None:
    """The issue's own: A_bar 87.50 [87.5, 87.5] and forgetting 0.00 [0.0, 0.0] from 8 images."""
    right = np.array([[1, 0, 0, 0], [1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 1]])  # a class wrong at stage 2
    run = by_class(np.array([[1, 1, 1, 1, 1, 1, 1, 0]] * 2).astype(bool), per_class=1, classes_per_task=4)
    for found in (uncertainty.intervals([run]), uncertainty.intervals([by_class(right, 2)])):
        for name in ("A_bar", "A_last", "forgetting"):
            interval = found[name]
            assert interval.low <= interval.value <= interval.high, name
            assert width(interval) > 0.05, name  # a handful of images: far from a point
    forgetting = uncertainty.intervals([run])["forgetting"]
    assert forgetting.value == 0.0 and forgetting.low < 0 < forgetting.high


def test_one_task_a_bar_is_a_last_and_its_interval_holds_the_exact_one() -> None:
    for pattern in ([1] * 8, [1] * 7 + [0], [0] * 8):
        run = by_class(np.array([pattern], bool), per_class=1, classes_per_task=8)
        found = uncertainty.intervals([run])
        exact = uncertainty.clopper_pearson(run.right(), 8)
        assert found["A_bar"].value == found["A_last"].value
        assert found["A_bar"].low <= exact[0] + 1e-12 and found["A_bar"].high >= exact[1] - 1e-12
        assert found["A_bar"].low == pytest.approx(exact[0]) and found["A_bar"].high == pytest.approx(
            exact[1]
        )


def test_every_image_right_has_the_exact_floor_of_every_block_all_right() -> None:
    """Two tasks of n images each, all right: A_bar = (A_0 + A_1) / 2 = the images' sum with
    weights 1/(2n) + 1/(4n) (block 0) and 1/(4n) (block 1). Each block's one count is all right,
    its exact distance 1 - CP_low(n, n); the blocks are other images: in quadrature."""
    for n in (2, 10, 50):
        run = by_class(np.ones((2, 2), bool), per_class=n)
        below, above = uncertainty.floor_of(metrics.metric_named("A_bar"), [run])  # type: ignore[misc]
        gap = 1 - uncertainty.clopper_pearson(n, n)[0]
        assert below == pytest.approx(math.hypot(0.75 * gap, 0.25 * gap)) and above == 0.0
        found = uncertainty.intervals([run])["A_bar"]
        assert (found.value, found.high) == (1.0, 1.0) and found.low == pytest.approx(1 - below)


def test_nothing_forgotten_is_an_interval_either_side_of_zero_that_shrinks_as_images_grow() -> None:
    widths = []
    for per_class in (2, 20, 200):
        run = by_class(np.array([[1, 0, 0], [1, 1, 0], [1, 1, 1]], bool), per_class=per_class)
        found = uncertainty.intervals([run])["forgetting"]
        assert found.value == 0.0 and found.low < 0 < found.high
        widths.append(width(found))
    assert widths[0] > widths[1] > widths[2] > 0


def test_a_whole_class_apart_on_eight_images_is_not_distinguishable() -> None:
    """A right on a class where B is wrong, one image a class: +12.50 [12.5, 12.5] by the bootstrap
    alone ("holds"); the images A got right and B wrong (1 of 8) cannot tell."""
    a = by_class(np.array([[1, 1, 1, 1, 1, 1, 1, 0]] * 2, bool), per_class=1, classes_per_task=4)
    b = by_class(np.array([[1, 1, 1, 1, 1, 1, 0, 0]] * 2, bool), per_class=1, classes_per_task=4)
    for metric in ("A_last", "A_bar"):
        diff = uncertainty.paired_difference([a], [b], metric)
        assert diff.value == pytest.approx(0.125 if metric == "A_last" else 0.0625), metric
        assert diff.low < 0 < diff.high, metric
        assert uncertainty.beats(diff) == UNCLEAR
    # Newcombe's paired floor for A_last: b = 1 and c = 0 of n = 8, one step of 1/8 each
    diff = uncertainty.paired_difference([a], [b], "A_last")
    one, none = uncertainty.clopper_pearson(1, 8), uncertainty.clopper_pearson(0, 8)
    assert diff.high >= one[1] - 1e-12 and diff.low <= 0.125 - math.hypot(0.125 - one[0], none[1]) + 1e-12
    same = uncertainty.paired_difference([a], [a], "forgetting")  # the same answers: no test says "not"
    assert same.value == 0.0 and same.low < 0 < same.high and uncertainty.beats(same) == UNCLEAR


def test_several_seeds_of_whole_classes_are_no_point_either() -> None:
    runs = [
        by_class(np.array([[1, 0, 0, 0], [1, 1, 1, 1]], bool), per_class=3, classes_per_task=2)
        for _ in range(3)
    ]
    found = uncertainty.intervals(runs)
    assert all(width(found[m]) > 0 for m in ("A_bar", "A_last", "forgetting"))
    other = [
        by_class(np.array([[1, 0, 0, 0], [1, 1, 1, 0]], bool), per_class=3, classes_per_task=2)
        for _ in range(3)
    ]
    diff = uncertainty.paired_difference(runs, other, "A_last")
    assert diff.value == pytest.approx(0.25) and width(diff) > 0.2


def random_answers(seed: int, tasks: int = 10, classes: int = 100, per_class: int = 20) -> Outcomes:
    """A normal-size run: 10 tasks of 10 classes x 20 test images, classes of unlike accuracy, a few
    answers turned at every later stage."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(classes), per_class)
    task = labels // (classes // tasks)
    state = rng.random(len(labels)) < rng.beta(8, 2, classes)[labels]
    correct = np.zeros((tasks, len(labels)), bool)
    for t in range(tasks):
        turned = rng.random(len(labels))
        state = state if t == 0 else np.where(state, turned > 0.03, turned < 0.02)
        correct[t] = state & (task <= t)
    return Outcomes(correct, labels, task, np.arange(len(labels)))


def test_where_the_bootstrap_is_wider_than_the_floor_nothing_moves(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three seeds of a normal-size run: the bootstrap over images and seeds is wider than the floor
    of the images alone, and the intervals are the bootstrap's to the bit."""
    runs = [random_answers(seed) for seed in range(3)]
    floored = uncertainty.intervals(runs)
    for name in ("A_bar", "forgetting"):
        below, above = uncertainty.floor_of(metrics.metric_named(name), runs)  # type: ignore[misc]
        assert (
            floored[name].low < floored[name].value - below
            and floored[name].high > floored[name].value + above
        )
    monkeypatch.setattr(uncertainty, "floor_of", lambda *args, **kwargs: None)
    assert uncertainty.intervals(runs) == floored


def test_on_one_normal_size_run_the_floor_widens_a_little(monkeypatch: pytest.MonkeyPatch) -> None:
    """One run of 2,000 images: A_bar's and forgetting's floor lies a little outside the stratified
    bootstrap (which takes each class's accuracy as known), by less than a third of its width."""
    run = random_answers(0)
    floored = uncertainty.intervals([run])
    monkeypatch.setattr(uncertainty, "floor_of", lambda *args, **kwargs: None)
    bootstrap = uncertainty.intervals([run])
    for name in ("A_bar", "forgetting"):
        assert floored[name].low <= bootstrap[name].low and floored[name].high >= bootstrap[name].high
        assert 1.0 < width(floored[name]) / width(bootstrap[name]) < 1.3, name


def test_on_a_dozen_images_the_interval_covers_at_least_as_it_claims() -> None:
    """12 test images (6 classes of 2, 3 tasks) of known per-class accuracies: where the bootstrap
    alone was a point in 4 draws of 10 and covered the true A_bar in about 4 of 10, the widened
    interval covers it at least 95% of the time (exact intervals are conservative)."""
    rng = np.random.default_rng(7)
    p_class = np.array([0.95, 0.9, 1.0, 0.85, 0.95, 0.9])
    labels = np.repeat(np.arange(6), 2)
    task = labels // 2
    truth = np.mean([p_class[: 2 * (t + 1)].mean() for t in range(3)])
    covered = 0
    for _ in range(100):
        right = rng.random(12) < p_class[labels]
        run = Outcomes(
            np.repeat(right[None], 3, 0) & (task[None] <= np.arange(3)[:, None]), labels, task, np.arange(12)
        )
        found = uncertainty.intervals_of({"x": [run]}, replicates=200)["x"]["A_bar"]
        covered += found.low <= truth <= found.high
    assert covered >= 95


def test_a_plug_in_without_a_floor_has_no_interval_where_the_bootstrap_is_a_point() -> None:
    @metrics.register_metric("test_first_block_last", interval=metrics.BOOTSTRAP)
    def first_block_last(curve: metrics.Curve, matrix: metrics.Matrix) -> float:
        return matrix[-1][0]

    def first_block_weights(matrix: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        weights = np.zeros((len(sizes), len(sizes)))
        weights[-1, 0] = 1 / sizes[0]  # a right answer of the first block at the last stage
        return weights

    @metrics.register_metric(
        "test_first_block_floored", interval=metrics.BOOTSTRAP, weights=first_block_weights
    )
    def first_block_floored(curve: metrics.Curve, matrix: metrics.Matrix) -> float:
        return matrix[-1][0]

    try:
        run = by_class(np.array([[1, 0], [1, 1]], bool), per_class=8)
        other = by_class(np.array([[1, 0], [0, 1]], bool), per_class=8)
        found = uncertainty.intervals([run])
        bare, floored = found["test_first_block_last"], found["test_first_block_floored"]
        assert bare.value == 1.0 and math.isnan(bare.low) and math.isnan(bare.high)
        assert bare.record() == [None, None]
        exact = uncertainty.clopper_pearson(8, 8)
        assert floored.low == pytest.approx(exact[0]) and floored.high == 1.0
        diff = uncertainty.paired_difference([run], [other], "test_first_block_last")
        assert diff.value == 1.0 and math.isnan(diff.low) and uncertainty.beats(diff) == UNCLEAR
        diff = uncertainty.paired_difference([run], [other], "test_first_block_floored")
        assert diff.low > 0 and uncertainty.beats(diff) == HOLDS  # 8 of 8 apart: the floor allows it
        said = uncertainty.methods_said()
        assert "none where it has zero width" in str(said["test_first_block_last"])
        assert "floor_of" in str(said["test_first_block_floored"])
    finally:
        del metrics.METRICS["test_first_block_last"], metrics.METRICS["test_first_block_floored"]


def test_the_methods_written_into_metrics_json_say_the_floor() -> None:
    said = uncertainty.methods_said()
    for name in ("A_bar", "forgetting", "differences"):
        assert "Clopper-Pearson" in str(said[name]) and "MOVER" in str(said[name]), name


def test_the_floor_is_the_same_whatever_is_drawn_beside_and_in_which_order() -> None:
    runs = [by_class(np.array([[1, 0, 0], [1, 1, 0], [0, 1, 1]], bool), per_class=2) for _ in range(2)]
    other = [by_class(np.array([[0, 0, 0], [1, 0, 0], [1, 1, 1]], bool), per_class=2)]
    alone = uncertainty.intervals_of({"a": runs})["a"]
    assert alone == uncertainty.intervals_of({"b": other, "a": runs})["a"]
    assert alone == uncertainty.intervals_of({"a": runs, "b": other})["a"]
    assert uncertainty.paired_difference(runs, other, "A_bar") == uncertainty.paired_difference(
        runs, other, "A_bar"
    )


def test_a_bar_is_never_surer_than_the_exact_evidence_of_its_a_ts() -> None:
    """A_bar is the mean of its A_t, each an accuracy with its exact interval; on nested images they
    are not negatively correlated, so A_bar's half-width is at least their halves combined as if
    independent, sqrt(sum of squares) / T, on any small sample (random runs of 2 to 5 tasks, 1 to 7
    images a class, whole classes often all right or all wrong)."""
    rng = np.random.default_rng(1)
    for _ in range(200):
        tasks, per = int(rng.integers(2, 6)), int(rng.integers(1, 8))
        labels = np.repeat(np.arange(2 * tasks), per)
        task = labels // 2
        base = rng.random(len(labels)) < rng.beta(2, 1, size=2 * tasks)[labels]
        flips = rng.random((tasks, len(labels))) < 0.1 * np.arange(tasks)[:, None]
        correct = np.where(flips, ~base, base) & (task[None, :] <= np.arange(tasks)[:, None])
        found = uncertainty.intervals([Outcomes(correct, labels, task, np.arange(len(labels)))])["A_bar"]
        halves = []
        for t in range(tasks):
            seen = task <= t
            low, high = uncertainty.clopper_pearson(int(correct[t][seen].sum()), int(seen.sum()))
            halves.append((high - low) / 2)
        assert width(found) / 2 >= math.sqrt(sum(h * h for h in halves)) / tasks
