"""Closed-form ridge regression in the cheaper of its two forms, the same answer either way.

With n rows H (n x M) and targets Y, the ridge solution has two exact forms:

    W = (H'H + l I_M)^-1 H'Y   (primal: an M x M system)
      = H' (HH' + l I_n)^-1 Y   (dual: an n x n system).

While fewer rows than columns have been seen, `RidgeSystem` keeps the rows themselves and solves
the n x n system (RanPAC at M = 10,000 on a few hundred rows: a few hundred squared, not 10^8
entries); once the rows reach M it folds them into the M x M Gram matrix and keeps that (and
stops keeping rows). Either way the factorisation is a Cholesky (`linalg`'s tiled one on a CPU:
the same bits on any thread count), and where it fails in floating point (a ridge that drowns
in the rounding of a singular Gram matrix) an LU solve of the same system, never an
eigendecomposition: the LU is the same solution where both exist, and about ten times cheaper.
The long single-threaded LAPACK calls run through `linalg.interruptible`, so SIGINT and SIGTERM
stop them within a second.

`authors_ridge` is RanPAC's rule for choosing the ridge (McDonnell et al., NeurIPS 2023; github
RanPAC/RanPAC, RanPAC.py `optimise_ridge_parameter`), on one task's rows as their code calls it.
"""

from __future__ import annotations

import math

import torch

from tosca_foundation import long_work
from tosca_heads.method import linalg

AUTHORS_RIDGES = tuple(10.0**k for k in range(-8, 9))  # RanPAC.py: 10.0 ** np.arange(-8, 9)
AUTHORS_FIT_SHARE = 0.8  # RanPAC.py: int(n * 0.8) rows fit, the rest scored
FLOAT32_FLOOR = 2 * torch.finfo(torch.float32).eps  # relative to the Gram's largest eigenvalue


