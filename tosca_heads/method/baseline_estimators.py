"""Baselines on the frozen features (method.md §7), as estimators: `__init__` stores arguments,
`partial_fit` learns one task and returns self, `predict` gives plain class-id arrays, fitted
state ends in `_`.

- SimpleCIL: the class means are the cosine classifier; nothing is trained.
- RanPAC: a fixed random ReLU projection to M dimensions, then ridge regression onto one-hot
  targets, the joint ridge solution over all data seen whatever the order, solved in the smaller
  of its two forms (`closed_form`). The ridge is chosen again at every task, by its authors' rule. This is RanPAC without its first-session adapter training: the backbone stays frozen.
- JointProbe: multinomial logistic regression on every seen class at once, retrained at each
  stage: the upper bound that ignores the continual setting (`reference`: never an honest
  result, never bolded).

Labels are incremental class ids (0..seen-1, as TaskStream.remap gives them). Each estimator
takes a `device` (cpu, cuda, ...) and computes there; inputs may be numpy arrays or tensors,
predictions are numpy arrays. `baseline_registry.register_baseline` adds one from outside the
package: every comparison, `tosca baselines --methods NAME` and suites then run it.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from tosca_foundation.limits import require_memory
from tosca_heads.method import closed_form, linalg
from tosca_heads.method.baseline_registry import Interval, Param
from tosca_heads.method.scale import binary_peak, unit_rows
from tosca_heads.method.ties import top_class

RANPAC_RIDGES = tuple(10.0**k for k in range(-8, 14))  # ridge's grid: 1e-8 .. 1e13 (theirs: closed_form's)
RANPAC_RULE = "RanPAC's rule at every task (least held-out MSE on a seeded 80/20 split of the task's rows)"
Array = np.ndarray | torch.Tensor


def as_tensor(values: Array, device: str | torch.device, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    if isinstance(values, np.ndarray):
        values = torch.from_numpy(np.ascontiguousarray(values))
    return values.to(device=device, dtype=dtype)


def as_labels(labels: Array) -> np.ndarray:
    return labels.cpu().numpy() if isinstance(labels, torch.Tensor) else np.asarray(labels)


class SimpleCIL:
    """Prototype classifier: cosine similarity to each class's mean feature."""

    paper = (  # the paper it follows, as `tosca list` and docs/baselines.md cite it
        "Zhou, Cai, Ye & Zhan, Revisiting Class-Incremental Learning with Pre-Trained Models: "
        "Generalizability and Adaptivity are All You Need, IJCV 2024, arXiv:2303.07338"
    )
    incremental = True
    deterministic = True
    runs_by_default = True
    order_free = True  # its prototypes are class means: the same whatever the order
    recurring_classes = True  # a class's rows may come in several calls: its mean weighs them by count
    label = "SimpleCIL"

    def __init__(self, device: str | torch.device = "cpu"):
        self.device = device

    @staticmethod
    def work(shape: object, **_: object) -> tuple[float, str]:
        """Its arithmetic (a time estimate's, as RanPAC's): a mean per class, every test row seen
        scored against every class seen."""
        train, test, dim = shape.train, shape.test, shape.dim  # type: ignore[attr-defined]
        per_class = shape.classes / max(len(train), 1)  # type: ignore[attr-defined]
        scored = sum(2 * sum(test[: t + 1]) * dim * per_class * (t + 1) for t in range(len(test)))
        return 2 * sum(train) * dim + scored, "float32"

    @linalg.on_one_thread
    def partial_fit(self, features: Array, labels: Array) -> SimpleCIL:
        """Each class's prototype, the mean of every row of it seen: a class met for the first time
        gets the mean of its rows here; one met again (a blurry stream, a new domain) the mean of
        its earlier rows and these, weighted by their counts (`counts_`), in float64."""
        x, y = as_tensor(features, self.device), as_labels(labels)
        classes = np.unique(y)
        known = getattr(self, "prototypes_", torch.zeros(0, x.shape[1], device=x.device))
        size = max(len(known), int(classes.max()) + 1)
        grown = torch.zeros(size, x.shape[1], device=x.device)
        grown[: len(known)] = known
        counts = np.zeros(size, dtype=np.int64)
        counts[: len(known)] = getattr(self, "counts_", np.zeros(0, dtype=np.int64))
        for c in classes:  # the mean over a power of two, scaled back: its sum cannot overflow
            rows = x[torch.from_numpy(y == c).to(x.device)]
            peak = binary_peak(rows)
            mean = ((rows.double() / peak).float().mean(0).double() * peak).float()
            before, here = int(counts[c]), len(rows)
            if before:  # met again: the counts' weighted mean of the two means
                mean = ((grown[c].double() * before + mean.double() * here) / (before + here)).float()
            grown[c], counts[c] = mean, before + here
        self.prototypes_, self.counts_ = grown, counts
        return self

    @linalg.on_one_thread
    def decision_function(self, features: Array) -> np.ndarray:
        """Cosine similarity of each row to each class's prototype: [n, classes]."""
        x = unit_rows(as_tensor(features, self.device))  # at any scale (`scale`)
        w = unit_rows(self.prototypes_)
        return (x @ w.T).cpu().numpy()

    def predict(self, features: Array) -> np.ndarray:
        return top_class(self.decision_function(features))  # a tie counts as wrong

    @staticmethod
    def parameters_for(features: int, classes: int, /, **_: object) -> int:
        """What `num_parameters()` counts once every class is learned, from what was asked
        (`baseline_registry.parameter_count`): a d-dimensional prototype per class."""
        return classes * features

    def num_parameters(self) -> int:
        return int(self.prototypes_.numel())

    def state_bytes(self) -> int:
        """The C x d prototypes (float32)."""
        return int(self.prototypes_.numel() * self.prototypes_.element_size())


