"""ACIL: the joint ridge solution on its buffer whatever the task order, the authors' recursive
least squares written out, their buffer's initialisation, the same bits on any thread count."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tosca_foundation.errors import UserError
from tosca_heads.method.baseline_registry import params_of
from tosca_heads.method.baselines.acil import ACIL


def _data(seed: int = 0, n: int = 180, dim: int = 10, classes: int = 6) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.repeat(np.arange(classes), n // classes))
    centres = rng.normal(size=(classes, dim))
    return (centres[labels] + 0.7 * rng.normal(size=(n, dim))).astype(np.float32), labels


def _fit(x: np.ndarray, y: np.ndarray, tasks: list[list[int]], **kwargs: object) -> ACIL:
    model = ACIL(**kwargs)
    for task in tasks:
        rows = np.isin(y, task)
        model.partial_fit(x[rows], y[rows])
    return model


def _joint(h: np.ndarray, y: np.ndarray, gamma: float, classes: int) -> np.ndarray:
    """argmin ||H W - Y||^2 + gamma ||W||^2: (H^T H + gamma I)^-1 H^T Y (numpy)."""
    return np.linalg.solve(h.T @ h + gamma * np.eye(h.shape[1]), h.T @ np.eye(classes)[y])


def test_acil_is_the_joint_ridge_on_its_buffer_whatever_the_task_order() -> None:
    x, y = _data()
    model = _fit(x, y, [[0, 1], [2, 3], [4, 5]], buffer_size=300, seed=4)
    h = np.maximum(x.astype(np.float64) @ model.buffer_.numpy(), 0)
    joint = _joint(h, y, 0.1, 6)
    np.testing.assert_allclose(model.main_.weights.numpy(), joint, rtol=1e-7, atol=1e-9)
    for tasks in ([[0, 1, 2, 3, 4, 5]], [[0, 1, 2, 3], [4], [5]]):
        other = _fit(x, y, tasks, buffer_size=300, seed=4)
        np.testing.assert_allclose(other.main_.weights.numpy(), joint, rtol=1e-7, atol=1e-9)
    # another class order: classes relabelled to arrive as 3, 5, 0, 1, 4, 2
    relabelled = np.argsort(np.array([3, 5, 0, 1, 4, 2]))[y]
    other = _fit(x, relabelled, [[0, 1, 2], [3, 4, 5]], buffer_size=300, seed=4)
    np.testing.assert_allclose(
        other.main_.weights.numpy(), _joint(h, relabelled, 0.1, 6), rtol=1e-7, atol=1e-9
    )
    assert np.array_equal(other.predict(x), (h @ _joint(h, relabelled, 0.1, 6)).argmax(1))


def test_the_inverse_is_the_authors_recursive_least_squares() -> None:
    """Their RecursiveLinear, literally: R = I/gamma; per batch K = (I + X R X^T)^-1,
    R -= R X^T K X R, W += R X^T (Y - X W), Y padded to the classes seen."""
    x, y = _data(1)
    model = _fit(x, y, [[0, 1], [2, 3], [4, 5]], buffer_size=200, seed=2)
    h = np.maximum(x.astype(np.float64) @ model.buffer_.numpy(), 0)
    r, w = np.eye(200) / 0.1, np.zeros((200, 0))
    for task in ([0, 1], [2, 3], [4, 5]):
        rows = np.isin(y, task)
        hx, target = h[rows], np.eye(max(task) + 1)[y[rows]]
        w = np.hstack([w, np.zeros((200, target.shape[1] - w.shape[1]))])
        k = np.linalg.inv(np.eye(len(hx)) + hx @ r @ hx.T)
        r = r - r @ hx.T @ k @ hx @ r
        w = w + r @ hx.T @ (target - hx @ w)
    np.testing.assert_allclose(model.main_.inverse.numpy(), r, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(model.main_.weights.numpy(), w, rtol=1e-6, atol=1e-9)


def test_the_buffer_is_torch_linears_initialisation_in_float64() -> None:
    x, y = _data()
    model = ACIL(buffer_size=1500, seed=0).partial_fit(x[:20], y[:20])
    buffer, bound = model.buffer_.numpy(), 1 / math.sqrt(10)
    assert model.buffer_.dtype == torch.float64 and buffer.shape == (10, 1500)
    assert np.abs(buffer).max() <= bound and np.abs(buffer).max() > 0.99 * bound
    assert abs(buffer.mean()) < 0.03 * bound and buffer.var() == pytest.approx(bound**2 / 3, rel=0.03)
    defaults = {p.name: p.default for p in params_of("acil")}
    assert defaults == {"buffer_size": 8192, "gamma": 0.1, "seed": 0}


def test_the_same_bits_on_one_and_three_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    x, y = rng.random((200, 24)).astype(np.float32), np.repeat(np.arange(4), 50)
    found = []
    for threads in (1, 3):
        monkeypatch.setenv("TOSCA_LINALG_THREADS", str(threads))
        torch.set_num_threads(threads)
        model = _fit(x, y, [[0, 1], [2, 3]], buffer_size=1100)  # three column tiles
        found.append((model.main_.inverse.numpy().copy(), model.decision_function(x)))
    for a, b in zip(*found, strict=True):
        assert np.array_equal(a, b)


def test_state_and_refusals() -> None:
    x, y = _data()
    model = _fit(x, y, [[0, 1, 2], [3, 4, 5]], buffer_size=64)
    assert model.state_bytes() == 8 * (10 * 64 + 64 * 64 + 2 * 64 * 6)
    with pytest.raises(UserError, match="lower --acil-buffer-size"):
        ACIL.check_fits(768, buffer_size=10**6)
