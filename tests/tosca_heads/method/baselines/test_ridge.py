"""Ridge on the raw features (RanPAC's no-projection row): the joint ridge solution over tasks,
RanPAC's ridge rule, the validation choice, the same bits on any thread count."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tosca_foundation.errors import UserError
from tosca_heads.method.baseline_estimators import RANPAC_RIDGES
from tosca_heads.method.baselines.ridge import RANPAC_RULE, Ridge


def _data(seed: int = 0, n: int = 240, dim: int = 16, classes: int = 6) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(classes), n // classes)
    centres = rng.normal(size=(classes, dim))
    return (centres[labels] + 0.8 * rng.normal(size=(n, dim))).astype(np.float32), labels


def _fit(x: np.ndarray, y: np.ndarray, tasks: list[list[int]], **kwargs: object) -> Ridge:
    model = Ridge(**kwargs)
    for task in tasks:
        rows = np.isin(y, task)
        model.partial_fit(x[rows], y[rows])
    return model


def _joint(x: np.ndarray, y: np.ndarray, ridge: float, classes: int) -> np.ndarray:
    """argmin ||X W - Y||^2 + ridge ||W||^2 by least squares on [X; sqrt(ridge) I] (numpy)."""
    xs = np.vstack([x.astype(np.float64), np.sqrt(ridge) * np.eye(x.shape[1])])
    ys = np.vstack([np.eye(classes)[y], np.zeros((x.shape[1], classes))])
    return np.linalg.lstsq(xs, ys, rcond=None)[0]


def test_tasks_give_the_joint_ridge_solution_whatever_the_class_order_and_increment() -> None:
    x, y = _data()
    joint = _joint(x, y, 0.5, 6)
    for tasks in ([[0, 1], [2, 3], [4, 5]], [[0, 1, 2, 3, 4, 5]], [[0, 1, 2, 3], [4], [5]]):
        model = _fit(x, y, tasks, ridge=0.5)
        np.testing.assert_allclose(model.weights_.numpy(), joint, rtol=1e-8, atol=1e-10)
    # another class order: relabel so the classes arrive as 3, 5, 0, ...; same joint solution
    order = np.array([3, 5, 0, 1, 4, 2])
    relabelled = np.argsort(order)[y]
    model = _fit(x, relabelled, [[0, 1, 2], [3, 4, 5]], ridge=0.5)
    np.testing.assert_allclose(model.weights_.numpy(), _joint(x, relabelled, 0.5, 6), rtol=1e-8, atol=1e-10)
    assert np.array_equal(model.predict(x), _joint_pred(x, relabelled))


def _joint_pred(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return (x.astype(np.float64) @ _joint(x, y, 0.5, 6)).argmax(1)


def test_the_ridge_is_ranpacs_rule_on_the_first_task_and_kept() -> None:
    """The least held-out MSE (all one-hot columns) of a fit on a random 80% of the first task,
    each solution checked against a direct solve; the ridge is kept on later tasks."""
    x, y = _data(1)
    first = y < 3
    model = Ridge().partial_fit(x[first], y[first])
    assert model.tuned_by_ == RANPAC_RULE and len(model.ridge_losses_) == len(RANPAC_RIDGES)
    order = torch.randperm(int(first.sum()), generator=torch.Generator().manual_seed(0)).numpy()
    fit, val = order[: int(0.8 * first.sum())], order[int(0.8 * first.sum()) :]
    xf, yf = x[first].astype(np.float64), np.eye(3)[y[first]]
    for ridge in (1e-2, 1.0, 1e2):
        w = np.linalg.solve(xf[fit].T @ xf[fit] + ridge * np.eye(16), xf[fit].T @ yf[fit])
        expected = ((xf[val] @ w - yf[val]) ** 2).mean()
        assert model.ridge_losses_[ridge] == pytest.approx(expected, rel=1e-6)
    assert model.ridge_ == min(model.ridge_losses_, key=model.ridge_losses_.__getitem__)
    chosen = model.ridge_
    model.partial_fit(x[~first], y[~first])
    assert model.ridge_ == chosen
    np.testing.assert_allclose(model.weights_.numpy(), _joint(x, y, chosen, 6), rtol=1e-7, atol=1e-9)


def test_tune_picks_the_most_accurate_ridge_on_validation_ties_to_the_least_mse() -> None:
    x, y = _data(2, n=300)
    train, val = np.arange(len(y)) % 5 != 0, np.arange(len(y)) % 5 == 0
    first = y < 3
    model = Ridge().partial_fit(x[train & first], y[train & first])
    model.tune(x[val & first], y[val & first])
    assert model.tuned_by_ == "validation"
    xt, xv = x[train & first].astype(np.float64), x[val & first].astype(np.float64)
    found = {}
    for ridge in RANPAC_RIDGES:
        w = np.linalg.solve(xt.T @ xt + ridge * np.eye(16), xt.T @ np.eye(3)[y[train & first]])
        scores = xv @ w
        found[ridge] = (
            (scores.argmax(1) == y[val & first]).mean(),
            ((scores - np.eye(3)[y[val & first]]) ** 2).mean(),
        )
    best = max(a for a, _ in found.values())
    assert sum(a == best for a, _ in found.values()) > 1  # a tie, broken by the MSE
    tied = {r: mse for r, (a, mse) in found.items() if a == best}
    assert model.ridge_ == min(tied, key=tied.__getitem__)
    for ridge, (accuracy, mse) in found.items():
        assert model.ridge_scores_[ridge][0] == accuracy
        assert model.ridge_scores_[ridge][1] == pytest.approx(mse, rel=1e-6)
    joint = _joint(x[train & first], y[train & first], model.ridge_, 3)
    np.testing.assert_allclose(model.weights_.numpy(), joint, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("rows", [599, 600, 601, 900])  # d = 600 (two column tiles): both sides of n = d
def test_both_forms_give_the_joint_ridge_solution_and_the_same_validation_choice(rows: int) -> None:
    """While fewer rows than features have been seen the n x n system is solved, then the d x d one:
    the weights are the joint ridge solution either way, to rounding, and the validation path
    (`tune`) scores every ridge as direct solves do."""
    rng = np.random.default_rng(4)
    labels = np.arange(rows) % 4
    x = (rng.normal(size=(rows, 600)) + labels[:, None] * rng.uniform(0, 0.05, size=600)).astype(np.float32)
    model = _fit(x, labels, [[0, 1], [2, 3]], ridge=3.0)
    assert model.system_.form == ("rows" if rows < 600 else "gram")
    np.testing.assert_allclose(model.weights_.numpy(), _joint(x, labels, 3.0, 4), rtol=1e-7, atol=1e-10)
    held = rng.normal(size=(40, 600)).astype(np.float32)
    held_labels = np.arange(40) % 4
    tuned = _fit(x, labels, [[0, 1], [2, 3]], ridges=(1e-2, 1.0, 1e2))
    tuned.tune(held, held_labels)
    xs = x.astype(np.float64)
    for ridge in (1e-2, 1.0, 1e2):
        w = np.linalg.solve(xs.T @ xs + ridge * np.eye(600), xs.T @ np.eye(4)[labels])
        scores = held.astype(np.float64) @ w
        assert tuned.ridge_scores_[ridge][0] == (scores.argmax(1) == held_labels).mean()
        mse = ((scores - np.eye(4)[held_labels]) ** 2).mean()
        assert tuned.ridge_scores_[ridge][1] == pytest.approx(mse, rel=1e-6)
    assert model.state_bytes() == 8 * ((rows * 604 if rows < 600 else 600 * 604) + 600 * 4)


@pytest.mark.parametrize("rows", [400, 800])  # under and over d = 600 (two column tiles): both forms
def test_the_same_bits_on_one_two_and_three_threads(monkeypatch: pytest.MonkeyPatch, rows: int) -> None:
    rng = np.random.default_rng(3)
    x, y = rng.random((rows, 600)).astype(np.float32), np.repeat(np.arange(4), rows // 4)
    scores = []
    for threads in (1, 2, 3):
        monkeypatch.setenv("TOSCA_LINALG_THREADS", str(threads))
        torch.set_num_threads(threads)
        model = _fit(x, y, [[0, 1], [2, 3]])
        model.tune(x[::3], y[::3])
        assert model.system_.form == ("rows" if rows < 600 else "gram")
        kept = model.system_.rows if rows < 600 else model.system_.gram
        scores.append((kept.numpy().copy(), model.weights_.numpy().copy(), model.decision_function(x)))
    for other in scores[1:]:
        for a, b in zip(scores[0], other, strict=True):
            assert np.array_equal(a, b)


def test_state_and_refusals() -> None:
    x, y = _data()
    model = _fit(x, y, [[0, 1, 2], [3, 4, 5]], ridge=1.0)
    assert model.state_bytes() == 8 * (16 * 16 + 2 * 16 * 6)
    assert model.decision_function(x).shape == (len(x), 6)
    with pytest.raises(UserError, match="ridge"):
        Ridge.check_fits(10**7)
