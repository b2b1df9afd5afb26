"""Deep Streaming LDA (Hayes & Kanan, CVPR-W 2020): running class means and one shared covariance,
updated sample by sample (here in its exact batched form)."""

from __future__ import annotations

import numpy as np
import torch

from tosca_foundation.limits import require_memory
from tosca_heads.method import linalg
from tosca_heads.method.baseline_estimators import Array, as_labels, as_tensor, ridge_solve
from tosca_heads.method.baseline_registry import Interval, Options, Param
from tosca_heads.method.shrinkage import oas_coefficient
from tosca_heads.method.ties import top_class


def oas_shrunk(scatter: torch.Tensor, rows: int) -> tuple[torch.Tensor, float]:
    """sklearn's OAS(assume_centered=True) (version 1.9's formula) from the scatter R^T R of `rows`
    rows: S = R^T R / n, mu = tr(S)/p, alpha = mean(S^2), shrinkage = min((alpha + mu^2) /
    ((n + 1)(alpha - mu^2/p)), 1) (1 where the denominator is 0), (1 - s) S + s mu I."""
    emp = scatter / rows
    p = len(emp)
    mu = float(torch.trace(emp)) / p
    shrinkage = oas_coefficient(float((emp**2).mean()), mu, rows, p)
    shrunk = (1 - shrinkage) * emp
    shrunk.diagonal().add_(shrinkage * mu)
    return shrunk, shrinkage