class RanPAC:
    """Random-projection ridge classifier: H = ReLU(x W_rand), W = (H'H + l I)^-1 H'Y over every row seen.

    The joint ridge system is a `closed_form.RidgeSystem`: while fewer rows than M have been seen it
    keeps the projected rows and solves the n x n system, then the M x M Gram matrix (the same
    weights to rounding, whatever the order). The ridge is chosen again at every task, on that
    task's rows, by the authors' rule (`closed_form.authors_ridge`: RanPAC.py
    `optimise_ridge_parameter`), unless one is given; the run's validation split plays no part.
    This is RanPAC without its first-session adapter training: the backbone stays frozen.

    On a CPU its projections, Gram sums, Cholesky factors and solves are `linalg`'s tiled ones, on
    `linalg_threads()` threads: the same bits on any thread count.

    Its parameters (`Param`: --ranpac-projection-dim and --ranpac-seed, a suite's
    `ranpac_projection_dim`, the API's `ranpac_projection_dim=` and `ranpac_seed=`) are declared
    here and nowhere else; the projection size is M in its paper and in tables."""

    paper = (  # the paper it follows, as `tosca list` and docs/baselines.md cite it
        "McDonnell, Gong, Parvaneh, Abbasnejad & van den Hengel, RanPAC: Random Projections and "
        "Pre-trained Models for Continual Learning, NeurIPS 2023, arXiv:2307.02251"
    )
    incremental = True
    runs_by_default = True
    recurring_classes = True  # a class's rows may come in several calls: G and Q sum over rows
    label = "RanPAC"
    tuned = "ridge"  # the last task's, by its authors' rule (`ridges_`: every task's; `tuned_by_`)
    params = (
        Param(
            "projection_dim",
            int,
            "RanPAC's random projection size M (its paper: 10,000).",
            valid=Interval(1, None),
            said="M = {:,}",
        ),
        Param(
            "seed",
            int,
            "Seed of RanPAC's random projection.",
            valid=Interval(0, 2**32, closed="left"),
            seed=True,
        ),
    )

    @staticmethod
    def check_fits(dim: int, projection_dim: int, rows: int | None = None, **_: object) -> None:
        """The ridge system in its smaller form must fit: with n training rows (`rows`, when known)
        under M, the n x M float64 rows with their tiled copy and the n x n kernel with its
        factor; else the M x M float64 Gram matrix with its regularised copy and factor."""
        m = projection_dim
        side = m if rows is None else min(rows, m)
        kept = 2 * 8 * side * m if side < m else 0
        require_memory(
            f"RanPAC with M = {m:,}",
            kept + 3 * 8 * side * side + 4 * m * dim,
            "lower --ranpac-projection-dim",
        )

    @staticmethod
    def work(shape: object, projection_dim: int, **_: object) -> tuple[float, str]:
        """Its arithmetic on a stream of `shape` (`running.cost_models.TaskShape`) and the precision
        it runs in: what a time estimate divides by this machine's rate. Its keywords are always
        given (`baseline_registry.arguments`): the defaults are `__init__`'s alone."""
        train, test, dim = shape.train, shape.test, shape.dim  # type: ignore[attr-defined]
        m, per_class = projection_dim, shape.classes / max(len(train), 1)  # type: ignore[attr-defined]
        flops, seen = 0.0, 0
        for t, rows in enumerate(train):
            seen += rows
            seen_test = sum(test[: t + 1])
            flops += 2 * rows * dim * m  # projection
            side = min(seen, m)  # the smaller form: kernel (n x n) or Gram (M x M) sums, its Cholesky
            flops += 2 * rows * m * m if seen >= m else 2 * seen * seen * m + 2 * seen * m
            flops += 2 * side**3 / 3
            fit = int(0.8 * rows)  # the task's ridge path: the fit rows' Gram and its eigendecomposition
            flops += 2 * fit * fit * m + 10 * min(fit, m) ** 3 if fit < m else 2 * fit * m * m + 10 * m**3
            flops += 2 * seen_test * dim * m + 2 * seen_test * m * per_class * (t + 1)  # scored
        return flops, "float64"

    def __init__(
        self,
        projection_dim: int = 10_000,
        ridge: float | None = None,
        ridges: tuple[float, ...] = closed_form.AUTHORS_RIDGES,
        seed: int = 0,
        device: str | torch.device = "cpu",
    ):
        self.projection_dim = projection_dim
        self.ridge = ridge
        self.ridges = ridges
        self.seed = seed
        self.device = device

    def project(self, features: Array) -> torch.Tensor:
        """ReLU(x W_rand) in float64 (the Gram sums stay exact enough for a 1e-8 ridge)."""
        with linalg.workers(device=self.projection_.device) as run:
            blocks = [torch.cat(tiles, 1) for tiles in self._projected(features, run)]
        if not blocks:
            return torch.zeros(0, self.projection_dim, dtype=torch.float64, device=self.projection_.device)
        return torch.cat(blocks)

    def _projected(self, features: Array, run: linalg.Run) -> list[list[torch.Tensor]]:
        """The projection's row blocks (linalg.ROWS rows), each as its column tiles (linalg.TILE
        wide): one product per (block, tile), on `run`'s threads."""
        x = as_tensor(features, self.device)
        blocks, tiles = linalg.row_blocks(x), linalg.column_tiles(self.projection_)
        pairs = [(b, t) for b in range(len(blocks)) for t in range(len(tiles))]
        flat = run(lambda pair: torch.relu(blocks[pair[0]] @ tiles[pair[1]]).double(), pairs)
        return [flat[b * len(tiles) : (b + 1) * len(tiles)] for b in range(len(blocks))]

    def partial_fit(self, features: Array, labels: Array) -> RanPAC:
        labels = as_labels(labels)
        if not hasattr(self, "projection_"):
            gen = torch.Generator().manual_seed(self.seed)  # drawn on the CPU: the same matrix anywhere
            projection = torch.randn(features.shape[1], self.projection_dim, generator=gen)
            self.projection_ = projection.to(self.device)
            self.system_ = closed_form.RidgeSystem(self.projection_dim, self.projection_.device)
            self.ridges_: list[float] = []
        device = self.projection_.device
        with linalg.workers(device=device) as run:
            h = torch.cat([torch.cat(tiles, 1) for tiles in self._projected(features, run)])
            n_classes = max(self.system_.classes, int(labels.max()) + 1)
            y = F.one_hot(torch.from_numpy(labels).long(), n_classes).double().to(device)
            if self.ridge is not None:
                self.ridge_, self.ridge_losses_, self.ridge_floor_ = float(self.ridge), {}, 0.0
                self.tuned_by_ = "given"
            else:
                task_seed = self.seed + len(self.ridges_)  # their loader reshuffles every task
                self.ridge_, self.ridge_losses_, self.ridge_floor_ = closed_form.authors_ridge(
                    h, y, task_seed, run, self.ridges
                )
            self.ridges_.append(self.ridge_)
            if self.ridge is None:  # the line under the table says every task's, not the last alone
                every = ", ".join(f"{r:g}" for r in self.ridges_)
                self.tuned_by_ = f"{RANPAC_RULE}; the last task's, of {every}"
            self.system_.add(h, y, run)
            self.weights_ = self.system_.solve(self.ridge_, run)
        return self

    def decision_function(self, features: Array) -> np.ndarray:
        """Scores [n, classes]: each row block's projection (its tiles on `linalg`'s threads) times
        the weights, one product per block."""
        with linalg.workers(device=self.projection_.device) as run:
            scores = [
                (torch.cat(tiles, 1) @ self.weights_).cpu().numpy()
                for tiles in self._projected(features, run)
            ]
        return np.concatenate(scores) if scores else np.zeros((0, self.weights_.shape[1]))

    def predict(self, features: Array) -> np.ndarray:
        return top_class(self.decision_function(features))  # a tie counts as wrong

    @staticmethod
    def parameters_for(features: int, classes: int, /, projection_dim: int = 10_000, **_: object) -> int:
        """The d x M projection and the M x C ridge weights (`num_parameters()`'s count, from what
        was asked)."""
        return features * projection_dim + projection_dim * classes

    def num_parameters(self) -> int:
        return int(self.projection_.numel() + self.weights_.numel())

    def state_bytes(self) -> int:
        """What it carries from task to task: the ridge system in its smaller form (the projected
        rows and targets while fewer than M, then the M x M Gram and M x C targets, float64; the
        d x M projection is redrawn from its seed, the weights solved from the system)."""
        return self.system_.nbytes()