class RidgeSystem:
    """The joint ridge system over every row added, in the smaller form (module docstring).

    `add` takes rows of H (float64) and their targets (n x C, C may grow); `solve(ridge)` gives the
    M x C weights. `form` says which is kept: "rows" (H and Y, n < M) or "gram" (G = H'H and
    Q = H'Y, M x M and M x C)."""

    def __init__(self, width: int, device: torch.device | str = "cpu"):
        self.width = width
        self.device = torch.device(device)
        self.rows: torch.Tensor | None = torch.zeros(0, width, dtype=torch.float64, device=self.device)
        self.targets = torch.zeros(0, 0, dtype=torch.float64, device=self.device)
        self.gram: torch.Tensor | None = None
        self.cross: torch.Tensor | None = None

    @property
    def form(self) -> str:
        return "rows" if self.rows is not None else "gram"

    @property
    def classes(self) -> int:
        return (self.targets if self.cross is None else self.cross).shape[1]

    def add(self, h: torch.Tensor, y: torch.Tensor, run: linalg.Run) -> None:
        """Take rows h (n x M) and their targets y (n x C'); the targets of rows already kept are
        padded with zero columns to the larger class count."""
        classes = max(self.classes, y.shape[1])
        y = torch.nn.functional.pad(y, (0, classes - y.shape[1]))
        if self.rows is not None:
            self.rows = torch.cat([self.rows, h])
            self.targets = torch.cat(
                [torch.nn.functional.pad(self.targets, (0, classes - self.targets.shape[1])), y]
            )
            if len(self.rows) >= self.width:
                self._fold(run)
            return
        assert self.gram is not None and self.cross is not None
        self.cross = torch.nn.functional.pad(self.cross, (0, classes - self.cross.shape[1]))
        with long_work.during(f"adding {len(h):,} rows to the {self.width:,} x {self.width:,} Gram matrix"):
            blocks = [linalg.column_tiles(block) for block in linalg.row_blocks(h)]
            linalg.add_gram(self.gram, blocks, run)
            linalg.add_cross(self.cross, blocks, linalg.row_blocks(y), run)

    def _fold(self, run: linalg.Run) -> None:
        """From rows to the Gram form: G = H'H, Q = H'Y; the rows are dropped."""
        assert self.rows is not None
        with long_work.during(f"the {self.width:,} x {self.width:,} Gram matrix of {len(self.rows):,} rows"):
            self._fold_rows(run)

    def _fold_rows(self, run: linalg.Run) -> None:
        assert self.rows is not None
        self.gram = torch.zeros(self.width, self.width, dtype=torch.float64, device=self.device)
        self.cross = torch.zeros(self.width, self.targets.shape[1], dtype=torch.float64, device=self.device)
        blocks = linalg.tiled(self.rows)
        linalg.add_gram(self.gram, blocks, run)
        linalg.add_cross(self.cross, blocks, linalg.row_blocks(self.targets), run)
        self.rows, self.targets = None, torch.zeros(0, 0, dtype=torch.float64, device=self.device)

    def solve(self, ridge: float, run: linalg.Run) -> torch.Tensor:
        """W (M x C) with (H'H + ridge I) W = H'Y, by the form kept."""
        if self.rows is None:
            assert self.gram is not None and self.cross is not None
            return shifted_solve(self.gram, self.cross, ridge, run)
        kernel = row_gram(self.rows, run)
        coefficients = shifted_solve(kernel, self.targets, ridge, run)
        weights = torch.zeros(self.width, coefficients.shape[1], dtype=torch.float64, device=self.device)
        linalg.add_cross(weights, linalg.tiled(self.rows), linalg.row_blocks(coefficients), run)
        return weights

    def solve_for(self, rhs: torch.Tensor, shift: float, run: linalg.Run) -> torch.Tensor:
        """X (M x k) with (H'H + shift I) X = rhs for any right-hand side (KLDA's and RanDumb's class
        means), by the form kept. Rows form, shift > 0: X = (rhs - H'(HH' + shift I)^-1 H rhs) / shift
        (Woodbury's identity: the n x n system). Gram form: `shifted_solve`. With no shift the
        matrix H'H is singular while n < M, and no factorisation solves it: the rows are folded
        into the Gram form and `pseudo_solve` gives the minimum-norm answer."""
        if self.rows is not None and shift <= 0:
            self._fold(run)
        if self.rows is None:
            assert self.gram is not None
            if shift > 0:
                return shifted_solve(self.gram, rhs, shift, run)
            return pseudo_solve(self.gram, rhs, run)
        projected = cross_rows(self.rows, rhs.T.contiguous(), run)  # H rhs, n x k
        coefficients = shifted_solve(row_gram(self.rows, run), projected, shift, run)
        back = torch.zeros_like(rhs)
        linalg.add_cross(back, linalg.tiled(self.rows), linalg.row_blocks(coefficients), run)  # H' (...)
        return (rhs - back) / shift

    def path_scores(
        self, x: torch.Tensor, ridges: tuple[float, ...], run: linalg.Run
    ) -> dict[float, torch.Tensor]:
        """Scores x W(l) (rows x C) for every ridge l of `ridges`, from one eigendecomposition of the
        kept form's matrix (a path: one decomposition for many ridges, not a fallback for one solve):
        the n x n kernel K = H H' = U diag(e) U' in the rows form, x W(l) = (x H') U diag(1/(e + l))
        U' Y; the M x M Gram G = V diag(e) V' in the Gram form, x W(l) = (x V) diag(1/(e + l)) V' Q.
        On one thread, interruptible (`linalg.interruptible`)."""
        if self.rows is not None:
            evals, evecs = linalg.interruptible(
                lambda: _eigh(row_gram(self.rows, run)),
                f"a ridge path ({len(self.rows):,} x {len(self.rows):,})",
            )
            scored, projected = cross_rows(x, self.rows, run) @ evecs, evecs.T @ self.targets
        else:
            assert self.gram is not None and self.cross is not None
            gram = self.gram
            evals, evecs = linalg.interruptible(
                lambda: _eigh(gram), f"a ridge path ({len(gram):,} x {len(gram):,})"
            )
            scored, projected = x @ evecs, evecs.T @ self.cross
        evals = evals.clamp_min(0)
        with linalg.single_threaded(x.device):
            return {ridge: scored @ (projected / (evals + ridge)[:, None]) for ridge in ridges}

    def nbytes(self) -> int:
        """What it carries from task to task: the rows and targets, or G and Q (float64)."""
        kept = (self.rows, self.targets) if self.rows is not None else (self.gram, self.cross)
        return int(sum(t.numel() * 8 for t in kept if t is not None))


