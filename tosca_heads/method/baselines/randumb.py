"""RanDumb: RBF random Fourier features, then LDA with OAS-shrunk class covariances (Prabhu et al. 2024)."""

from __future__ import annotations

import copy

import numpy as np
import torch

from tosca_foundation.limits import require_memory
from tosca_heads.method import linalg
from tosca_heads.method.baseline_estimators import Array, as_labels
from tosca_heads.method.baseline_registry import Interval, Param
from tosca_heads.method.baselines import random_fourier as rff
from tosca_heads.method.closed_form import RidgeSystem
from tosca_heads.method.scale import scaled_variance
from tosca_heads.method.shrinkage import oas_coefficient
from tosca_heads.method.ties import top_class


def oas_shrinkage(centred: torch.Tensor) -> tuple[float, float]:
    """scikit-learn's OAS shrinkage of one class's rows (centred on their mean) and mu, the mean of
    the empirical covariance's diagonal: with S = X'X / n, alpha = mean(S**2), mu = trace(S) / p,
    shrinkage = min((alpha + mu^2) / ((n + 1)(alpha - mu^2 / p)), 1) (1 where the denominator is
    0). ||X'X||_F = ||XX'||_F: the smaller Gram is formed."""
    n, p = centred.shape
    gram = centred @ centred.T if n <= p else centred.T @ centred
    alpha = float((gram**2).sum()) / (n * n * p * p)
    mu = float(centred.pow(2).sum()) / (n * p)
    return oas_coefficient(alpha, mu, n, p), mu