def ridge_solve(
    gram: torch.Tensor, targets: torch.Tensor, ridge: float, run: linalg.Run | None = None
) -> torch.Tensor:
    """W = (G + ridge I)^-1 Q: `closed_form.shifted_solve` (a Cholesky, tiled on a CPU on `run`'s
    threads or `linalg_threads()` of its own; where it fails in floating point, as a ridge of 1e-8
    drowning in the rounding of a singular G, an LU solve of the same system)."""
    if run is None:
        with linalg.workers(device=gram.device) as own:
            return closed_form.shifted_solve(gram, targets, ridge, own)
    return closed_form.shifted_solve(gram, targets, ridge, run)


def ridge_path(h: torch.Tensor, y: torch.Tensor, ridges: tuple[float, ...]) -> dict[float, torch.Tensor]:
    """Ridge solutions for many ridges from one decomposition: with H = U S V^T,
    W(l) = V diag(s / (s^2 + l)) U^T Y. Same numbers as one solve per ridge, at the cost of one SVD
    (of H when it has fewer rows than columns, else an eigendecomposition of the M x M Gram), on
    one thread (LAPACK's threads would split its sums)."""
    with linalg.single_threaded(h.device):
        if h.shape[0] > h.shape[1]:
            evals, evecs = torch.linalg.eigh(h.T @ h)
            projected = evecs.T @ (h.T @ y)
            return {ridge: evecs @ (projected / (evals + ridge)[:, None]) for ridge in ridges}
        u, s, vh = torch.linalg.svd(h, full_matrices=False)
        uty = u.T @ y
        return {ridge: vh.T @ ((s / (s**2 + ridge))[:, None] * uty) for ridge in ridges}


