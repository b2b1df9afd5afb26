"""LoRanPAC: its continual truncated SVD against direct computations on all the data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from support.stores import synthetic_store

from tosca_foundation.errors import UserError
from tosca_heads.method.baseline_registry import BASELINES, given_params
from tosca_heads.method.baselines.loranpac import LoRanPAC, kept_rank
from tosca_heads.method.protocol import StreamConfig
from tosca_heads.requests.plan import FitPlan
from tosca_heads.running.baseline_runs import run_baseline


def _tasks(seed: int, dim: int, sizes: list[int], per_task: int = 2) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    tasks = []
    for t, n in enumerate(sizes):
        labels = rng.integers(t * per_task, (t + 1) * per_task, n)
        features = (rng.normal(size=(n, dim)) + 0.5 * (labels[:, None] % 3)).astype(np.float32)
        tasks.append((features, labels))
    return tasks


def _features(model: LoRanPAC, x: np.ndarray) -> np.ndarray:
    """ReLU(x W) from the model's random matrix, a float32 product as the model's (the features are
    the same; what is checked is the algebra on them)."""
    return torch.relu(torch.from_numpy(x) @ model.projection_).double().numpy()


def _fit(model: LoRanPAC, tasks: list[tuple[np.ndarray, np.ndarray]]) -> LoRanPAC:
    for x, y in tasks:
        model.partial_fit(x, y)
    return model


def test_without_truncation_it_is_the_joint_minimum_norm_least_squares_solution() -> None:
    """truncate_percent 0 keeps every factor: three tasks, folded in chunks of 7 rows, give
    pinv(H) Y on all rows at once."""
    tasks = _tasks(0, 6, [20, 15, 12])
    model = _fit(LoRanPAC(embedding_dim=80, truncate_percent=0.0, seed=3, chunk_rows=7), tasks)
    x, y = np.concatenate([t[0] for t in tasks]), np.concatenate([t[1] for t in tasks])
    h = _features(model, x)
    direct = np.linalg.pinv(h) @ np.eye(6)[y]
    np.testing.assert_allclose(model.weights_.numpy(), direct, rtol=1e-7, atol=1e-9)
    assert model.basis_.shape == (80, 47)
    np.testing.assert_allclose(model.decision_function(x), h @ direct, rtol=1e-6, atol=1e-8)


def test_one_update_is_the_pseudo_inverse_of_the_rank_truncated_features() -> None:
    """One task of 40 rows: the top round(0.75 * 40) = 30 SVD factors are kept, and the weights
    are pinv(H_30) Y, H_30 the best rank-30 approximation of H."""
    ((x, y),) = _tasks(1, 5, [40], per_task=3)
    model = LoRanPAC(embedding_dim=64, seed=5).partial_fit(x, y)
    h = _features(model, x)
    u, s, vt = np.linalg.svd(h, full_matrices=False)
    truncated = (u[:, :30] * s[:30]) @ vt[:30]
    np.testing.assert_allclose(
        model.weights_.numpy(), np.linalg.pinv(truncated) @ np.eye(3)[y], rtol=1e-7, atol=1e-9
    )
    np.testing.assert_allclose(model.singular_.numpy(), s[:30], rtol=1e-10)


def test_continual_truncation_follows_the_papers_recurrence() -> None:
    """With truncation the continual state is not the joint truncated SVD; what holds (the
    paper's recurrence): after each task, U_t S_t is the top-r_t SVD of [U_{t-1} S_{t-1}, H_t^T],
    r_t = min(round(0.75 n_t), rank); U orthonormal; the weights U S^-2 U^T H_{1:t}^T Y with the
    untruncated H^T Y."""
    tasks = _tasks(2, 7, [30, 25, 18])
    model = LoRanPAC(embedding_dim=90, rank=50, seed=11)
    factor, seen, cross = np.zeros((90, 0)), 0, np.zeros((90, 6))
    for x, y in tasks:
        model.partial_fit(x, y)
        h = _features(model, x)
        seen += len(x)
        cross += h.T @ np.eye(6)[y]
        u, s, _ = np.linalg.svd(np.hstack([factor, h.T]), full_matrices=False)
        keep = min(round(0.75 * seen), 50)
        factor = u[:, :keep] * s[:keep]
        basis = model.basis_.numpy()
        assert basis.shape == (90, keep) == (90, kept_rank(seen, 90, 50, 25.0))
        np.testing.assert_allclose(model.singular_.numpy(), s[:keep], rtol=1e-9)
        np.testing.assert_allclose(basis @ basis.T, u[:, :keep] @ u[:, :keep].T, atol=1e-8)
        np.testing.assert_allclose(basis.T @ basis, np.eye(keep), atol=1e-12)
    weights = u[:, :keep] @ ((u[:, :keep].T @ cross) / s[:keep, None] ** 2)
    np.testing.assert_allclose(model.weights_.numpy(), weights, rtol=1e-6, atol=1e-9)
    assert model.state_bytes() == 8 * (90 * 50 + 50 + 90 * 6)


def test_the_rank_is_capped_by_rank_and_by_the_embedding_dimension() -> None:
    tasks = _tasks(3, 4, [40, 40])
    assert _fit(LoRanPAC(embedding_dim=50, rank=9, seed=0), tasks).basis_.shape == (50, 9)
    assert _fit(LoRanPAC(embedding_dim=50, seed=0), tasks).basis_.shape == (50, round(0.75 * 50))


def test_repeated_rows_without_truncation_drop_zero_singular_values_as_pinv_does() -> None:
    """Duplicated rows make H rank deficient: no division by a zero singular value, the
    minimum-norm solution still (numpy's pinv drops them the same way)."""
    ((x, y),) = _tasks(4, 5, [10])
    x, y = np.concatenate([x, x]), np.concatenate([y, y])
    model = LoRanPAC(embedding_dim=60, truncate_percent=0.0, seed=2).partial_fit(x[:10], y[:10])
    model.partial_fit(x[10:], y[10:] + 0)  # the same classes again
    assert model.basis_.shape == (60, 10)
    direct = np.linalg.pinv(_features(model, x)) @ np.eye(2)[y]
    np.testing.assert_allclose(model.weights_.numpy(), direct, rtol=1e-6, atol=1e-8)
    assert np.isfinite(model.decision_function(x)).all()


def test_the_same_bits_on_one_and_three_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """E = 2,100 (past linalg's TILE and ROWS, so products are tiled and summed over two spans):
    the weights and the scores are the same bits on 1 and 3 threads."""
    tasks = _tasks(5, 16, [70, 60])
    results = []
    before = torch.get_num_threads()
    try:
        for threads in (1, 3):
            monkeypatch.setenv("TOSCA_LINALG_THREADS", str(threads))
            torch.set_num_threads(threads)
            model = _fit(LoRanPAC(embedding_dim=2100, seed=1, chunk_rows=50), tasks)
            results.append((model.weights_.numpy(), model.decision_function(tasks[0][0])))
    finally:
        torch.set_num_threads(before)
    assert np.array_equal(results[0][0], results[1][0]) and np.array_equal(results[0][1], results[1][1])


def test_a_state_that_would_not_fit_is_refused_in_one_line() -> None:
    with pytest.raises(UserError, match="lower --loranpac-embedding-dim or --loranpac-rank") as caught:
        LoRanPAC.check_fits(768, classes=200, embedding_dim=10**7, rank=10**6)
    assert "\n" not in str(caught.value)
    LoRanPAC.check_fits(768, classes=200, embedding_dim=1000, rank=100)  # fits


@pytest.mark.parametrize(
    ("key", "value"),
    [("loranpac_truncate_percent", 100.0), ("loranpac_embedding_dim", 0), ("loranpac_ridge", -1.0)],
)
def test_values_outside_their_range_are_refused(key: str, value: float) -> None:
    with pytest.raises(UserError, match=key.replace("_", "-")):
        given_params(["loranpac"], {key: value})


def test_its_arithmetic_grows_with_the_embedding_dimension() -> None:
    class Shape:
        train, test, dim, classes = [600] * 5, [600] * 5, 1280, 10

    small, precision = LoRanPAC.work(Shape(), embedding_dim=1000, rank=10_000, truncate_percent=25.0)
    large, _ = LoRanPAC.work(Shape(), embedding_dim=10_000, rank=10_000, truncate_percent=25.0)
    assert precision == "float64" and 5 * small < large
    # the last task's projection alone: 2 * 600 rows * 1280 * E
    assert large > 5 * 2 * 600 * 1280 * 10_000


def test_it_runs_registered_through_the_protocol(tmp_path: Path) -> None:
    assert BASELINES["loranpac"] is LoRanPAC
    store = synthetic_store(tmp_path / "s.zarr", classes=6, spread=0.05)
    result = run_baseline("loranpac", FitPlan.build(store, StreamConfig(2, 2)), embedding_dim=300)
    assert len(result.metrics["A_t"]) == 3 and result.metrics["A_t"][-1] > 0.9
