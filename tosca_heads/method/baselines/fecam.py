"""FeCAM: one shrunk, correlation-normalised covariance per class, Mahalanobis distance (Goswami et al. 2023)."""

from __future__ import annotations

import copy

import numpy as np
import torch

from tosca_foundation.limits import require_memory
from tosca_foundation.units import human_bytes
from tosca_heads.method import linalg
from tosca_heads.method.baseline_estimators import Array, as_labels, as_tensor
from tosca_heads.method.class_names import ClassFault
from tosca_heads.method.scale import unit_rows
from tosca_heads.method.ties import top_class


class FeCAM:
    """FeCAM: per-class covariances of L2-normalised features, shrunk and scaled to correlations, Mahalanobis distance.

    Goswami, Liu, Twardowski & van de Weijer, "FeCAM: Exploiting the Heterogeneity of Class
    Distributions in Exemplar-Free Continual Learning", NeurIPS 2023, arXiv:2309.14062; the
    authors' script for pretrained ViTs followed (github:dipamgoswami/FeCAM, FeCAM_vit_cifar100.py):
    features L2-normalised (no Tukey transform there); per class c the mean mu_c of the normalised
    features and their unbiased covariance S_c (np.cov); shrinkage S_c + mean(diag S_c) I (their
    alpha1 = 1; their off-diagonal term has alpha2 = 0, so none); that scaled to a correlation
    matrix R_c = D^-1/2 (S_c + mean(diag S_c) I) D^-1/2, D its diagonal; a row's score for class c
    is minus its Mahalanobis distance -(x/||x|| - mu_c)' R_c^-1 (x/||x|| - mu_c) (the difference
    itself is not standardised, as theirs). R_c is positive definite, so R_c^-1 (theirs:
    np.linalg.pinv) is reached through its Cholesky factor R_c = L_c L_c', computed in float64 once
    per call that brings the class's rows and kept in float32: a row's distance is ||L_c^-1 diff||^2,
    one triangular solve per class, never a factorisation.

    A class's rows may come in several calls (blurry and domain-incremental streams; the authors
    learn each class once): the factor is a product, so the covariance it was made from comes back
    to float32 rounding as D^1/2 L_c L_c' D^1/2 - m I (m = mean(diag S_c), half the mean of D), and
    is pooled with the new rows' exactly as one call over all of them would have it (the two
    scatters plus n_0 n_1 / n (mu_0 - mu_1)(mu_0 - mu_1)'). A class met with one image so far has
    no covariance (np.cov of one row is NaN in theirs): it is held as its mean and count and scored
    -inf until a second image comes. A class-incremental plan, which gives every row of a class at
    once, refuses such a class at its edge (`least_per_class`).

    State: C x d x d float32 factors (655 MB at 100 classes x 1,280), and per class its float64
    mean and D (C x d each) and count; never samples. Each class's statistics are its own, so it is
    order-free."""

    paper = (  # the paper it follows, as `tosca list` and docs/baselines.md cite it
        "Goswami, Liu, Twardowski & van de Weijer, FeCAM: Exploiting the Heterogeneity of Class "
        "Distributions in Exemplar-Free Continual Learning, NeurIPS 2023, arXiv:2309.14062"
    )
    incremental = True
    deterministic = True
    runs_by_default = False
    order_free = True
    recurring_classes = True  # a class's rows may come in several calls: its covariance is pooled
    least_per_class = 2  # one image has no covariance: checked at the edge (`FitPlan.check_learners`)
    label = "FeCAM"
    params = ()

    @staticmethod
    def check_fits(features: int, /, classes: int = 0, **_: object) -> None:
        """A d x d float32 factor per class (its mean and D besides), and the float64 work of one
        factorisation per worker."""
        per_class = 4 * features * features + 16 * features + 8
        need = max(classes, 1) * per_class + linalg.linalg_threads() * 4 * 8 * features * features
        require_memory(
            f"FeCAM on {classes or 'its'} classes of {features:,} features ({human_bytes(per_class)} a class)",
            need,
            "it keeps a d x d matrix per class: use fewer classes or a store with fewer features",
        )

    @staticmethod
    def work(shape: object, **_: object) -> tuple[float, str]:
        """Per class its covariance and the factor of its correlation matrix; every seen test row
        scored against every seen class (a d x d triangular solve each)."""
        train, test, d = shape.train, shape.test, shape.dim  # type: ignore[attr-defined]
        per_class = shape.classes / max(len(train), 1)  # type: ignore[attr-defined]
        flops = sum(2 * rows * d * d + per_class * d**3 for rows in train)
        flops += sum(sum(test[: t + 1]) * d * d * per_class * (t + 1) for t in range(len(test)))
        return flops, "float32"

    def __init__(self, device: str | torch.device = "cpu"):
        self.device = device

    @linalg.on_one_thread  # this thread's reductions too; the classes go to `linalg.workers`
    def partial_fit(self, features: Array, labels: Array) -> FeCAM:
        labels = as_labels(labels)
        x = unit_rows(as_tensor(features, self.device))  # at any scale (`scale`)
        d = x.shape[1]
        classes = np.unique(labels)
        if not len(classes):
            return self  # a call with no rows (a stream's step may bring none) changes nothing
        if not hasattr(self, "factors_"):
            self.factors_ = torch.zeros(0, d, d, device=x.device)
            self.means_ = torch.zeros(0, d, dtype=torch.float64, device=x.device)
            self.diagonals_ = torch.zeros(0, d, dtype=torch.float64, device=x.device)
            self.counts_ = np.zeros(0, dtype=np.int64)
            self.seen_ = np.zeros(0, dtype=bool)
        n_classes = max(len(self.counts_), int(classes.max()) + 1)
        self.check_fits(d, classes=n_classes)  # before the work

        def learned(c: int) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor, int]:
            rows = x[torch.from_numpy(labels == c).to(x.device)].double()
            mean, count = rows.mean(0), len(rows)
            scatter = (rows - mean).T @ (rows - mean)
            before = int(self.counts_[c]) if c < len(self.counts_) else 0
            if before:  # pooled with what the class's earlier calls gave
                old_mean = self.means_[c]
                if before > 1:
                    scatter += self._covariance(c) * (before - 1)
                shift = old_mean - mean
                scatter += torch.outer(shift, shift) * (before * count / (before + count))
                mean = (old_mean * before + mean * count) / (before + count)
                count += before
            if count < 2:  # no covariance yet: held as its mean, scored once a second image comes
                return None, None, mean, count
            cov = scatter / (count - 1)
            if float(cov.diagonal().sum()) == 0:  # theirs: 0 / 0, NaN distances
                raise ClassFault(
                    "FeCAM: class {cls}'s training images all point one way (their L2-normalised "
                    "features, FeCAM's first step, are one vector): their covariance is zero",
                    c,
                )
            cov.diagonal().add_(cov.diagonal().mean())
            diagonal = cov.diagonal().clone()
            scale = diagonal.rsqrt()
            corr = cov * scale[:, None] * scale[None, :]
            return torch.linalg.cholesky(corr).float(), diagonal, mean, count

        with linalg.workers(device=x.device) as run:
            found = run(learned, [int(c) for c in classes])  # one class per worker
        factors = torch.zeros(n_classes, d, d, device=x.device)
        means = torch.zeros(n_classes, d, dtype=torch.float64, device=x.device)
        diagonals = torch.zeros(n_classes, d, dtype=torch.float64, device=x.device)
        factors[: len(self.factors_)], means[: len(self.means_)] = self.factors_, self.means_
        diagonals[: len(self.diagonals_)] = self.diagonals_
        counts = np.pad(self.counts_, (0, n_classes - len(self.counts_)))
        seen = np.pad(self.seen_, (0, n_classes - len(self.seen_)))
        for c, (factor, diagonal, mean, count) in zip(classes, found, strict=True):
            means[c], counts[c] = mean, count
            if factor is not None:
                factors[c], diagonals[c], seen[c] = factor, diagonal, True
        # grown copies, never written into: a `frozen_copy` keeps the matrices it shares
        self.factors_, self.means_, self.diagonals_ = factors, means, diagonals
        self.counts_, self.seen_ = counts, seen
        return self

    def _covariance(self, c: int) -> torch.Tensor:
        """Class c's unbiased covariance S_c (float64) back from its factor: S_c + m I =
        D^1/2 L L' D^1/2 with D its diagonal, and m = mean(diag S_c) = mean(D) / 2."""
        factor = self.factors_[c].double()
        root = self.diagonals_[c].sqrt()
        cov = (factor @ factor.T) * root[:, None] * root[None, :]
        cov.diagonal().sub_(self.diagonals_[c].mean() / 2)
        return cov

    @linalg.on_one_thread
    def decision_function(self, features: Array) -> np.ndarray:
        """[n, C]: minus each row's Mahalanobis distance to each class (-inf for a class not seen,
        or met with one image so far), one class per worker thread."""
        x = unit_rows(as_tensor(features, self.device))  # at any scale (`scale`)

        def distance(c: int) -> torch.Tensor:
            diff = (x - self.means_[c].float()).T
            return torch.linalg.solve_triangular(self.factors_[c], diff, upper=False).square().sum(0)

        seen = np.flatnonzero(self.seen_)
        with linalg.workers(device=x.device) as run:
            found = run(distance, [int(c) for c in seen])
        scores = np.full((len(x), len(self.seen_)), -np.inf)
        if len(seen):
            scores[:, seen] = -torch.stack(found, 1).double().cpu().numpy()
        return scores

    def predict(self, features: Array) -> np.ndarray:
        return top_class(self.decision_function(features))  # a tie counts as wrong

    def frozen_copy(self) -> FeCAM:
        """Itself as it is now, sharing its matrices (a later call replaces them with grown copies,
        never writes into them): what the `fecam` router keeps after each task, at no copy's cost."""
        return copy.copy(self)

    @staticmethod
    def parameters_for(features: int, classes: int, /, **_: object) -> int:
        """Per class a d x d factor, a d-dimensional mean and D (`num_parameters()`'s count, from
        what was asked)."""
        return classes * (features * features + 2 * features)

    def num_parameters(self) -> int:
        return int(self.factors_.numel() + self.means_.numel() + self.diagonals_.numel())

    def state_bytes(self) -> int:
        """The C x d x d float32 factors, the C x d float64 means and diagonals, the C counts."""
        return int(self.factors_.numel() * 4 + (self.means_.numel() + self.diagonals_.numel()) * 8) + int(
            self.counts_.nbytes
        )
