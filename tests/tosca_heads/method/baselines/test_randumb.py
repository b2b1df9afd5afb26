"""RanDumb against scikit-learn's RBFSampler + LinearDiscriminantAnalysis(lsqr, OAS) (the authors' code),
task by task == at once, any class order, thread bits, refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.covariance import OAS
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.kernel_approximation import RBFSampler

from tosca_foundation.errors import UserError
from tosca_heads.method.baselines.randumb import RanDumb


def blobs(
    classes: int = 6, per_class: int = 25, dim: int = 12, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(classes), per_class)
    x = np.abs(rng.normal(size=(len(y), dim))) + (y[:, None] == np.arange(dim) % classes) * 0.8
    return x.astype(np.float32), y


def authors(x: np.ndarray, y: np.ndarray, first: np.ndarray, dim: int, seed: int) -> np.ndarray:
    """src/main.py's RanDumb (gamma 'scale' on `first`, the first task's rows), scores on x."""
    if dim:
        embedder = RBFSampler(gamma="scale", n_components=dim, random_state=seed).fit(first)
        h = embedder.transform(x)
    else:
        h = x
    lda = LinearDiscriminantAnalysis(solver="lsqr", covariance_estimator=OAS(assume_centered=False))
    return lda.fit(h, y).decision_function(h)


@pytest.mark.parametrize("dim", [0, 200])
def test_scores_are_scikit_learns(dim: int) -> None:
    x, y = blobs()
    model = RanDumb(dim=dim, seed=3).partial_fit(x[:50], y[:50]).partial_fit(x[50:], y[50:])
    expected = authors(x, y, x[:50], dim, 3)
    np.testing.assert_allclose(model.decision_function(x), expected, atol=1e-5 * np.abs(expected).max())
    if dim:
        assert model.gamma_ == pytest.approx(1 / (12 * x[:50].var()))
    width = dim or 12
    kept = 150 * width if width > 150 else width * width  # the covariance sum's smaller form
    assert model.covariance_sum_.form == ("rows" if width > 150 else "gram")
    assert model.state_bytes() == 8 * (kept + 2 * 6 * width) + (4 * (12 * dim + dim) if dim else 0)


@pytest.mark.parametrize("dim", [149, 150, 151, 260])  # 150 rows: both sides of n = D
def test_both_forms_of_the_covariance_sum_give_scikit_learns_scores(dim: int) -> None:
    """While fewer rows than D have been seen A^-1 M' is solved through the n x n system
    (Woodbury), then through the D x D sum: scikit-learn's scores either way, to rounding."""
    x, y = blobs()
    model = RanDumb(dim=dim, seed=3).partial_fit(x[:75], y[:75]).partial_fit(x[75:], y[75:])
    assert model.covariance_sum_.form == ("rows" if dim > 150 else "gram")
    expected = authors(x, y, x[:75], dim, 3)
    np.testing.assert_allclose(model.decision_function(x), expected, atol=1e-5 * np.abs(expected).max())
    assert (model.predict(x) == expected.argmax(1)).all()


def test_tasks_in_another_order_and_increment_give_the_joint_solution() -> None:
    """Given gamma (the first task's: the one order-dependent piece), the stream's scores are those
    of one fit on all the data."""
    x, y = blobs()
    order = np.array([0, 4, 1, 5, 3, 2])  # incremental id i is original class order[i]
    ids = np.argsort(order)[y]
    model = RanDumb(dim=150)
    for task in ([0, 1], [2, 3, 4], [5]):
        rows = np.isin(ids, task)
        model.partial_fit(x[rows], ids[rows])
    first = x[np.isin(ids, [0, 1])]
    assert model.gamma_ == pytest.approx(1 / (12 * first.var()))
    joint = RanDumb(dim=150)
    joint._draw(first)
    expected = joint.partial_fit(x, ids).decision_function(x)
    np.testing.assert_allclose(model.decision_function(x), expected, atol=1e-9 * np.abs(expected).max())
    np.testing.assert_allclose(expected, authors(x, ids, first, 150, 0), atol=1e-5 * np.abs(expected).max())


@pytest.mark.parametrize("threads", [1, 3])
def test_same_bits_on_any_thread_count(threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    x, y = blobs(per_class=10)
    before = torch.get_num_threads()

    def scores(count: int) -> np.ndarray:
        monkeypatch.setenv("TOSCA_LINALG_THREADS", str(count))
        torch.set_num_threads(count)
        try:
            model = RanDumb(dim=1100).partial_fit(x[:20], y[:20]).partial_fit(x[20:], y[20:])
            return model.decision_function(x)
        finally:
            torch.set_num_threads(before)

    assert np.array_equal(scores(2), scores(threads))


@pytest.mark.filterwarnings("ignore:Only one sample available")
def test_a_class_with_one_image_is_handled_as_scikit_learn_does() -> None:
    x, y = blobs()
    keep = np.r_[0, 25 : len(y)]  # class 0 keeps one image: its OAS covariance is 0
    model = RanDumb(dim=100).partial_fit(x[keep], y[keep])
    expected = authors(x[keep], y[keep], x[keep], 100, 0)
    scores = model.decision_function(x[keep])
    assert np.isfinite(scores).all()
    np.testing.assert_allclose(scores, expected, atol=1e-5 * np.abs(expected).max())


def test_too_large_a_feature_dimension_is_refused_before_any_work() -> None:
    RanDumb.check_fits(768, classes=10, dim=10_000)
    with pytest.raises(UserError, match="lower --randumb-dim"):
        RanDumb.check_fits(768, classes=10, dim=10**7)
