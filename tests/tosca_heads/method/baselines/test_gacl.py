"""GACL: the authors' online update (each batch fitted online_iter times, W padded as classes are
exposed) is the joint ridge on its buffer with gamma / online_iter, whatever the blur; and the
baselines that declare `recurring_classes` learn a class split over calls as in one call."""

from __future__ import annotations

import numpy as np
import pytest

from tosca_heads.method.baseline_registry import BASELINES, params_of
from tosca_heads.method.baselines.gacl import GACL


def _data(seed: int = 0, n: int = 120, dim: int = 8, classes: int = 5) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.repeat(np.arange(classes), n // classes))
    centres = rng.normal(size=(classes, dim))
    return (centres[labels] + 0.7 * rng.normal(size=(n, dim))).astype(np.float32), labels


def test_gacl_is_the_authors_online_update_repeated_online_iter_times() -> None:
    x, y = _data()
    batches = [
        np.arange(i, min(i + 16, len(y))) for i in range(0, len(y), 16)
    ]  # classes recur, appear mid-stream
    model = GACL(buffer_size=150, gamma=100.0, online_iter=3, seed=1)
    for rows in batches:
        model.partial_fit(x[rows], y[rows])
    h = np.maximum(x.astype(np.float64) @ model.buffer_.numpy(), 0)
    r, w = np.eye(150) / 100.0, np.zeros((150, 0))
    for rows in batches:  # methods/GACL.py's fit, literally, online_iter = 3 times per batch
        hx = h[rows]
        classes = max(w.shape[1], int(y[rows].max()) + 1)
        w = np.hstack([w, np.zeros((150, classes - w.shape[1]))])
        target = np.eye(classes)[y[rows]]
        for _ in range(3):
            k = np.eye(len(hx)) + hx @ r @ hx.T
            r = r - r @ hx.T @ np.linalg.inv(k) @ hx @ r
            w = w + r @ hx.T @ (target - hx @ w)
    np.testing.assert_allclose(model.main_.weights.numpy(), w, rtol=1e-6, atol=1e-8)
    joint = np.linalg.solve(h.T @ h + (100.0 / 3) * np.eye(150), h.T @ np.eye(5)[y])
    np.testing.assert_allclose(model.main_.weights.numpy(), joint, rtol=1e-6, atol=1e-8)


def test_gacl_defaults_are_the_authors() -> None:
    assert {p.name: p.default for p in params_of("gacl")} == {
        "buffer_size": 5000,
        "gamma": 100.0,
        "online_iter": 3,
        "seed": 0,
    }


@pytest.mark.parametrize(
    "method", ["gacl", "acil", "ridge", "simplecil", "ranpac", "klda", "loranpac", "fecam"]
)
def test_a_recurring_class_split_over_calls_is_learned_as_in_one_call(method: str) -> None:
    assert getattr(BASELINES[method], "recurring_classes", False)
    x, y = _data(2)
    small = {  # RanPAC's ridge given: its authors' rule chooses one per call, on that call's rows
        "gacl": {"buffer_size": 64},
        "acil": {"buffer_size": 64},
        "ranpac": {"projection_dim": 64, "ridge": 1.0},
        "klda": {"dim": 64, "sigma": 1e-2},
        "loranpac": {"embedding_dim": 64, "rank": 64, "truncate_percent": 0.0},  # no truncation: exact
    }.get(method, {})
    whole = BASELINES[method](**small).partial_fit(x, y)
    split = BASELINES[method](**small)
    for part in np.array_split(np.arange(len(y)), 3):  # every class in every part
        split.partial_fit(x[part], y[part])
    np.testing.assert_allclose(split.decision_function(x), whole.decision_function(x), rtol=1e-4, atol=1e-5)