class RanDumb:
    """RanDumb: RBF random Fourier features, then streaming LDA with OAS-shrunk class covariances.

    Prabhu, Sinha, Kumaraguru, Torr, Sener & Dokania, "RanDumb: A Simple Approach that Questions
    the Efficacy of Continual Representation Learning", arXiv:2402.08823, 2024; the authors' code
    (github:drimpossible/RanDumb, src/main.py) followed: scikit-learn's
    RBFSampler(gamma='scale', n_components=D) then
    LinearDiscriminantAnalysis(solver='lsqr', covariance_estimator=OAS()). Here:
    phi(x) = sqrt(2/D) cos(x W + b), W = sqrt(2 gamma) N(0, 1), b ~ U[0, 2 pi), drawn as
    RBFSampler(random_state=seed) draws them, gamma = 1 / (d var(X)) over every entry of the FIRST
    task's training features (theirs: of all training data at once; the one order-dependent
    piece); D = 0 runs LDA on the features themselves (the authors' runs on pretrained ViT
    features). The shared covariance is scikit-learn's sum_c (n_c / N) OAS_c, each class's
    covariance shrunk on its own, OAS_c = (1 - s_c) S_c / n_c + s_c mu_c I; the score of class c
    is phi' Sigma^-1 m_c - m_c' Sigma^-1 m_c / 2 + log(n_c / N) (the priors of the classes seen).

    A = sum_c n_c OAS_c = H'H + l I, H the rows of every class centred on their class mean and
    scaled by sqrt(1 - s_c), l = sum_c n_c s_c mu_c: it is kept as a `closed_form.RidgeSystem` in
    the smaller of its two forms (the scaled rows while fewer than D have been seen, A^-1 M' then
    solved through the n x n system by Woodbury's identity; else the D x D sum H'H), the same
    answer to rounding.

    State: the scaled rows (n x D float64) while n < D, else H'H (D x D float64: 800 MB at D =
    10,000), l, the C x D float64 means and counts, and Sigma^-1 M' (D x C), refreshed after each
    task; never samples."""

    paper = (  # the paper it follows, as `tosca list` and docs/baselines.md cite it
        "Prabhu, Sinha, Kumaraguru, Torr, Sener & Dokania, RanDumb: A Simple Approach that "
        "Questions the Efficacy of Continual Representation Learning, arXiv:2402.08823, 2024"
    )
    incremental = True
    deterministic = False
    runs_by_default = False
    order_free = True  # given gamma, which is the first task's unless given
    order_free_given = ("gamma",)  # what a test of its order-freedom fixes
    label = "RanDumb"
    params = (
        Param(
            "dim",
            int,
            "RanDumb's random Fourier feature dimension D (its code's default 10,000; its paper's largest "
            "25,000; 0: no embedding, LDA on the features, as its runs on pretrained ViT features).",
            valid=Interval(0, None),
            said="D = {:,}",
        ),
        Param(
            "seed",
            int,
            "Seed of RanDumb's random features.",
            valid=Interval(0, 2**32, closed="left"),
            seed=True,
        ),
    )

    @staticmethod
    def check_fits(features: int, /, classes: int = 0, dim: int = 10_000, **_: object) -> None:
        """The D x D float64 covariance sum and its tiled Cholesky factor, W (d x D) and the means."""
        width = dim or features
        need = 2 * 8 * width * width + 8 * features * width + 2 * 8 * max(classes, 1) * width
        require_memory(f"RanDumb with D = {width:,}", need, "lower --randumb-dim")

    @staticmethod
    def work(shape: object, dim: int = 10_000, **_: object) -> tuple[float, str]:
        """Per task: the features of its rows and of every seen test row, each class's Gram for
        its OAS shrinkage, the covariance's Gram sum, its Cholesky factor, the solve; scoring."""
        train, test, d = shape.train, shape.test, shape.dim  # type: ignore[attr-defined]
        per_class = shape.classes / max(len(train), 1)  # type: ignore[attr-defined]
        width, flops = dim or d, 0.0
        for t, rows in enumerate(train):
            seen_test, seen = sum(test[: t + 1]), per_class * (t + 1)
            flops += 2 * rows * d * width * bool(dim) + 2 * rows * (rows / per_class) * width
            flops += rows * width * width + width**3 / 3 + 2 * width * width * seen
            flops += 2 * seen_test * d * width * bool(dim) + 2 * seen_test * width * seen
        return flops, "float64"

    def __init__(
        self, dim: int = 10_000, seed: int = 0, gamma: float | None = None, device: str | torch.device = "cpu"
    ):
        self.dim = dim
        self.seed = seed
        self.gamma = gamma  # None: 'scale' on the first task's features (the Python API may fix it)
        self.device = device

    def _draw(self, features: Array) -> None:
        x = features.detach().cpu().numpy() if isinstance(features, torch.Tensor) else np.asarray(features)
        d = x.shape[1]
        if self.dim:
            # as RBFSampler's gamma='scale': every entry, in the features' precision, but over a
            # power of two first (`scale`): x1e30's squares overflowed float32, x1e-30's underflowed
            variance, peak = scaled_variance(x)
            scale = float(1.0 / (d * variance)) / (peak * peak) if variance != 0 else 1.0
            self.gamma_ = scale if self.gamma is None else float(self.gamma)
            draws = np.random.RandomState(self.seed)  # RBFSampler(random_state=seed)'s draws, in its order
            weights = np.sqrt(2.0 * self.gamma_) * draws.normal(size=(d, self.dim))
            offsets = draws.uniform(0, 2 * np.pi, size=self.dim)
            self.weights_ = torch.from_numpy(weights.astype(np.float32)).to(self.device)
            self.offsets_ = torch.from_numpy(offsets.astype(np.float32)).to(self.device)
        width = self.dim or d
        device = torch.device(self.device)
        self.covariance_sum_ = RidgeSystem(width, device)  # H'H of the scaled centred rows
        self.shift_ = 0.0  # l = sum_c n_c s_c mu_c, A = H'H + l I
        self.means_ = torch.zeros(0, width, dtype=torch.float64, device=device)
        self.counts_ = np.zeros(0, dtype=np.int64)
        self.shrinkages_ = np.zeros(0)

    def embed(self, features: Array, run: linalg.Run) -> torch.Tensor:
        if not self.dim:
            x = features if isinstance(features, torch.Tensor) else torch.from_numpy(np.asarray(features))
            return x.to(self.device, torch.float64)
        return rff.cosine_features(features, self.weights_, self.offsets_, run, self.device)

    def partial_fit(self, features: Array, labels: Array) -> RanDumb:
        labels = as_labels(labels)
        if not hasattr(self, "counts_"):
            self._draw(features)
        classes, counts = np.unique(labels, return_counts=True)
        if np.isin(classes, np.flatnonzero(self.counts_)).any():
            raise ValueError("RanDumb learns each class in one task: a class came back")
        n_classes = max(len(self.counts_), int(classes.max()) + 1)
        self.counts_ = np.pad(self.counts_, (0, n_classes - len(self.counts_)))
        self.shrinkages_ = np.pad(self.shrinkages_, (0, n_classes - len(self.shrinkages_)))
        self.counts_[classes] = counts
        with linalg.workers(device=self.device) as run:
            h = self.embed(features, run)
            _, _, means = rff.class_means(h, labels)
            grown = torch.zeros(n_classes, h.shape[1], dtype=torch.float64, device=h.device)
            grown[: len(self.means_)] = self.means_
            grown[torch.from_numpy(classes).to(h.device)] = means
            self.means_ = grown
            centred = rff.centred(h, labels, classes, means)
            index = [torch.from_numpy(labels == c).to(h.device) for c in classes]
            found = run(lambda rows: oas_shrinkage(centred[rows]), index)  # one class per worker
            self.shrinkages_[classes] = [s for s, _ in found]
            keep = torch.from_numpy(np.sqrt(1.0 - self.shrinkages_[classes])).to(h.device)
            scaled = centred * keep[torch.from_numpy(np.searchsorted(classes, labels)).to(h.device)][:, None]
            self.covariance_sum_.add(scaled, scaled.new_zeros(len(scaled), 0), run)  # sum_c (1 - s_c) X_c'X_c
            self.shift_ += sum(float(n) * s * mu for n, (s, mu) in zip(counts, found, strict=True))
            total = int(self.counts_.sum())
            # Sigma = A / N: Sigma^-1 M' = N A^-1 M', A = H'H + sum_c n_c s_c mu_c I
            self.coef_ = total * self.covariance_sum_.solve_for(self.means_.T.contiguous(), self.shift_, run)
            seen = self.counts_ > 0
            priors = np.log(np.where(seen, self.counts_, 1) / total)
            intercept = -0.5 * (self.means_ * self.coef_.T).sum(1).cpu().numpy() + priors
            self.intercept_ = np.where(seen, intercept, -np.inf)
        return self

    def decision_function(self, features: Array) -> np.ndarray:
        """[n, C] LDA scores phi' Sigma^-1 m_c - m_c' Sigma^-1 m_c / 2 + log prior_c (scikit-learn's)."""
        with linalg.workers(device=self.device) as run:
            h = self.embed(features, run)
            return (h @ self.coef_).cpu().numpy() + self.intercept_

    def predict(self, features: Array) -> np.ndarray:
        return top_class(self.decision_function(features))  # a tie counts as wrong

    def frozen_copy(self) -> RanDumb:
        """Itself for scoring, as it is now, without the D x D covariance sum (which the next task
        adds to in place) or the means: what the `randumb` router keeps after each task, sharing
        the random features and Sigma^-1 M', which a later task replaces, never writes into."""
        kept = copy.copy(self)
        kept.__dict__.pop("covariance_sum_", None)
        kept.__dict__.pop("means_", None)
        return kept

    @staticmethod
    def parameters_for(features: int, classes: int, /, dim: int = 10_000, **_: object) -> int:
        """The C x D means and the D x D covariance, D the random features' width or, with `dim`
        0, the store's d (`num_parameters()`'s count, from what was asked)."""
        return (classes + (dim or features)) * (dim or features)

    def num_parameters(self) -> int:
        """The means and the D x D covariance: the model's statistics, whichever form of the
        covariance sum is kept (`state_bytes` says what is stored)."""
        return int(self.means_.numel() + self.covariance_sum_.width**2)

    def state_bytes(self) -> int:
        """The covariance sum in its kept form, the means and Sigma^-1 M' (float64), and the random
        features."""
        kept = [self.means_, self.coef_]
        if self.dim:
            kept += [self.weights_, self.offsets_]
        return int(self.covariance_sum_.nbytes() + sum(t.numel() * t.element_size() for t in kept))
