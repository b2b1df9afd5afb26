"""Issue 57, point 2: a method whose answer cannot depend on the features' scale gives at x1e30,
x1e-30 and x1e8 what it gives at x1 (`method/scale.py`); one whose regularisation is absolute
(ACIL, DS-AL, GACL) solves where float64 can and refuses in one line where it cannot."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tosca_heads.method import linalg
from tosca_heads.method.baseline_estimators import JointProbe, SimpleCIL
from tosca_heads.method.baselines.acil import ACIL
from tosca_heads.method.baselines.ds_al import DSAL
from tosca_heads.method.baselines.gacl import GACL
from tosca_heads.method.baselines.randumb import RanDumb
from tosca_heads.method.class_statistics import ClassStatistics
from tosca_heads.method.scale import PRECISION_REACH, BeyondPrecision, power_of_four_near, unit_rows

SCALES = [1e30, 1e-30, 1e8, 1e-8]


def blobs(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Six Gaussian classes of 16 features: train (10 a class) and test (5 a class)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(6, 16))
    y, yt = np.repeat(np.arange(6), 10), np.repeat(np.arange(6), 5)
    x = centres[y] + 0.3 * rng.normal(size=(60, 16))
    xt = centres[yt] + 0.3 * rng.normal(size=(30, 16))
    return x, y, xt, yt


def tasks(model: object, x: np.ndarray, y: np.ndarray, scale: float) -> object:
    for t in range(3):
        rows = (y >= 2 * t) & (y < 2 * t + 2)
        model.partial_fit(np.float32(x[rows] * scale), y[rows])  # type: ignore[attr-defined]
    return model


def test_unit_rows_are_normalize_bits_where_that_holds_and_right_where_it_did_not() -> None:
    x = torch.from_numpy(np.float32(blobs()[0]))
    assert torch.equal(unit_rows(x), F.normalize(x, dim=-1))  # a power of two changes no bit
    for scale in SCALES:
        torch.testing.assert_close(unit_rows(x * scale), F.normalize(x, dim=-1), rtol=1e-6, atol=1e-6)
    assert not F.normalize(x * 1e30, dim=-1).any()  # the fault: squares past float32 (x / inf = 0)
    assert torch.equal(unit_rows(torch.zeros(2, 3)), torch.zeros(2, 3))  # a zero row stays zero


def test_power_of_four_near() -> None:
    assert power_of_four_near(1.0) == 1.0 and power_of_four_near(0.0) == 1.0
    for value in (1e60, 3.0, 1e-60):
        assert 0.25 <= power_of_four_near(value) / value <= 4


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("make", [SimpleCIL, JointProbe, lambda: RanDumb(dim=128), lambda: RanDumb(dim=0)])
def test_a_scale_free_method_gives_at_any_scale_what_x1_gives(make, scale: float) -> None:
    """SimpleCIL (a cosine), the joint probe (standardised inputs) and RanDumb (gamma = 1 / (d
    var X), and LDA on the features themselves) predict the same at x1 and x`scale`: at x1e30 the
    first two printed 16.67 (squares past float32), at x1e-30 the last (squares below it)."""
    x, y, xt, yt = blobs()
    fit = (
        (lambda m, s: m.fit(np.float32(x * s), y)) if make is JointProbe else (lambda m, s: tasks(m, x, y, s))
    )
    base = fit(make(), 1.0).predict(np.float32(xt))
    assert (base == yt).mean() == 1.0
    np.testing.assert_array_equal(fit(make(), scale).predict(np.float32(xt * scale)), base)


@pytest.mark.parametrize("scale", SCALES)
def test_the_routers_statistics_at_any_scale_give_what_x1_gives(scale: float) -> None:
    """`tosca fit` crashed in the routers' statistics at x1e30 (a float32 covariance past its
    range); the shared-covariance Gaussian's posteriors and the nearest class mean are the x1 ones."""

    def model(s: float):
        x, y, _, _ = blobs()
        statistics = ClassStatistics(16)
        for t in range(3):
            rows = (y >= 2 * t) & (y < 2 * t + 2)
            statistics.partial_fit(
                torch.tensor(x[rows] * s, dtype=torch.float32), y[rows], range(2 * t, 2 * t + 2)
            )
        return statistics.model()

    xt = blobs()[2]
    base, scaled = model(1.0), model(scale)
    test, test_scaled = torch.tensor(xt, dtype=torch.float32), torch.tensor(xt * scale, dtype=torch.float32)
    torch.testing.assert_close(
        scaled.lda_log_posterior(test_scaled), base.lda_log_posterior(test), rtol=1e-4, atol=1e-3
    )
    torch.testing.assert_close(scaled.ncm_scores(test_scaled), base.ncm_scores(test), rtol=1e-5, atol=1e-5)


def svd_ridge(h: np.ndarray, y: np.ndarray, ht: np.ndarray, gamma: float) -> np.ndarray:
    """The ridge's predictions by an SVD of the rows (accurate where R's recursion is not)."""
    u, s, vt = np.linalg.svd(h, full_matrices=False)
    weights = vt.T @ ((s / (s**2 + gamma))[:, None] * (u.T @ np.eye(6)[y]))
    return (ht @ weights).argmax(1)


@pytest.mark.parametrize("scale,gamma", [(1.0, 0.1), (1e4, 0.1), (1e5, 0.1), (1.0, 1e-10)])
def test_acil_within_reach_agrees_with_an_svd_ridge(scale: float, gamma: float) -> None:
    """Below PRECISION_REACH, ACIL's recursion gives the ridge's answer (an SVD in float64)."""
    x, y, xt, _ = blobs()
    model = tasks(ACIL(buffer_size=128, gamma=gamma), x, y, scale)
    with linalg.workers() as run:
        h, ht = (model.expand(np.float32(v * scale), run).numpy() for v in (x, xt))
    assert (h**2).sum() / gamma <= PRECISION_REACH
    np.testing.assert_array_equal(model.predict(np.float32(xt * scale)), svd_ridge(h, y, ht, gamma))


@pytest.mark.parametrize(
    "make,scale",
    [
        (lambda: ACIL(buffer_size=128), 1e8),
        (lambda: ACIL(buffer_size=128, gamma=1e-300), 1.0),
        (lambda: DSAL(buffer_size=128), 1e8),
        (lambda: DSAL(buffer_size=128, gamma_main=1e-300), 1.0),
        (lambda: DSAL(buffer_size=128, gamma_comp=1e-300), 1.0),
        (lambda: GACL(buffer_size=128), 1e30),
    ],
)
def test_a_regularisation_past_float64s_reach_is_refused_before_any_update(make, scale: float) -> None:
    """x1e8 gave ACIL 16.67 or a Cholesky traceback, gamma 1e-300 a LinAlgError: now one line
    naming the keyword and the least value float64 can solve with."""
    x, y, _, _ = blobs()
    with pytest.raises(
        BeyondPrecision, match=r"is too small beside the features' scale.*raise gamma\w* to at least"
    ):
        tasks(make(), x, y, scale)