class SLDA:
    """Streaming LDA: running class means and one shared covariance, updated sample by sample, scored by the shrunk inverse.

    Per sample (x, k) at count t (samples seen before): u = x - mu_k (mu_k as it stood, 0 for a
    class not yet seen), Sigma <- (t Sigma + t/(t+1) u u^T)/(t+1), then mu_k <- mu_k + (x - mu_k)
    /(c_k + 1). So Sigma_N = (N0 Sigma_N0 + sum_i t_i/(t_i+1) u_i u_i^T) / N: the normaliser is the
    number of samples seen N (not N - C), the weight t/(t+1) uses the global count t (not the
    class's count), and a class's first sample enters as its raw outer product x x^T. Here a task's
    rows are applied at once in that exact form (each u_i from its class's prefix mean; the same
    state as the loop, to rounding). Scores: Lambda = ((1 - eps) Sigma + eps I)^-1, eps = 1e-4,
    W = Lambda mu_k, b_k = -mu_k^T Lambda mu_k / 2, s = x W + b. As the authors' experiment, the
    first task is a base initialisation (`base_init`): its class means, and Sigma by sklearn's OAS
    (assume_centered) on the rows minus their class means, with N0 its rows. Hayes & Kanan,
    "Lifelong Machine Learning with Deep Streaming Linear Discriminant Analysis", CVPR-W 2020
    (arXiv 1909.01520); authors' code github:tyler-hayes/Deep_SLDA, SLDA_Model.py (StreamingLDA:
    fit, fit_base, predict) and experiment.py. State: C x d means, C counts and the d x d float64
    covariance; never samples."""

    paper = (  # the paper it follows, as `tosca list` and docs/baselines.md cite it
        "Hayes & Kanan, Lifelong Machine Learning with Deep Streaming Linear Discriminant "
        "Analysis, CVPR-W 2020, arXiv:1909.01520"
    )
    incremental = True
    deterministic = True
    runs_by_default = False
    # the authors' update is not (the weights t/(t+1), the raw x x^T of each class's first sample, the
    # base task's OAS); update="exact" is: the pooled within-class scatter / N, whatever the order
    order_free = True
    order_free_given = ("update",)
    label = "SLDA"
    params = (
        Param(
            "shrinkage",
            float,
            "SLDA's shrinkage eps of the covariance towards I (the paper's: 1e-4).",
            valid=Interval(0, 1, closed="right"),
            said="eps = {:g}",
        ),
        Param(
            "base_init",
            bool,
            "Initialise on the first task as the authors' experiment (class means, OAS covariance); "
            "false: stream from the first sample (the authors' update only).",
        ),
        Param(
            "update",
            str,
            "The covariance update: 'authors' (theirs, sample by sample, order-dependent) or 'exact' (the "
            "pooled within-class scatter over the N samples seen: the joint LDA's, whatever the order).",
            valid=Options(("authors", "exact")),
        ),
    )

    @staticmethod
    def check_fits(dim: int, classes: int = 0, **_: object) -> None:
        """The d x d float64 covariance, its scatter sum and its Cholesky factor must fit."""
        require_memory(
            f"SLDA on {dim:,} features",
            4 * 8 * dim * dim + 16 * dim * max(classes, 1),
            "use smaller features",
        )

    @staticmethod
    def work(shape: object, **_: object) -> tuple[float, str]:
        """A d x d scatter sum per task, one Cholesky solve per task for the scores, scoring."""
        train, test, dim = shape.train, shape.test, shape.dim  # type: ignore[attr-defined]
        per_class = shape.classes / max(len(train), 1)  # type: ignore[attr-defined]
        flops = 0.0
        for t, rows in enumerate(train):
            seen = per_class * (t + 1)
            seen_test = sum(test[: t + 1])
            flops += 2 * rows * dim * dim + 2 * dim**3 / 3 + 2 * dim * dim * seen + 2 * seen_test * dim * seen
        return flops, "float64"

    def __init__(
        self,
        shrinkage: float = 1e-4,
        base_init: bool = True,
        update: str = "authors",
        device: str | torch.device = "cpu",
    ):
        self.shrinkage = shrinkage
        self.base_init = base_init
        self.update = update
        self.device = device

    def partial_fit(self, features: Array, labels: Array) -> SLDA:
        labels = as_labels(labels)
        x = as_tensor(features, self.device, torch.float64)
        dim, classes = x.shape[1], int(labels.max()) + 1
        first = not hasattr(self, "means_")
        if first:
            self.means_ = torch.zeros(0, dim, dtype=torch.float64, device=x.device)
            self.counts_ = np.zeros(0, dtype=np.int64)
            self.covariance_ = torch.ones(dim, dim, dtype=torch.float64, device=x.device)  # the authors' init
            self.updates_ = 0
        if classes > len(self.counts_):
            grown = torch.zeros(classes, dim, dtype=torch.float64, device=x.device)
            grown[: len(self.means_)] = self.means_
            self.means_ = grown
            self.counts_ = np.concatenate(
                [self.counts_, np.zeros(classes - len(self.counts_), dtype=np.int64)]
            )
        with linalg.workers(device=x.device) as run:
            if self.update == "exact":
                self._pool(x, labels, run)
            elif first and self.base_init:
                self._fit_base(x, labels, run)
            else:
                self._stream(x, labels, run)
            self._solve(run)
        return self

    def _fit_base(self, x: torch.Tensor, labels: np.ndarray, run: linalg.Run) -> None:
        """The authors' fit_base: each class's mean and count, N0 = the rows, Sigma = OAS of the
        rows minus their class means."""
        for k in np.unique(labels):
            rows = torch.from_numpy(labels == k).to(x.device)
            self.means_[k] = x[rows].mean(0)
            self.counts_[k] = int(rows.sum())
        residual = x - self.means_[torch.from_numpy(labels).to(x.device)]
        scatter = torch.zeros(x.shape[1], x.shape[1], dtype=torch.float64, device=x.device)
        linalg.add_gram(scatter, linalg.tiled(residual), run)
        self.covariance_, self.base_shrinkage_ = oas_shrunk(scatter, len(x))
        self.updates_ = len(x)

    def _stream(self, x: torch.Tensor, labels: np.ndarray, run: linalg.Run) -> None:
        """The per-sample updates of these rows, in their order, at once: u_i = x_i minus its
        class's mean before it (stored mean and count c0, plus the class's earlier rows here),
        weight t_i/(t_i + 1) with t_i the global count before it."""
        residual = torch.empty_like(x)
        for k in np.unique(labels):
            where = np.flatnonzero(labels == k)
            rows = x[torch.from_numpy(where).to(x.device)]
            c0 = int(self.counts_[k])
            before = torch.cumsum(rows, 0) - rows + c0 * self.means_[k]  # sum of what came before each row
            seen = c0 + torch.arange(len(rows), dtype=torch.float64, device=x.device)
            mean_before = before / seen.clamp_min(1)[:, None]  # 0 before a class's first sample
            residual[torch.from_numpy(where).to(x.device)] = rows - mean_before
            self.means_[k] = (c0 * self.means_[k] + rows.sum(0)) / (c0 + len(rows))
            self.counts_[k] = c0 + len(rows)
        t = self.updates_ + torch.arange(len(x), dtype=torch.float64, device=x.device)
        weighted = residual * torch.sqrt(t / (t + 1))[:, None]
        scatter = torch.zeros(x.shape[1], x.shape[1], dtype=torch.float64, device=x.device)
        linalg.add_gram(scatter, linalg.tiled(weighted), run)
        n0 = self.updates_
        self.covariance_ = (n0 * self.covariance_ + scatter) / (n0 + len(x))
        self.updates_ = n0 + len(x)

    def _pool(self, x: torch.Tensor, labels: np.ndarray, run: linalg.Run) -> None:
        """`update="exact"`: Sigma = W / N, W the within-class scatter of every sample seen, each class's
        rows merged into its earlier ones exactly (their scatter about their own mean, plus
        c0 n / (c0 + n) (mu0 - m)(mu0 - m)^T): the same state in any order, equal to a one-shot fit."""
        residual = torch.empty_like(x)
        gaps = []
        for k in np.unique(labels):
            where = torch.from_numpy(np.flatnonzero(labels == k)).to(x.device)
            rows = x[where]
            c0, n = int(self.counts_[k]), len(rows)
            mean = rows.mean(0)
            residual[where] = rows - mean
            if c0:
                gaps.append((self.means_[k] - mean) * (c0 * n / (c0 + n)) ** 0.5)
            self.means_[k] = (c0 * self.means_[k] + rows.sum(0)) / (c0 + n)
            self.counts_[k] = c0 + n
        scatter = torch.zeros(x.shape[1], x.shape[1], dtype=torch.float64, device=x.device)
        linalg.add_gram(scatter, linalg.tiled(torch.cat([residual, *[g[None] for g in gaps]])), run)
        n0 = self.updates_
        previous = self.covariance_ * n0 if n0 else torch.zeros_like(scatter)
        self.covariance_ = (previous + scatter) / (n0 + len(x))
        self.updates_ = n0 + len(x)

    def _solve(self, run: linalg.Run) -> None:
        """W = ((1 - eps) Sigma + eps I)^-1 M^T and b = -diag(M W)/2 (the authors' pinverse: the
        matrix is positive definite, so its inverse)."""
        eps = self.shrinkage
        self.weights_ = ridge_solve((1 - eps) * self.covariance_, self.means_.T.contiguous(), eps, run)
        self.bias_ = -0.5 * (self.means_.T * self.weights_).sum(0)

    def decision_function(self, features: Array) -> np.ndarray:
        x = as_tensor(features, self.device, torch.float64)
        with linalg.single_threaded(x.device):
            scores = [(block @ self.weights_ + self.bias_).cpu().numpy() for block in linalg.row_blocks(x)]
        return np.concatenate(scores) if scores else np.zeros((0, len(self.means_)))

    def predict(self, features: Array) -> np.ndarray:
        return top_class(self.decision_function(features))  # a tie counts as wrong

    @staticmethod
    def parameters_for(features: int, classes: int, /, **_: object) -> int:
        """The C x d means and the d x d shared covariance (`num_parameters()`'s count, from what
        was asked)."""
        return classes * features + features * features

    def num_parameters(self) -> int:
        return int(self.means_.numel() + self.covariance_.numel())

    def state_bytes(self) -> int:
        return int(8 * (self.means_.numel() + self.covariance_.numel()) + self.counts_.nbytes)
