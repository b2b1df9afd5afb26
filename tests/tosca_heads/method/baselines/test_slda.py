"""Deep SLDA: the batched update equals the authors' sample-by-sample loop (written out here),
the base initialisation is sklearn's OAS, the scores are their formula, the same bits on any
thread count."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.covariance import OAS

from tosca_foundation.errors import UserError
from tosca_heads.method.baselines.slda import SLDA


def _data(seed: int = 0, n: int = 90, dim: int = 7, classes: int = 6) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.repeat(np.arange(classes), n // classes))
    centres = 2 * rng.normal(size=(classes, dim))
    return (centres[labels] + rng.normal(size=(n, dim))).astype(np.float32), labels


class Loop:
    """The authors' StreamingLDA, literally, in float64: fit one sample at a time, fit_base."""

    def __init__(self, dim: int, classes: int):
        self.mu = np.zeros((classes, dim))
        self.c = np.zeros(classes)
        self.sigma = np.ones((dim, dim))
        self.n = 0

    def fit(self, x: np.ndarray, k: int) -> None:
        u = (x - self.mu[k])[None]
        delta = (u.T @ u) * self.n / (self.n + 1)
        self.sigma = (self.n * self.sigma + delta) / (self.n + 1)
        self.mu[k] += (x - self.mu[k]) / (self.c[k] + 1)
        self.c[k] += 1
        self.n += 1

    def fit_base(self, x: np.ndarray, y: np.ndarray) -> None:
        for k in np.unique(y):
            self.mu[k] = x[y == k].mean(0)
            self.c[k] = (y == k).sum()
        self.n = len(x)
        self.sigma = OAS(assume_centered=True).fit(x - self.mu[y]).covariance_

    def scores(self, x: np.ndarray, eps: float = 1e-4) -> np.ndarray:
        lam = np.linalg.pinv((1 - eps) * self.sigma + eps * np.eye(len(self.sigma)))
        w = lam @ self.mu.T
        return x @ w - 0.5 * (self.mu.T * w).sum(0)


@pytest.mark.parametrize("base_init", [False, True])
def test_the_batched_update_is_the_authors_sample_by_sample_loop(base_init: bool) -> None:
    x, y = _data()
    x64 = x.astype(np.float64)
    tasks = [y < 2, (y >= 2) & (y < 4), y >= 4]
    model, loop = SLDA(base_init=base_init), Loop(7, 6)
    for t, rows in enumerate(tasks):
        model.partial_fit(x[rows], y[rows])
        if t == 0 and base_init:
            loop.fit_base(x64[rows], y[rows])
        else:
            for xi, yi in zip(x64[rows], y[rows], strict=True):
                loop.fit(xi, yi)
        seen = int(y[rows].max()) + 1
        np.testing.assert_allclose(model.means_.numpy(), loop.mu[:seen], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(model.covariance_.numpy(), loop.sigma, rtol=1e-10, atol=1e-12)
        assert model.updates_ == loop.n and model.counts_.tolist() == loop.c[:seen].tolist()
        scores = model.decision_function(x)
        np.testing.assert_allclose(scores, loop.scores(x64)[:, :seen], rtol=1e-7, atol=1e-7)


def test_the_normaliser_is_the_samples_seen_and_a_class_starts_from_a_zero_mean() -> None:
    """Two samples of one class, written out: the first enters with weight 0 (t = 0), the second
    as (x2 - x1)(x2 - x1)^T times t/(t+1) = 1/2, over N = 2;
    a new class's first sample (t = 2) enters as its raw outer product x3 x3^T times 2/3, over 3."""
    x = np.array([[1.0, 0.0], [3.0, 1.0], [0.0, 2.0]], dtype=np.float32)
    model = SLDA(base_init=False).partial_fit(x[:2], np.array([0, 0]))
    d = (x[1] - x[0]).astype(np.float64)
    np.testing.assert_allclose(model.covariance_.numpy(), np.outer(d, d) * 0.5 / 2)
    model.partial_fit(x[2:], np.array([1]))
    third = np.outer(x[2], x[2]).astype(np.float64) * 2 / 3
    np.testing.assert_allclose(model.covariance_.numpy(), (np.outer(d, d) * 0.5 + third) / 3)


def test_a_class_with_one_image_gives_finite_scores() -> None:
    x, y = _data(1)
    y = y.copy()
    y[y == 5] = 4
    y[0] = 5  # class 5: one image
    model = SLDA().partial_fit(x[y < 3], y[y < 3]).partial_fit(x[y >= 3], y[y >= 3])
    assert np.isfinite(model.decision_function(x)).all()


def test_the_same_bits_on_one_and_three_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    x, y = rng.random((300, 600)).astype(np.float32), np.repeat(np.arange(4), 75)
    found = []
    for threads in (1, 3):
        monkeypatch.setenv("TOSCA_LINALG_THREADS", str(threads))
        torch.set_num_threads(threads)
        model = SLDA().partial_fit(x[y < 2], y[y < 2]).partial_fit(x[y >= 2], y[y >= 2])
        found.append((model.covariance_.numpy().copy(), model.decision_function(x)))
    for a, b in zip(*found, strict=True):
        assert np.array_equal(a, b)


def test_state_and_refusals() -> None:
    x, y = _data()
    model = SLDA().partial_fit(x, y)
    assert model.state_bytes() == 8 * (6 * 7 + 7 * 7) + 8 * 6
    with pytest.raises(UserError, match="SLDA"):
        SLDA.check_fits(10**7)