class JointProbe:
    """Softmax regression on standardised features, full-batch L-BFGS, warm-started stage to stage.
    A reference, not a continual method: it sees every seen class's training data at once."""

    incremental = False
    deterministic = True
    runs_by_default = True
    reference = "sees every task at once"
    label = "joint linear probe"

    def __init__(self, weight_decay: float = 1e-4, max_iter: int = 100, device: str | torch.device = "cpu"):
        self.weight_decay = weight_decay
        self.max_iter = max_iter
        self.device = device

    @staticmethod
    def work(shape: object, max_iter: int = 100, **_: object) -> tuple[float, str, int]:
        """Its arithmetic and optimizer calls (a time estimate's, as RanPAC's): at each stage, L-BFGS
        on every seen row, at most `max_iter` iterations of about 1.25 closure calls, each a forward
        and a backward pass (6 flops per row, feature and seen class)."""
        train, dim = shape.train, shape.dim  # type: ignore[attr-defined]
        per_class = shape.classes / max(len(train), 1)  # type: ignore[attr-defined]
        calls = int(1.25 * max_iter)
        flops = sum(calls * 6 * sum(train[: t + 1]) * dim * per_class * (t + 1) for t in range(len(train)))
        return flops, "float32", calls * len(train)

    @linalg.on_one_thread  # a serial chain of small steps
    def fit(self, features: Array, labels: Array) -> JointProbe:
        x = as_tensor(features, self.device)
        labels = as_labels(labels)
        y = torch.from_numpy(labels).long().to(x.device)
        # standardised at any scale: each column first over the power of two above its largest
        # entry (exact: the same bits where nothing overflowed), a constant column over 1 (an
        # absolute floor, 1e-6, made every feature x1e-30 constant)
        self.peak_ = binary_peak(x, dim=0)
        x = (x.double() / self.peak_).float()
        spread = x.std(0)
        self.mean_, self.scale_ = x.mean(0), torch.where(spread > 0, spread, torch.ones_like(spread))
        x = (x - self.mean_) / self.scale_
        n_classes = int(labels.max()) + 1
        weight = torch.zeros(n_classes, x.shape[1], device=x.device)
        bias = torch.zeros(n_classes, device=x.device)
        if hasattr(self, "weight_"):  # warm start: old rows kept, new classes start at zero
            weight[: len(self.weight_)] = self.weight_
            bias[: len(self.bias_)] = self.bias_
        weight.requires_grad_(True)
        bias.requires_grad_(True)
        optimizer = torch.optim.LBFGS(
            [weight, bias], lr=1.0, max_iter=self.max_iter, history_size=20, line_search_fn="strong_wolfe"
        )

        def closure() -> torch.Tensor:
            optimizer.zero_grad()
            loss = F.cross_entropy(x @ weight.T + bias, y) + 0.5 * self.weight_decay * (weight**2).sum()
            loss.backward()
            return loss

        optimizer.step(closure)
        self.weight_, self.bias_ = weight.detach(), bias.detach()
        return self

    @linalg.on_one_thread
    def predict(self, features: Array) -> np.ndarray:
        x = (as_tensor(features, self.device, torch.float64) / self.peak_).float()
        x = (x - self.mean_) / self.scale_
        return top_class(x @ self.weight_.T + self.bias_)  # a tie counts as wrong

    @staticmethod
    def parameters_for(features: int, classes: int, /, **_: object) -> int:
        """The C x d weights and C biases (`num_parameters()`'s count, from what was asked)."""
        return classes * features + classes

    def num_parameters(self) -> int:
        return int(self.weight_.numel() + self.bias_.numel())