def row_gram(rows: torch.Tensor, run: linalg.Run) -> torch.Tensor:
    """K = H H' (n x n), tiled as `linalg.add_gram` over H' (the same bits on any thread count)."""
    kernel = torch.zeros(len(rows), len(rows), dtype=rows.dtype, device=rows.device)
    linalg.add_gram(kernel, linalg.tiled(rows.T), run)
    return kernel


def cross_rows(left: torch.Tensor, right: torch.Tensor, run: linalg.Run) -> torch.Tensor:
    """left right' (rows of `left` against rows of `right`), tiled over the shared width."""
    out = torch.zeros(len(right), len(left), dtype=left.dtype, device=left.device)
    linalg.add_cross(out, linalg.tiled(right.T), linalg.row_blocks(left.T), run)
    return out.T.contiguous()


def shifted_solve(matrix: torch.Tensor, rhs: torch.Tensor, shift: float, run: linalg.Run) -> torch.Tensor:
    """X with (matrix + shift I) X = rhs for a symmetric positive semi-definite `matrix`: Cholesky
    (tiled on a CPU), else, where that fails in floating point, LU with partial pivoting of the
    same system (one LAPACK call on one thread, interruptible). Said in the progress line while
    it lasts (`tosca_foundation.long_work`)."""
    with long_work.during(f"a {len(matrix):,} x {len(matrix):,} ridge solve"):
        return _shifted_solve(matrix, rhs, shift, run)


def _shifted_solve(matrix: torch.Tensor, rhs: torch.Tensor, shift: float, run: linalg.Run) -> torch.Tensor:
    if matrix.device.type != "cpu":
        shifted = matrix + shift * torch.eye(len(matrix), dtype=matrix.dtype, device=matrix.device)
        factor, info = torch.linalg.cholesky_ex(shifted)
        if int(info) == 0:
            return torch.cholesky_solve(rhs, factor)
        return torch.linalg.solve(shifted, rhs)
    tiles = linalg.cholesky(matrix, shift, run)
    if tiles is not None:
        return linalg.cholesky_solve(tiles, rhs, run)
    shifted = matrix + shift * torch.eye(len(matrix), dtype=matrix.dtype)
    return linalg.interruptible(lambda: torch.linalg.solve(shifted, rhs), "an LU solve of a ridge system")


def pseudo_solve(matrix: torch.Tensor, rhs: torch.Tensor, run: linalg.Run) -> torch.Tensor:
    """X = matrix^+ rhs for a symmetric positive semi-definite `matrix` with no shift: its Cholesky
    where it is positive definite in floating point, else the pseudo-inverse (eigenvalues below
    D * eps * the largest dropped, as numpy's and torch's pinv): a singular matrix has no
    factorisation that solves it, so this, and only this, eigendecomposes (one thread,
    interruptible)."""
    with long_work.during(f"a {len(matrix):,} x {len(matrix):,} solve with no ridge"):
        return _pseudo_solve(matrix, rhs, run)


