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
    itself is not standardised, as theirs). R_c is positive definite, so R_c^-1 (theirs: np.linalg.pinv)
    is its Cholesky inverse, computed in float64 once, when the class is learned, and kept in float32:
    a prediction is then one product per class, never a factorisation. A class with one training
    image has no covariance (np.cov of one row is NaN in theirs): refused in one line.

    State: C x d x d float32 inverses (655 MB at 100 classes x 1,280) and C x d float32 means;
    never samples. Each class's statistics are its own, so it is order-free."""

    paper = (  # the paper it follows, as `tosca list` and docs/baselines.md cite it
        "Goswami, Liu, Twardowski & van de Weijer, FeCAM: Exploiting the Heterogeneity of Class "
        "Distributions in Exemplar-Free Continual Learning, NeurIPS 2023, arXiv:2309.14062"
    )
    incremental = True
    deterministic = True
    runs_by_default = False
    order_free = True
    least_per_class = 2  # one image has no covariance: checked at the edge (`FitPlan.check_learners`)
    label = "FeCAM"
    params = ()

    @staticmethod
    def check_fits(features: int, /, classes: int = 0, **_: object) -> None:
        """A d x d float32 inverse per class, and the float64 work of one factorisation per worker."""
        per_class = 4 * features * features
        need = max(classes, 1) * per_class + linalg.linalg_threads() * 3 * 8 * features * features
        require_memory(
            f"FeCAM on {classes or 'its'} classes of {features:,} features ({human_bytes(per_class)} a class)",
            need,
            "it keeps a d x d matrix per class: use fewer classes or a store with fewer features",
        )

    @staticmethod
    def work(shape: object, **_: object) -> tuple[float, str]:
        """Per class its covariance and the inverse of its correlation matrix; every seen test row
        scored against every seen class (a d x d product each)."""
        train, test, d = shape.train, shape.test, shape.dim  # type: ignore[attr-defined]
        per_class = shape.classes / max(len(train), 1)  # type: ignore[attr-defined]
        flops = sum(2 * rows * d * d + per_class * d**3 for rows in train)
        flops += sum(2 * sum(test[: t + 1]) * d * d * per_class * (t + 1) for t in range(len(test)))
        return flops, "float32"

    def __init__(self, device: str | torch.device = "cpu"):
        self.device = device

    @linalg.on_one_thread  # this thread's reductions too; the classes go to `linalg.workers`
    def partial_fit(self, features: Array, labels: Array) -> FeCAM:
        labels = as_labels(labels)
        x = unit_rows(as_tensor(features, self.device))  # at any scale (`scale`)
        classes, counts = np.unique(labels, return_counts=True)
        if (counts < 2).any():
            raise ClassFault(
                "FeCAM needs two or more training images per class: class {cls} has one, and one "
                "image has no covariance",
                int(classes[counts < 2][0]),
            )
        if not hasattr(self, "precisions_"):
            self.precisions_ = torch.zeros(0, x.shape[1], x.shape[1], device=x.device)
            self.means_ = torch.zeros(0, x.shape[1], device=x.device)
            self.seen_ = np.zeros(0, dtype=bool)
        if self.seen_[classes[classes < len(self.seen_)]].any():
            raise ValueError("FeCAM learns each class in one task: a class came back")
        self.check_fits(x.shape[1], classes=max(len(self.seen_), int(classes.max()) + 1))  # before the work

        def learned(c: int) -> tuple[torch.Tensor, torch.Tensor]:
            rows = x[torch.from_numpy(labels == c).to(x.device)].double()
            mean = rows.mean(0)
            cov = (rows - mean).T @ (rows - mean) / (len(rows) - 1)
            if float(cov.diagonal().sum()) == 0:  # theirs: 0 / 0, NaN distances
                raise ClassFault(
                    "FeCAM: class {cls}'s training images all point one way (their L2-normalised "
                    "features, FeCAM's first step, are one vector): their covariance is zero",
                    c,
                )
            cov.diagonal().add_(cov.diagonal().mean())
            scale = cov.diagonal().rsqrt()
            corr = cov * scale[:, None] * scale[None, :]
            return torch.cholesky_inverse(torch.linalg.cholesky(corr)).float(), mean.float()

        with linalg.workers(device=x.device) as run:
            found = run(learned, [int(c) for c in classes])  # one class per worker
        n_classes = max(len(self.means_), int(classes.max()) + 1)
        grown_p = torch.zeros(n_classes, x.shape[1], x.shape[1], device=x.device)
        grown_m = torch.zeros(n_classes, x.shape[1], device=x.device)
        grown_p[: len(self.precisions_)], grown_m[: len(self.means_)] = self.precisions_, self.means_
        for c, (precision, mean) in zip(classes, found, strict=True):
            grown_p[c], grown_m[c] = precision, mean
        self.precisions_, self.means_ = grown_p, grown_m
        self.seen_ = np.pad(self.seen_, (0, n_classes - len(self.seen_)))
        self.seen_[classes] = True
        return self

    @linalg.on_one_thread
    def decision_function(self, features: Array) -> np.ndarray:
        """[n, C]: minus each row's Mahalanobis distance to each class (-inf for a class not seen),
        one class per worker thread."""
        x = unit_rows(as_tensor(features, self.device))  # at any scale (`scale`)

        def distance(c: int) -> torch.Tensor:
            diff = x - self.means_[c]
            return ((diff @ self.precisions_[c]) * diff).sum(1)

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
        """Itself as it is now, sharing its matrices (a later task replaces them with grown copies,
        never writes into them): what the `fecam` router keeps after each task, at no copy's cost."""
        return copy.copy(self)

    @staticmethod
    def parameters_for(features: int, classes: int, /, **_: object) -> int:
        """Per class a d x d precision and a d-dimensional mean (`num_parameters()`'s count, from
        what was asked)."""
        return classes * (features * features + features)

    def num_parameters(self) -> int:
        return int(self.precisions_.numel() + self.means_.numel())

    def state_bytes(self) -> int:
        """The C x d x d float32 inverses and the C x d float32 means."""
        return int(self.precisions_.numel() * 4 + self.means_.numel() * 4)
