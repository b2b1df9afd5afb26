"""Per-class statistics of the frozen features, kept task by task (never samples): what the
frozen-feature routers (nearest class mean, shared-covariance Gaussian) are built from.

For each class: its sample count and the sum of its clean training features (raw, and after the
feature transform); for all classes together: the within-class scatter matrix of the transformed
features. The transform is Tukey's square root (FeCAM) when the first task's features are all
non-negative (pooled CNN features after ReLU), else the identity (ViT [CLS] features).

The Gaussian model's shrinkage towards a scaled identity is chosen after each task on a held-out
fifth of that task's training rows, classified among every class seen so far (the old classes by
their kept statistics): the choice sees only training data, and it sees the cross-task
confusions that routing suffers from (`shrinkage="validated"`, the default). The alternatives are
scikit-learn's estimators of the shrinkage, computed from the kept statistics alone (never an
old task's rows): Ledoit-Wolf (`"ledoit_wolf"`) needs the sum of the fourth powers of the
class-centred rows' norms, one number added per task; OAS (`"oas"`) needs only the scatter.
Both equal `sklearn.covariance`'s on the pooled class-centred rows (tests hold them to it);
docs/routers.md compares them with the validated choice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from tosca_heads.method.linalg import on_one_thread
from tosca_heads.method.scale import power_of_four_near, unit_rows
from tosca_heads.method.shrinkage import oas_coefficient

SHRINKAGE_GRID = (0.01, 0.03, 0.1, 0.3, 0.6, 0.9)
SHRINKAGES = ("validated", "ledoit_wolf", "oas")  # how the shrinkage is chosen after each task
HELD_OUT = 0.2
Moments = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]  # counts, sums, tsums, scatter


def transform(x: torch.Tensor, kind: str) -> torch.Tensor:
    return x.clamp_min(0).sqrt() if kind == "tukey" else x


@dataclass(frozen=True)
class FrozenModel:
    """The frozen-feature classifiers after one task, over the classes seen so far."""

    kind: str  # the feature transform
    unit_means: torch.Tensor  # [C, d] normalised class means of the raw features (nearest class mean)
    lda_weight: torch.Tensor  # [d, C]: Sigma^-1 mu_c of the transformed features
    lda_bias: torch.Tensor  # [C]: -mu_c' Sigma^-1 mu_c / 2 (+ log prior, equal here)
    learned: Mapping[str, Any] = field(default_factory=dict)  # on-request router -> its fitted baseline

    def ncm_scores(self, x: torch.Tensor) -> torch.Tensor:
        """Cosine similarity of each sample to each class mean: [n, C]."""
        return unit_rows(x) @ self.unit_means.T  # at any scale (`scale`)

    def lda_log_posterior(self, x: torch.Tensor) -> torch.Tensor:
        """log p(c | x) under class Gaussians with the shared, shrunk covariance: [n, C]."""
        return torch.log_softmax(transform(x, self.kind) @ self.lda_weight + self.lda_bias, dim=-1)

    def to(self, device: torch.device) -> FrozenModel:
        return FrozenModel(
            self.kind,
            self.unit_means.to(device),
            self.lda_weight.to(device),
            self.lda_bias.to(device),
            self.learned,  # the baselines score CPU features: `learned.Learned` moves them
        )


class ClassStatistics:
    """Counts, sums and the within-class scatter, grown one task's classes at a time.

    Fitted state: `counts_` [C], `sums_` [C, d], `tsums_` [C, d] (transformed), `scatter_` [d, d]
    (float64), `fourth_` (the sum of |x - mu_c|^4 over every row, transformed: Ledoit-Wolf's one
    extra number), `kind_`, and `shrinkage_` (one value per task).
    """

    def __init__(self, dim: int, seed: int = 0, shrinkage: str = "validated", learners: Any = None):
        self.dim = dim
        self.seed = seed
        self.shrinkage = shrinkage
        # the on-request routers' baselines (`learned.RouterLearners`), learning here too: `partial_fit`
        # with each task's clean rows, `snapshot()` into each task's model; None: none asked for
        self.learners = learners

    @property
    def classes(self) -> int:
        return 0 if not hasattr(self, "counts_") else len(self.counts_)

    @on_one_thread
    def partial_fit(self, features: torch.Tensor, labels: np.ndarray, classes: range) -> ClassStatistics:
        """Add one task's classes (incremental ids `classes`, the next ones) from their clean features:
        on one thread (this thread's BLAS, LAPACK and parallel loops), so the scatter, the shrinkage and
        the `lda` model it is chosen with are the same bits under any thread count."""
        x = features.detach().to("cpu", torch.float32)
        if not hasattr(self, "counts_"):
            self.kind_ = "tukey" if float(x.min()) >= 0 else "none"
            self.counts_ = torch.zeros(0, dtype=torch.float64)
            self.sums_ = torch.zeros(0, self.dim, dtype=torch.float64)
            self.tsums_ = torch.zeros(0, self.dim, dtype=torch.float64)
            self.scatter_ = torch.zeros(self.dim, self.dim, dtype=torch.float64)
            self.shrinkage_: list[float] = []
            self.fourth_ = 0.0
        if classes.start != self.classes:
            raise ValueError(f"classes arrive in order: expected {self.classes}, got {classes.start}")
        if self.shrinkage not in SHRINKAGES:
            raise ValueError(f"unknown shrinkage {self.shrinkage!r}: use one of {', '.join(SHRINKAGES)}")
        self.fourth_ += _fourth_moment(x, labels, classes, self.kind_)
        if self.learners is not None:
            self.learners.partial_fit(x, labels)
        if self.shrinkage != "validated":
            self.counts_, self.sums_, self.tsums_, self.scatter_ = self._grown(
                _class_moments(x, labels, classes, self.kind_)
            )
            n = float(self.counts_.sum())
            scatter = self.scatter_.numpy()
            self.shrinkage_.append(
                ledoit_wolf_shrinkage(scatter, self.fourth_, n)
                if self.shrinkage == "ledoit_wolf"
                else oas_shrinkage(scatter, n)
            )
            return self
        split = self._held_out(labels, classes)
        if split is None:  # too few rows to hold any out
            self.shrinkage_.append(SHRINKAGE_GRID[len(SHRINKAGE_GRID) // 2])
            moments = _class_moments(x, labels, classes, self.kind_)
        else:  # the task's moments are the fitted part's and the held-out part's, merged
            fit, held = split
            fitted = _class_moments(x[fit], labels[fit], classes, self.kind_)
            self.shrinkage_.append(self._choose_shrinkage(fitted, x[held], labels[held]))
            moments = _merge(fitted, _class_moments(x[held], labels[held], classes, self.kind_))
        self.counts_, self.sums_, self.tsums_, self.scatter_ = self._grown(moments)
        return self

    def _grown(self, moments: Moments) -> Moments:
        """The kept statistics with a new task's classes appended."""
        counts, sums, tsums, scatter = moments
        return (
            torch.cat([self.counts_, counts]),
            torch.cat([self.sums_, sums]),
            torch.cat([self.tsums_, tsums]),
            self.scatter_ + scatter,
        )

    def _held_out(self, labels: np.ndarray, classes: range) -> tuple[np.ndarray, np.ndarray] | None:
        """A seeded held-out fifth of this task's rows and the rest, or None if a class would have
        no fitted row."""
        order = np.random.default_rng(self.seed + classes.start).permutation(len(labels))
        held = order[: max(1, int(len(order) * HELD_OUT))]
        fit = order[len(held) :]
        if len(fit) == 0 or any((labels[fit] == c).sum() == 0 for c in classes):
            return None
        return fit, held

    def _choose_shrinkage(self, fitted: Moments, held_x: torch.Tensor, held_labels: np.ndarray) -> float:
        """The grid value whose model (old classes + this task's fitted part) classifies the held-out
        rows best among all seen classes."""
        trial = self._grown(fitted)
        truth = torch.from_numpy(held_labels)
        accuracy = {
            lam: float(
                (_model(*trial, self.kind_, lam).lda_log_posterior(held_x).argmax(-1) == truth).float().mean()
            )
            for lam in SHRINKAGE_GRID
        }
        best = max(accuracy.values())
        return max(lam for lam, acc in accuracy.items() if acc == best)  # ties: the stronger shrinkage

    @on_one_thread
    def model(self) -> FrozenModel:
        """The classifiers over every class seen so far, with the last task's shrinkage (solved on one
        thread, as in `partial_fit`)."""
        model = _model(self.counts_, self.sums_, self.tsums_, self.scatter_, self.kind_, self.shrinkage_[-1])
        return model if self.learners is None else replace(model, learned=self.learners.snapshot())

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {
            "counts": self.counts_,
            "sums": self.sums_,
            "tsums": self.tsums_,
            "scatter": self.scatter_,
            "shrinkage": torch.tensor(self.shrinkage_, dtype=torch.float64),
            "tukey": torch.tensor([self.kind_ == "tukey"]),
        }

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> ClassStatistics:
        self.counts_, self.sums_, self.tsums_ = state["counts"], state["sums"], state["tsums"]
        self.scatter_ = state["scatter"]
        self.shrinkage_ = [float(v) for v in state["shrinkage"]]
        self.kind_ = "tukey" if bool(state["tukey"][0]) else "none"
        # a run's file keeps what routing reads; Ledoit-Wolf's term only serves growing on
        self.fourth_ = float("nan")
        return self


def _fourth_moment(x: torch.Tensor, labels: np.ndarray, classes: range, kind: str) -> float:
    """The sum over this task's rows of |t - mu_c|^4 (t transformed, mu_c its class's mean): summed
    by numpy in a fixed order (the same bits on any thread count)."""
    total = 0.0
    for c in classes:  # one class transformed in float64 at a time, never the task's rows whole
        members = transform(x[torch.from_numpy(labels == c)], kind).double().numpy()
        if len(members):
            centred = members - members.mean(0)
            total += float(np.sum(np.sum(centred * centred, axis=1) ** 2))
    return total


def ledoit_wolf_shrinkage(scatter: np.ndarray, fourth: float, n: float) -> float:
    """`sklearn.covariance.ledoit_wolf_shrinkage` of the pooled class-centred rows (assume_centered),
    from their scatter Z'Z, the sum of |z_i|^4 and their count: its own formula, term by term
    (its beta_ is `fourth`, its delta_ is |Z'Z / n|_F^2)."""
    p = scatter.shape[0]
    emp = scatter / n
    trace = float(np.trace(emp))
    mu = trace / p
    delta_ = float(np.sum(emp**2))
    beta = 1.0 / (p * n) * (fourth / n - delta_)
    delta = (delta_ - 2.0 * mu * trace + p * mu**2) / p
    beta = min(beta, delta)
    return 0.0 if beta == 0 else beta / delta


def oas_shrinkage(scatter: np.ndarray, n: float) -> float:
    """`sklearn.covariance.OAS`'s shrinkage of the pooled class-centred rows (assume_centered), from
    their scatter and count: its own formula."""
    p = scatter.shape[0]
    emp = scatter / n
    return oas_coefficient(float(np.mean(emp**2)), float(np.trace(emp)) / p, n, p)


def _class_moments(x: torch.Tensor, labels: np.ndarray, classes: range, kind: str) -> Moments:
    """Per class: count, sum of raw and of transformed features; and the within-class scatter of
    the transformed features, all classes together (float64). A class without rows adds zeros."""
    counts, sums, tsums = [], [], []
    scatter = torch.zeros(x.shape[1], x.shape[1], dtype=torch.float64)
    for c in classes:  # one class in float64 at a time, never the task's rows whole
        rows = x[torch.from_numpy(labels == c)]
        members, tmembers = rows.double(), transform(rows, kind).double()
        counts.append(float(len(members)))
        sums.append(members.sum(0))
        tsums.append(tmembers.sum(0))
        if len(members):
            centred = tmembers - tmembers.mean(0)
            scatter += centred.T @ centred
    return torch.tensor(counts, dtype=torch.float64), torch.stack(sums), torch.stack(tsums), scatter


def _merge(a: Moments, b: Moments) -> Moments:
    """The moments of two disjoint parts of the same classes' rows taken together: the scatters
    add, plus each class's between-part term n_a n_b / n (mean_a - mean_b)(mean_a - mean_b)'."""
    (na, sa, ta, wa), (nb, sb, tb, wb) = a, b
    n = na + nb
    both = (na > 0) & (nb > 0)
    gap = torch.zeros_like(ta)
    gap[both] = ta[both] / na[both, None] - tb[both] / nb[both, None]
    weight = torch.where(both, na * nb / n.clamp_min(1), torch.zeros_like(n))
    return n, sa + sb, ta + tb, wa + wb + (gap.T * weight) @ gap


def _shrunk(covariance: torch.Tensor, lam: float, ridge: float) -> torch.Tensor:
    """(1 - lam) covariance + ridge I, without a d x d identity: every entry is the sum the
    identity's would make (ridge x 0 = +0.0 off the diagonal, ridge x 1 on it), so the bits are."""
    shrunk = covariance * (1 - lam)
    shrunk += ridge * 0.0  # turns -0.0 into +0.0 as the identity's zeros do
    shrunk.diagonal().add_(ridge)
    return shrunk


def _model(
    counts: torch.Tensor,
    sums: torch.Tensor,
    tsums: torch.Tensor,
    scatter: torch.Tensor,
    kind: str,
    lam: float,
) -> FrozenModel:
    if bool((counts == 0).any()):
        raise ValueError("a class without training samples has no statistics")
    dim = scatter.shape[0]
    covariance = scatter / max(1.0, float(counts.sum()) - len(counts))
    scale = float(torch.trace(covariance)) / dim or 1.0
    # accumulated in float64; solved in float32, which the shrinkage (>= 1% of the mean variance
    # on the diagonal) keeps well conditioned, at a third of the cost, over a power of four near
    # the mean variance (`scale`: features x1e30 have variances past float32's range, x1e-30
    # below it; a power of four changes no bit of the solve where neither happened)
    level = power_of_four_near(scale)
    shrunk = _shrunk(covariance / level, lam, lam * scale / level).float()
    means = (tsums / counts[:, None]).float()
    weight = torch.cholesky_solve(means.T.contiguous(), torch.linalg.cholesky(shrunk))  # [d, C]
    weight = (weight.double() / level).float()  # float64: `level` itself may be past float32's range
    bias = -0.5 * (means * weight.T).sum(-1)
    unit = unit_rows(sums / counts[:, None])  # F.normalize's floor (1e-12) bent means of x1e-30
    return FrozenModel(kind, unit.float(), weight, bias)