def _pseudo_solve(matrix: torch.Tensor, rhs: torch.Tensor, run: linalg.Run) -> torch.Tensor:
    if matrix.device.type != "cpu":
        factor, info = torch.linalg.cholesky_ex(matrix)
        if int(info) == 0:
            return torch.cholesky_solve(rhs, factor)
    else:
        tiles = linalg.cholesky(matrix, 0.0, run)
        if tiles is not None:
            return linalg.cholesky_solve(tiles, rhs, run)
    evals, evecs = linalg.interruptible(lambda: _eigh(matrix), "the pseudo-inverse of a singular matrix")
    keep = evals > len(matrix) * torch.finfo(matrix.dtype).eps * evals.abs().max()
    inverse = torch.where(keep, 1.0 / torch.where(keep, evals, torch.ones_like(evals)), 0.0)
    with linalg.single_threaded(matrix.device):
        return evecs @ (inverse[:, None] * (evecs.T @ rhs))


def authors_ridge(
    h: torch.Tensor,
    y: torch.Tensor,
    seed: int,
    run: linalg.Run,
    ridges: tuple[float, ...] = AUTHORS_RIDGES,
) -> tuple[float, dict[float, float], float]:
    """RanPAC's ridge on one task's rows h (n x M) and one-hot targets y, as RanPAC.py chooses it:
    their loader is shuffled, so a seeded shuffle of the rows; the first int(0.8 n) fit, the rest
    scored; the ridge of `ridges` (theirs 1e-8 .. 1e8) whose fit has the least mean squared error
    on the scored rows, the first (smallest) of equal ones (np.argmin).

    Their solve is float32 (`torch.linalg.solve` on the float32 Gram of the fit rows): a ridge
    below float32's rounding of that Gram is lost in it, and their loss for it is that of the
    rounding, not of the ridge. Here the path is exact (float64, one eigendecomposition of the
    smaller Gram), and each ridge acts as max(ridge, FLOAT32_FLOOR x the Gram's largest
    eigenvalue): the ridge their float32 solve effectively applies (docs/method.md gives the
    measured agreement). Returns the ridge, each ridge's loss, and the floor."""
    order = torch.randperm(len(h), generator=torch.Generator().manual_seed(seed)).to(h.device)
    n_fit = int(len(h) * AUTHORS_FIT_SHARE)
    if n_fit == 0 or n_fit == len(h):
        return ridges[0], {}, 0.0  # nothing to score on (their F.mse_loss of nothing is NaN: argmin 0)
    fit, held = h[order[:n_fit]], h[order[n_fit:]]
    y_fit, y_held = y[order[:n_fit]], y[order[n_fit:]]
    if n_fit < h.shape[1]:  # dual: predictions K_hf U diag(1/(e + l)) U' Y_f
        evals, evecs = linalg.interruptible(
            lambda: _eigh(row_gram(fit, run)),
            f"the eigendecomposition of RanPAC's ridge path ({n_fit:,} x {n_fit:,})",
        )
        scored, projected = cross_rows(held, fit, run) @ evecs, evecs.T @ y_fit
    else:  # primal: predictions H_h V diag(1/(e + l)) V' H_f'Y_f
        gram = torch.zeros(h.shape[1], h.shape[1], dtype=h.dtype, device=h.device)
        linalg.add_gram(gram, linalg.tiled(fit), run)
        evals, evecs = linalg.interruptible(
            lambda: _eigh(gram),
            f"the eigendecomposition of RanPAC's ridge path ({len(gram):,} x {len(gram):,})",
        )
        scored, projected = held @ evecs, evecs.T @ (fit.T @ y_fit)
    evals = evals.clamp_min(0)
    floor = FLOAT32_FLOOR * float(evals.max())
    losses = {}
    with linalg.single_threaded(h.device):
        for ridge in ridges:
            predicted = scored @ (projected / (evals + max(ridge, floor))[:, None])
            losses[ridge] = float(((predicted - y_held) ** 2).mean())
    best = min(ridges, key=lambda r: (_nan_last(losses[r]), ridges.index(r)))
    return best, losses, floor


def _eigh(matrix: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    with linalg.single_threaded(matrix.device):
        return torch.linalg.eigh(matrix)


def _nan_last(loss: float) -> float:
    return math.inf if math.isnan(loss) else loss
