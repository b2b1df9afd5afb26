"""KLDA: kernel LDA over random Fourier features (Momeni, Mazumder & Liu, AAAI 2025), and its ensemble."""

from __future__ import annotations

import copy
import math

import numpy as np
import torch

from tosca_foundation.limits import require_memory
from tosca_heads.method import linalg
from tosca_heads.method.baseline_estimators import Array, as_labels
from tosca_heads.method.baseline_registry import Interval, Param
from tosca_heads.method.baselines import random_fourier as rff
from tosca_heads.method.closed_form import RidgeSystem
from tosca_heads.method.scale import KERNEL_HIGH, KERNEL_LOW, kernel_within_reach, mean_squared_distance
from tosca_heads.method.ties import top_class

SIGMAS = (0.01, 0.1, 1.0, 10.0, 100.0)  # the factors of the given sigma `tune` tries


class KLDA:
    """Kernel LDA: random Fourier features of an RBF kernel, class means and one shared scatter matrix, Mahalanobis.

    Momeni, Mazumder & Liu, "Continual Learning Using a Kernel-Based Method Over Foundation
    Models", AAAI 2025, arXiv:2412.15571; the authors' code (github:salehmomeni/klda, `KLDA` and
    `KLDA_E`) followed. Features phi(x) = sqrt(2/D) cos(x W + b), W ~ N(0, 2 sigma) (so sigma is
    the gamma of exp(-sigma ||x - y||^2)), b ~ U[0, 2 pi), drawn from `seed` (member i of the
    ensemble: seed + i, as theirs). Each class's mean mu_c of phi, and one shared scatter
    S = sum_c sum_{i in c} (phi_i - mu_c)(phi_i - mu_c)' (a sum, not divided by the count, as
    theirs); a row's score for class c is minus its Mahalanobis distance
    -(phi - mu_c)'(S + 1e-6 I)^-1 (phi - mu_c), returned without the term phi'(S + 1e-6 I)^-1 phi
    that is the same for every class (argmax and softmax are unchanged by it). The ensemble's
    scores are its members' softmax probabilities averaged (the authors sum them).

    The scatter is a sum over class-centred rows, S = C'C, so it is kept as a
    `closed_form.RidgeSystem` in the smaller of its two forms: the centred rows themselves while
    fewer than D have been seen, (S + 1e-6 I)^-1 M' then solved through the n x n system
    (Woodbury's identity), else the D x D scatter and its Cholesky factor (the authors' form); the
    same answer to rounding.

    State per member: the centred rows (n x D float64) while n < D, else the D x D float64 scatter
    (200 MB at D = 5,000); the C x D float64 means, plus (S + 1e-6 I)^-1 M' (D x C), refreshed
    after each task; never samples."""

    paper = (  # the paper it follows, as `tosca list` and docs/baselines.md cite it
        "Momeni, Mazumder & Liu, Continual Learning Using a Kernel-Based Method Over Foundation "
        "Models, AAAI 2025, arXiv:2412.15571"
    )
    incremental = True
    deterministic = False
    runs_by_default = False
    order_free = True
    recurring_classes = True  # a class's rows may come in several calls: its mean and the pooled scatter
    label = "KLDA"
    tuned = "sigma"  # on the validation split where the run has one (`tune`), else the given value
    params = (
        Param(
            "dim",
            int,
            "KLDA's random Fourier feature dimension D (its paper and code: 5,000).",
            valid=Interval(1, None),
            said="D = {:,}",
        ),
        Param(
            "sigma",
            float,
            "KLDA's RBF kernel parameter: the kernel is exp(-sigma ||x - y||^2) (its code's default 1e-4, "
            "the value for BART-base; the paper sets it per backbone).",
            valid=Interval(0, None, closed="neither"),
            said="sigma = {:g}",
        ),
        Param(
            "members",
            int,
            "KLDA's ensemble size: members with seeds seed, seed + 1, ..., their probabilities averaged.",
            valid=Interval(1, None),
        ),
        Param(
            "seed", int, "Seed of KLDA's random features.", valid=Interval(0, 2**32, closed="left"), seed=True
        ),
    )

    @staticmethod
    def check_fits(
        features: int, /, classes: int = 0, dim: int = 5000, members: int = 1, **_: object
    ) -> None:
        """Each member's D x D float64 scatter and, at each solve, its tiled Cholesky factor; the
        random features W (d x D float32, d = `features`) and the means."""
        d_rff = dim
        need = members * (8 * d_rff * d_rff + 4 * features * d_rff + 8 * max(classes, 1) * d_rff * 2)
        need += 8 * d_rff * d_rff
        require_memory(
            f"KLDA with D = {d_rff:,} and {members} member(s)",
            need,
            "lower --klda-dim (or --klda-members)",
        )

    @staticmethod
    def work(shape: object, dim: int = 5000, members: int = 1, **_: object) -> tuple[float, str]:
        """Per member and task: the features of the task's rows and of every seen test row, the
        scatter's Gram sum, its Cholesky factor and the solve for the class means; scoring."""
        train, test, d = shape.train, shape.test, shape.dim  # type: ignore[attr-defined]
        per_class = shape.classes / max(len(train), 1)  # type: ignore[attr-defined]
        flops = 0.0
        for t, rows in enumerate(train):
            seen_test, seen = sum(test[: t + 1]), per_class * (t + 1)
            flops += 2 * rows * d * dim + rows * dim * dim + dim**3 / 3 + 2 * dim * dim * seen
            flops += 2 * seen_test * d * dim + 2 * seen_test * dim * seen
        return members * flops, "float64"

    def __init__(
        self,
        dim: int = 5000,
        sigma: float = 1e-4,
        members: int = 1,
        seed: int = 0,
        ridge: float = 1e-6,
        device: str | torch.device = "cpu",
    ):
        self.dim = dim
        self.sigma = sigma
        self.members = members
        self.seed = seed
        self.ridge = ridge
        self.device = device

    def _draw(self, d: int) -> None:
        self.weights_, self.offsets_ = [], []
        for member in range(self.members):
            gen = torch.Generator().manual_seed(self.seed + member)  # as torch.manual_seed(seed + i)
            weights = torch.normal(0.0, math.sqrt(2 * self.sigma), (d, self.dim), generator=gen)
            offsets = torch.rand(self.dim, generator=gen) * 2 * math.pi
            self.weights_.append(weights.to(self.device))
            self.offsets_.append(offsets.to(self.device))
        dev = self.weights_[0].device
        self.scatter_ = [RidgeSystem(self.dim, dev) for _ in self.weights_]  # S = C'C, its smaller form
        self.means_ = [torch.zeros(0, self.dim, dtype=torch.float64, device=dev) for _ in self.weights_]
        self.counts_ = np.zeros(0, dtype=np.int64)
        self.sigma_, self.tuned_by_ = self.sigma, "the paper's value (its code's default)"

    def partial_fit(self, features: Array, labels: Array) -> KLDA:
        labels = as_labels(labels)
        if not hasattr(self, "weights_"):  # sigma is absolute: refused where the features' scale
            kernel_within_reach(self.label, "sigma", self.sigma, mean_squared_distance(features))  # voids it
            self._draw(features.shape[1])
        classes, counts = np.unique(labels, return_counts=True)
        n_classes = max(len(self.counts_), int(classes.max()) + 1)
        self.counts_ = np.pad(self.counts_, (0, n_classes - len(self.counts_)))
        before = self.counts_[classes].copy()  # a class met again: its rows so far
        self.counts_[classes] += counts
        dev = self.weights_[0].device
        self.solved_, self.quadratic_ = [], []
        with linalg.workers(device=dev) as run:
            for m in range(self.members):
                h = rff.cosine_features(features, self.weights_[m], self.offsets_[m], run, self.device)
                _, _, means = rff.class_means(h, labels)
                grown = torch.zeros(n_classes, self.dim, dtype=torch.float64, device=dev)
                grown[: len(self.means_[m])] = self.means_[m]
                centred = rff.centred(h, labels, classes, means)
                again = torch.from_numpy(before > 0).to(dev)
                if bool(again.any()):  # the pooled scatter: these rows about their own mean, and a row per
                    # class met again, sqrt(n_old n_new / n) (mu_old - mu_new), whose outer product is
                    # what moving both groups to the joint mean adds (Chan et al.'s update)
                    old = grown[torch.from_numpy(classes[before > 0]).to(dev)]
                    n_old = torch.from_numpy(before[before > 0].astype(np.float64)).to(dev)
                    n_new = torch.from_numpy(counts[before > 0].astype(np.float64)).to(dev)
                    shift = torch.sqrt(n_old * n_new / (n_old + n_new))[:, None] * (old - means[again])
                    centred = torch.cat([centred, shift])
                    joint = (old * n_old[:, None] + means[again] * n_new[:, None]) / (n_old + n_new)[:, None]
                    means = means.clone()
                    means[again] = joint
                grown[torch.from_numpy(classes).to(dev)] = means
                self.means_[m] = grown
                self.scatter_[m].add(centred, centred.new_zeros(len(centred), 0), run)
                solved = self.scatter_[m].solve_for(grown.T.contiguous(), self.ridge, run)
                self.solved_.append(solved)  # (S + ridge I)^-1 M'
                self.quadratic_.append((grown * solved.T).sum(1))  # mu_c'(S + ridge I)^-1 mu_c
        return self

    def logits(self, features: Array, member: int = 0, run: linalg.Run | None = None) -> torch.Tensor:
        """One member's -(phi - mu_c)'(S + ridge I)^-1 (phi - mu_c) + phi'(S + ridge I)^-1 phi, [n, C]."""
        if run is None:
            with linalg.workers(device=self.weights_[0].device) as own:
                return self.logits(features, member, own)
        h = rff.cosine_features(features, self.weights_[member], self.offsets_[member], run, self.device)
        seen = torch.from_numpy(self.counts_ > 0).to(h.device)
        scores = 2 * h @ self.solved_[member] - self.quadratic_[member]
        return scores.masked_fill(~seen, -torch.inf)

    def decision_function(self, features: Array) -> np.ndarray:
        """[n, C] scores: one member's logits, or the members' softmax probabilities averaged."""
        with linalg.workers(device=self.weights_[0].device) as run:
            if self.members == 1:
                return self.logits(features, 0, run).cpu().numpy()
            total = sum(torch.softmax(self.logits(features, m, run), 1) for m in range(self.members))
            return (total / self.members).cpu().numpy()

    def predict(self, features: Array) -> np.ndarray:
        return top_class(self.decision_function(features))  # a tie counts as wrong

    def tune(self, features: Array, labels: Array, first: tuple[Array, Array]) -> None:
        """sigma chosen on validation rows (the run's, of the first task's classes), as the paper sets
        it per backbone: a one-member KLDA refitted on the first task (`first`: its training rows,
        handed over while that task is learned; none is kept) at each of SIGMAS x the given
        sigma; the most accurate, ties to the least validation MSE against one-hot targets of
        the softmax, then to the smaller sigma (the wider kernel). The chosen sigma is then
        refitted on the first task for every member."""
        labels = as_labels(labels)
        x, y = first
        found = {}
        spread = mean_squared_distance(x)
        for factor in SIGMAS:
            sigma = self.sigma * factor
            if spread > 0 and not KERNEL_LOW <= sigma * spread <= KERNEL_HIGH:
                continue  # a candidate out of the kernel's reach (the given sigma was checked in reach)
            trial = KLDA(self.dim, sigma, 1, self.seed, self.ridge, self.device).partial_fit(x, y)
            scores = torch.from_numpy(trial.decision_function(features))
            probabilities = torch.softmax(scores.double(), 1).numpy()
            onehot = np.eye(probabilities.shape[1])[labels]
            accuracy = float((scores.argmax(1).numpy() == labels).mean())
            found[sigma] = (-accuracy, float(((probabilities - onehot) ** 2).mean()), sigma)
        best = min(found, key=found.__getitem__)
        self.validation_ = {sigma: {"accuracy": -neg, "mse": mse} for sigma, (neg, mse, _) in found.items()}
        chosen = KLDA(self.dim, best, self.members, self.seed, self.ridge, self.device).partial_fit(x, y)
        self.__dict__.update({k: v for k, v in vars(chosen).items() if k.endswith("_")})
        self.sigma_, self.tuned_by_ = best, "validation"

    def frozen_copy(self) -> KLDA:
        """Itself for scoring, as it is now, without the D x D scatters (which the next task adds
        to in place) or the means: what the `klda` router keeps after each task (a sweep's memo
        keeps one per task), sharing the random features and the solved means, which a later
        task replaces, never writes into."""
        kept = copy.copy(self)
        kept.__dict__.pop("scatter_", None)
        kept.__dict__.pop("means_", None)
        return kept

    @staticmethod
    def parameters_for(features: int, classes: int, /, dim: int = 5000, members: int = 1, **_: object) -> int:
        """Per member the C x D means and the D x D scatter (`num_parameters()`'s count, from what
        was asked; d, the store's, plays no part)."""
        return members * (classes * dim + dim * dim)

    def num_parameters(self) -> int:
        """The means and the D x D scatter of each member: the model's statistics, whichever form
        of the scatter is kept (`state_bytes` says what is stored)."""
        return int(sum(m.numel() for m in self.means_) + len(self.scatter_) * self.dim * self.dim)

    def state_bytes(self) -> int:
        """The scatters in their kept form, the means and the solved means (float64), and the random
        features."""
        kept = [*self.means_, *self.solved_, *self.weights_, *self.offsets_]
        scatters = sum(system.nbytes() for system in self.scatter_)
        return int(scatters + sum(t.numel() * t.element_size() for t in kept))


class KLDAEnsemble(KLDA):
    """KLDA-E: five KLDA members on their own random features, their softmax probabilities averaged.

    The ensemble of Momeni, Mazumder & Liu (AAAI 2025; `KLDA_E` in github:salehmomeni/klda, five
    members by default, seeds seed .. seed + 4): see `KLDA`. Its state is five times KLDA's
    (1 GB at D = 5,000)."""

    label = "KLDA-E"

    def __init__(
        self,
        dim: int = 5000,
        sigma: float = 1e-4,
        members: int = 5,
        seed: int = 0,
        ridge: float = 1e-6,
        device: str | torch.device = "cpu",
    ):
        super().__init__(dim=dim, sigma=sigma, members=members, seed=seed, ridge=ridge, device=device)
