"""Ridge regression on the raw frozen features onto one-hot targets: RanPAC's "no random
projection" row (McDonnell et al., NeurIPS 2023, arXiv 2307.02251, Table 1 "No RPs or Phase 1")."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from tosca_foundation.limits import require_memory
from tosca_heads.method import linalg
from tosca_heads.method.baseline_estimators import (
    RANPAC_RIDGES,
    Array,
    as_labels,
    as_tensor,
    ridge_path,
)
from tosca_heads.method.baseline_registry import Interval, Param
from tosca_heads.method.closed_form import RidgeSystem
from tosca_heads.method.ties import top_class

RANPAC_RULE = "RanPAC's rule: 80/20 split of the first task"


def one_hot(labels: np.ndarray, classes: int, device: torch.device) -> torch.Tensor:
    return F.one_hot(torch.from_numpy(labels).long(), classes).double().to(device)


def ridge_by_accuracy(
    system: RidgeSystem, x: torch.Tensor, labels: np.ndarray, ridges: tuple[float, ...], run: linalg.Run
) -> tuple[float, dict[float, tuple[float, float]]]:
    """The ridge of `ridges` whose joint solution over `system` is most accurate on rows `x` (labels
    `labels`); among equally accurate ones the least mean squared error to the one-hot targets
    (RanPAC's criterion: a first task of two classes is often 100% accurate at every ridge), then
    the larger ridge. Every solution's scores from one eigendecomposition of the system's smaller
    form (`RidgeSystem.path_scores`). Returns it and each ridge's (accuracy, mean squared error)."""
    targets = one_hot(labels, system.classes, x.device)
    found = {}
    for ridge, scores in system.path_scores(x, ridges, run).items():
        accuracy = float((scores.argmax(1).cpu().numpy() == labels).mean())
        found[ridge] = (accuracy, float(((scores - targets) ** 2).mean()))
    best = max(found, key=lambda r: (found[r][0], -found[r][1], r))
    return best, found


class Ridge:
    """Ridge regression on the raw features onto one-hot targets, the joint system kept across tasks in its smaller form.

    W = (G + l I)^-1 Q, G = sum over tasks of X_t^T X_t and Q = sum of X_t^T Y_t (Y one-hot over
    the classes seen): the joint ridge solution over every row seen, whatever the order, kept as a
    `closed_form.RidgeSystem` (the rows themselves and the n x n system while fewer rows than
    features have been seen, then G and Q; the same weights to rounding). It is
    RanPAC with no random projection and no first-session adaptation (McDonnell, Gong, Parvaneh,
    Abbasnejad, van den Hengel, "RanPAC: Random Projections and Pre-trained Models for Continual
    Learning", NeurIPS 2023, arXiv 2307.02251; authors' code github:RanPAC/RanPAC, RanPAC.py with
    use_RP=True, M=0: the features enter raw, neither centred nor normalised, and the scores are
    X W with no bias). The ridge l is chosen as tosca's RanPAC chooses it: on the first task, fit
    on a random 80% and keep the ridge of least mean squared error on the other 20% (grid 1e-8 ..
    1e13), then kept; or, with a validation split (`tune`), the most accurate ridge on it (ties:
    the least validation MSE).
    State: the rows and targets (n x d, n x C float64) while n < d, then G (d x d float64) and Q;
    W (d x C float64); never samples."""

    paper = (  # the paper it follows, as `tosca list` and docs/baselines.md cite it
        "McDonnell et al., RanPAC, NeurIPS 2023: its row without random projection (ridge on the "
        "raw features)"
    )
    incremental = True
    deterministic = True
    runs_by_default = False
    order_free = True  # given a fixed ridge: G and Q are sums over rows
    recurring_classes = True  # a class's rows may come in several calls: G and Q sum over rows
    label = "ridge"
    tuned = "ridge"
    params = (
        Param(
            "ridge",
            float,
            "A fixed ridge l (0: chosen by RanPAC's rule, or on the validation split).",
            valid=Interval(0, None),
            said="",
        ),
    )

    @staticmethod
    def check_fits(dim: int, classes: int = 0, **_: object) -> None:
        """The d x d float64 Gram matrix, its Cholesky factor and its eigendecomposition must fit (the
        larger of the two forms: the rows are not known here, and d is a backbone's width)."""
        require_memory(
            f"ridge on {dim:,} features",
            4 * 8 * dim * dim + 16 * dim * max(classes, 1),
            "use smaller features",
        )

    @staticmethod
    def work(shape: object, **_: object) -> tuple[float, str]:
        """Per task the smaller form's sums and Cholesky solve (n x n kernel while n < d, else the d x d
        Gram), the first task's ridge path, and the scoring."""
        train, test, dim = shape.train, shape.test, shape.dim  # type: ignore[attr-defined]
        per_class = shape.classes / max(len(train), 1)  # type: ignore[attr-defined]
        flops, seen = 0.0, 0
        for t, rows in enumerate(train):
            seen += rows
            seen_test = sum(test[: t + 1])
            side = min(seen, dim)
            flops += 2 * rows * dim * dim if seen >= dim else 2 * seen * seen * dim + 2 * seen * dim
            flops += 2 * side**3 / 3 + 2 * seen_test * dim * per_class * (t + 1)
        fit_rows = int(0.8 * train[0])
        flops += 6 * fit_rows**2 * dim if fit_rows < dim else 10 * dim**3 / 3
        return flops, "float64"

    def __init__(
        self,
        ridge: float = 0.0,
        ridges: tuple[float, ...] = RANPAC_RIDGES,
        validation_fraction: float = 0.2,
        device: str | torch.device = "cpu",
    ):
        self.ridge = ridge
        self.ridges = ridges
        self.validation_fraction = validation_fraction
        self.device = device

    def partial_fit(self, features: Array, labels: Array) -> Ridge:
        labels = as_labels(labels)
        x = as_tensor(features, self.device, torch.float64)
        if not hasattr(self, "system_"):
            self.system_ = RidgeSystem(x.shape[1], x.device)
        classes = max(self.system_.classes, int(labels.max()) + 1)
        y = one_hot(labels, classes, x.device)
        if not hasattr(self, "ridge_"):
            if self.ridge > 0:
                self.ridge_, self.ridge_losses_, self.tuned_by_ = self.ridge, {}, "given"
            else:
                self.ridge_, self.ridge_losses_ = self._ranpac_rule(x, y)
                self.tuned_by_ = RANPAC_RULE
        with linalg.workers(device=x.device) as run:
            self.system_.add(x, y, run)
            self.weights_ = self.system_.solve(self.ridge_, run)
        return self

    def _ranpac_rule(self, x: torch.Tensor, y: torch.Tensor) -> tuple[float, dict[float, float]]:
        """Fit on a random 80% of the first task (seed 0), keep the ridge with the least held-out
        mean squared error over all one-hot columns (RanPAC's optimise_ridge_parameter)."""
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0)).to(x.device)
        n_fit = min(len(x) - 1, int(len(x) * (1 - self.validation_fraction)))
        fit, val = order[:n_fit], order[n_fit:]
        losses = {
            ridge: float(((x[val] @ w - y[val]) ** 2).mean())
            for ridge, w in ridge_path(x[fit], y[fit], self.ridges).items()
        }
        return min(losses, key=losses.__getitem__), losses

    def tune(self, features: Array, labels: Array) -> None:
        """The ridge of the grid most accurate on validation rows (of the classes seen), ties to
        the least validation MSE, then to the larger ridge; the weights are solved again with it."""
        if self.ridge > 0:
            return
        x = as_tensor(features, self.device, torch.float64)
        with linalg.workers(device=x.device) as run:
            self.ridge_, self.ridge_scores_ = ridge_by_accuracy(
                self.system_, x, as_labels(labels), self.ridges, run
            )
            self.tuned_by_ = "validation"
            self.weights_ = self.system_.solve(self.ridge_, run)

    def decision_function(self, features: Array) -> np.ndarray:
        x = as_tensor(features, self.device, torch.float64)
        with linalg.single_threaded(x.device):
            scores = [(block @ self.weights_).cpu().numpy() for block in linalg.row_blocks(x)]
        return np.concatenate(scores) if scores else np.zeros((0, self.weights_.shape[1]))

    def predict(self, features: Array) -> np.ndarray:
        return top_class(self.decision_function(features))  # a tie counts as wrong

    @staticmethod
    def parameters_for(features: int, classes: int, /, **_: object) -> int:
        """The d x C weights (`num_parameters()`'s count, from what was asked)."""
        return features * classes

    def num_parameters(self) -> int:
        return int(self.weights_.numel())

    def state_bytes(self) -> int:
        return int(self.system_.nbytes() + 8 * self.weights_.numel())
