"""The `lda` statistics' shrinkage estimated by scikit-learn's Ledoit-Wolf and OAS from the kept
statistics alone (never an old task's rows): each equals `sklearn.covariance`'s on the pooled
class-centred rows (that every choice gives the same bits on any thread count:
tests/tosca_heads/test_thread_independence.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.covariance import OAS, ledoit_wolf_shrinkage

from tosca_heads.method.class_statistics import ClassStatistics


def _tasks(seed: int = 0, dim: int = 12, per_class: int = 40) -> tuple[torch.Tensor, np.ndarray]:
    """Correlated features (a shrinkage strictly between 0 and 1), 6 classes."""
    rng = np.random.default_rng(seed)
    mixing = rng.normal(size=(dim, dim)) * np.linspace(0.1, 2.0, dim)
    labels = np.repeat(np.arange(6), per_class)
    x = rng.normal(size=(len(labels), dim)) @ mixing + rng.normal(size=(6, dim))[labels] * 3
    return torch.from_numpy(x.astype(np.float32)), labels


@pytest.mark.parametrize("kind", ["ledoit_wolf", "oas"])
def test_the_shrinkage_from_kept_statistics_is_scikit_learns(kind: str) -> None:
    x, y = _tasks()
    statistics = ClassStatistics(x.shape[1], shrinkage=kind)
    for task in range(3):  # three tasks of two classes: only their statistics are kept
        rows = (y >= 2 * task) & (y < 2 * task + 2)
        statistics.partial_fit(x[rows], y[rows], range(2 * task, 2 * task + 2))
        seen = y < 2 * task + 2
        z = np.concatenate([x.numpy()[y == c].astype(np.float64) for c in range(2 * task + 2)])
        z -= np.concatenate(
            [
                np.repeat(x.numpy()[y == c].astype(np.float64).mean(0, keepdims=True), 40, 0)
                for c in range(2 * task + 2)
            ]
        )
        assert len(z) == seen.sum()
        expected = (
            ledoit_wolf_shrinkage(z, assume_centered=True)
            if kind == "ledoit_wolf"
            else OAS(assume_centered=True).fit(z).shrinkage_
        )
        assert 0 < expected < 1
        assert statistics.shrinkage_[-1] == pytest.approx(expected, rel=1e-9)
    model = statistics.model()  # a working classifier
    assert float((model.lda_log_posterior(x).argmax(-1).numpy() == y).mean()) > 0.5


def test_an_unknown_shrinkage_is_refused() -> None:
    x, y = _tasks()
    with pytest.raises(ValueError, match="unknown shrinkage 'median'"):
        ClassStatistics(x.shape[1], shrinkage="median").partial_fit(x[y < 2], y[y < 2], range(2))
