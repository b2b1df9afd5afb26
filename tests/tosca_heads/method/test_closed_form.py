"""The ridge system in its smaller form, its factorisations, the authors' ridge rule, and a long
solve that answers SIGINT and SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from support import ROOT

from tosca_heads.method import closed_form, linalg
from tosca_heads.method.baseline_estimators import RanPAC


def _rows(n: int, m: int, classes: int = 3, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    h = torch.relu(torch.randn(n, m, generator=gen, dtype=torch.float64) + 0.2)
    y = F.one_hot(torch.randint(0, classes, (n,), generator=gen), classes).double()
    return h, y


def _direct(h: torch.Tensor, y: torch.Tensor, ridge: float) -> torch.Tensor:
    return torch.linalg.solve(h.T @ h + ridge * torch.eye(h.shape[1], dtype=h.dtype), h.T @ y)


@pytest.mark.parametrize("rows", [599, 600, 601, 1300])  # M = 600 (two tiles): both sides of n = M
@pytest.mark.parametrize("ridge", [1e-3, 10.0])
def test_ridge_system_gives_the_joint_ridge_solution_on_both_sides_of_n_equal_m(
    rows: int, ridge: float
) -> None:
    h, y = _rows(rows, 600)
    system = closed_form.RidgeSystem(600)
    with linalg.workers(2) as run:
        for part in np.array_split(np.arange(rows), 3):  # three tasks, the targets' columns growing
            system.add(h[part], y[part][:, : 1 + int(y[part].argmax(1).max())], run)
        weights = system.solve(ridge, run)
    assert system.form == ("rows" if rows < 600 else "gram")
    torch.testing.assert_close(weights, _direct(h, y, ridge), rtol=1e-7, atol=1e-9)
    assert system.nbytes() == 8 * (rows * 603 if rows < 600 else 600 * 603)


@pytest.mark.parametrize("rows", [599, 600, 601, 1300])  # M = 600: both sides of n = M
@pytest.mark.parametrize("shift", [1e-6, 0.5])
def test_solve_for_any_right_hand_side_on_both_sides_of_n_equal_m(rows: int, shift: float) -> None:
    """(H'H + shift I) X = B for class means B (KLDA's, RanDumb's): Woodbury's n x n system while
    n < M, the M x M system after; the direct solution either way, to rounding."""
    h, _ = _rows(rows, 600)
    h = h / h.norm(dim=1, keepdim=True)  # rows of norm 1, as random Fourier features
    rhs = torch.randn(600, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    system = closed_form.RidgeSystem(600)
    with linalg.workers(2) as run:
        for part in np.array_split(np.arange(rows), 3):
            system.add(h[part], h.new_zeros(len(part), 0), run)
        found = system.solve_for(rhs, shift, run)
    assert system.form == ("rows" if rows < 600 else "gram")
    expected = torch.linalg.solve(h.T @ h + shift * torch.eye(600, dtype=torch.float64), rhs)
    torch.testing.assert_close(found, expected, rtol=1e-6, atol=1e-7 * float(expected.abs().max()))


def test_with_no_shift_a_singular_system_gets_the_minimum_norm_answer() -> None:
    """No shift and fewer rows than M: H'H is singular, no factorisation solves it; the rows are
    folded and the pseudo-inverse answers, as numpy's pinv."""
    h, _ = _rows(50, 200)
    rhs = torch.randn(200, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    system = closed_form.RidgeSystem(200)
    with linalg.workers(2) as run:
        system.add(h, h.new_zeros(50, 0), run)
        found = system.solve_for(rhs, 0.0, run)
    assert system.form == "gram"
    expected = np.linalg.pinv((h.T @ h).numpy(), hermitian=True) @ rhs.numpy()
    np.testing.assert_allclose(found.numpy(), expected, rtol=1e-6, atol=1e-8 * np.abs(expected).max())


def test_the_rows_form_is_the_same_bits_on_one_two_and_three_threads() -> None:
    h, y = _rows(700, 1100)
    rhs = torch.randn(1100, 3, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    found = []
    for threads in (1, 2, 3):
        system = closed_form.RidgeSystem(1100)
        with linalg.workers(threads) as run:
            system.add(h, y, run)
            found.append(
                (
                    system.solve(0.5, run),
                    system.solve_for(rhs, 1e-6, run),
                    *system.path_scores(h[:9], (1e-3, 1.0), run).values(),
                )
            )
    for other in found[1:]:
        assert all(torch.equal(a, b) for a, b in zip(found[0], other, strict=True))


def test_a_failed_cholesky_falls_back_to_lu_never_to_an_eigendecomposition(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h, _ = _rows(40, 700)
    matrix = h.T @ h - 2e-3 * torch.eye(700, dtype=torch.float64)  # not positive definite with 1e-3
    rhs = torch.ones(700, 2, dtype=torch.float64)
    with linalg.workers(2) as run:
        assert linalg.cholesky(matrix, 1e-3, run) is None
        monkeypatch.setattr(torch.linalg, "eigh", lambda *_: pytest.fail("eigh called"))
        found = closed_form.shifted_solve(matrix, rhs, 1e-3, run)
    shifted = matrix + 1e-3 * torch.eye(700, dtype=torch.float64)
    torch.testing.assert_close(shifted @ found, rhs, rtol=1e-6, atol=1e-6)


def _authors_literal(h: torch.Tensor, y: torch.Tensor, seed: int) -> tuple[float, list[float]]:
    """RanPAC.py `optimise_ridge_parameter` line by line (float32), on the same shuffle."""
    order = torch.randperm(len(h), generator=torch.Generator().manual_seed(seed))
    features, targets = h[order].float(), y[order].float()
    ridges = 10.0 ** np.arange(-8, 9)
    n_fit = int(features.shape[0] * 0.8)
    q_val = features[:n_fit].T @ targets[:n_fit]
    g_val = features[:n_fit].T @ features[:n_fit]
    losses = []
    for ridge in ridges:
        wo = torch.linalg.solve(g_val + ridge * torch.eye(g_val.size(dim=0)), q_val).T
        losses.append(float(F.mse_loss(features[n_fit:] @ wo.T, targets[n_fit:])))
    return float(ridges[np.argmin(np.array(losses))]), losses


@pytest.mark.parametrize(("rows", "width"), [(150, 400), (500, 120)])  # the dual path, the primal path
def test_the_authors_ridge_rule_as_their_code_chooses_it(rows: int, width: int) -> None:
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(rows, 16, generator=gen) + torch.randint(0, 3, (rows, 1), generator=gen).float()
    labels = x[:, 0].round().clamp(0, 2).long()
    h = torch.relu(x @ torch.randn(16, width, generator=gen)).double()
    y = F.one_hot(labels, 3).double()
    with linalg.workers(2) as run:
        chosen, losses, floor = closed_form.authors_ridge(h, y, 5, run)
    theirs, their_losses = _authors_literal(h, y, 5)
    assert chosen == theirs and list(losses) == list(closed_form.AUTHORS_RIDGES)
    for ridge, their_loss in zip(closed_form.AUTHORS_RIDGES, their_losses, strict=True):
        if ridge > 1e3 * floor:  # where float32 keeps the ridge, their loss is the exact one
            assert losses[ridge] == pytest.approx(their_loss, rel=1e-3)


def test_ranpac_chooses_its_ridge_again_at_every_task_on_that_tasks_rows() -> None:
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(6), 40)
    x = (rng.normal(size=(240, 12)) + labels[:, None] * rng.uniform(0, 0.4, size=12)).astype(np.float32)
    model = RanPAC(projection_dim=300, seed=1)
    for task in range(3):
        rows = labels // 2 == task
        model.partial_fit(x[rows], labels[rows])
        h = model.project(x[rows])
        y = F.one_hot(torch.from_numpy(labels[rows]), 2 * task + 2).double()
        with linalg.workers(1) as run:
            expected = closed_form.authors_ridge(h, y, 1 + task, run)[0]
        assert model.ridges_[task] == expected == model.ridge_
    # the line under a table names every task's ridge, not the last alone as if it held for all
    assert model.tuned_by_.endswith("the last task's, of " + ", ".join(f"{r:g}" for r in model.ridges_))
    assert model.system_.form == "rows" and model.state_bytes() == 240 * (300 + 6) * 8
    with linalg.workers(1) as run:
        joint = model.system_.solve(model.ridge_, run)
    assert torch.equal(joint, model.weights_)


LONG_SOLVE = """
import signal, sys, time, torch
from tosca_foundation import long_work
from tosca_heads.method import linalg
class Terminated(Exception): pass
def raise_terminated(*_): raise Terminated
signal.signal(signal.SIGTERM, raise_terminated)
a = torch.rand(5000, 5000, dtype=torch.float64)
b = torch.rand(5000, 1, dtype=torch.float64)
print("solving", flush=True)
try:
    for _ in range(200):
        linalg.interruptible(lambda: torch.linalg.solve(a, b), "a long solve")
except KeyboardInterrupt:  # ended as the command line ends: past the abandoned call's thread
    long_work.leave(130)
except Terminated:
    long_work.leave(143)
sys.exit(0)
"""


@pytest.mark.slow
@pytest.mark.parametrize(("sent", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_long_lapack_call_stops_within_seconds_on_sigint_and_sigterm(
    sent: signal.Signals, code: int
) -> None:
    child = subprocess.Popen([sys.executable, "-c", LONG_SOLVE], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "solving"
    time.sleep(1.0)  # inside a solve (200 of them take minutes)
    child.send_signal(sent)
    start = time.monotonic()
    assert child.wait(timeout=20) == code
    assert time.monotonic() - start < 5


def test_ranpacs_memory_check_counts_the_smaller_form(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []
    monkeypatch.setattr(
        "tosca_heads.method.baseline_estimators.require_memory", lambda what, need, advice: asked.append(need)
    )
    RanPAC.check_fits(1280, projection_dim=10_000, rows=400)  # a few hundred rows: the n x n form
    RanPAC.check_fits(1280, projection_dim=10_000)  # rows not known: the M x M form
    RanPAC.check_fits(1280, projection_dim=10_000, rows=50_000)  # more rows than M: the M x M form
    rows_form = 2 * 8 * 400 * 10_000 + 3 * 8 * 400**2 + 4 * 10_000 * 1280
    gram_form = 3 * 8 * 10_000**2 + 4 * 10_000 * 1280
    assert asked == [rows_form, gram_form, gram_form]
