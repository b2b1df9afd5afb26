"""Baselines on the frozen features (method.md §7), as estimators: `__init__` stores arguments,
`partial_fit` learns one task and returns self, `predict` gives plain class-id arrays, fitted
state ends in `_`.

- SimpleCIL: the class means are the cosine classifier; nothing is trained.
- RanPAC: a fixed random ReLU projection to M dimensions, then ridge regression onto one-hot
  targets from Gram matrices accumulated task by task (exactly the joint ridge solution over all
  data seen, whatever the order). The ridge is chosen once, on the first task's data, and then
  kept. This is RanPAC without its first-session adapter training: the backbone stays frozen.
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
from tosca_heads.method import linalg
from tosca_heads.method.baseline_registry import Interval, Param

RANPAC_RIDGES = tuple(10.0**k for k in range(-8, 14))  # RanPAC's grid: 1e-8 .. 1e13
RANPAC_RULE = "RanPAC's rule (least held-out MSE on a seeded 80/20 split of the first task)"
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
        x, y = as_tensor(features, self.device), as_labels(labels)
        classes = np.unique(y)
        known = getattr(self, "prototypes_", torch.zeros(0, x.shape[1], device=x.device))
        grown = torch.zeros(max(len(known), int(classes.max()) + 1), x.shape[1], device=x.device)
        grown[: len(known)] = known
        for c in classes:
            grown[c] = x[torch.from_numpy(y == c).to(x.device)].mean(0)
        self.prototypes_ = grown
        return self

    @linalg.on_one_thread
    def decision_function(self, features: Array) -> np.ndarray:
        """Cosine similarity of each row to each class's prototype: [n, classes]."""
        x = F.normalize(as_tensor(features, self.device), dim=1)
        w = F.normalize(self.prototypes_, dim=1)
        return (x @ w.T).cpu().numpy()

    def predict(self, features: Array) -> np.ndarray:
        return self.decision_function(features).argmax(1)

    def num_parameters(self) -> int:
        return int(self.prototypes_.numel())

    def state_bytes(self) -> int:
        """The C x d prototypes (float32)."""
        return int(self.prototypes_.numel() * self.prototypes_.element_size())


class RanPAC:
    """Random-projection ridge classifier with Gram matrices G = H^T H and Q = H^T Y kept across tasks.

    On a CPU its projections, Gram sums, Cholesky factor and solves are `linalg`'s tiled ones, on
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
    label = "RanPAC"
    tuned = "ridge"  # chosen by its paper's rule (`ridge_`, `tuned_by_`); the run's validation split plays no part
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
    def check_fits(dim: int, projection_dim: int, **_: object) -> None:
        """The M x M float64 Gram matrix (with its regularised copy and Cholesky factor) must fit."""
        m = projection_dim
        require_memory(f"RanPAC with M = {m:,}", 3 * 8 * m * m + 4 * m * dim, "lower --ranpac-projection-dim")

    @staticmethod
    def work(shape: object, projection_dim: int, **_: object) -> tuple[float, str]:
        """Its arithmetic on a stream of `shape` (`experiments.estimate.TaskShape`) and the precision
        it runs in: what a time estimate divides by this machine's rate. Its keywords are always
        given (`baseline_registry.arguments`): the defaults are `__init__`'s alone."""
        train, test, dim = shape.train, shape.test, shape.dim  # type: ignore[attr-defined]
        m, per_class = projection_dim, shape.classes / max(len(train), 1)  # type: ignore[attr-defined]
        flops = 0.0
        for t, rows in enumerate(train):
            seen_test = sum(test[: t + 1])
            flops += 2 * rows * dim * m + 2 * rows * m * m  # projection, Gram matrix
            flops += 2 * m**3 / 3  # Cholesky (at about half a product's rate) and its solve
            flops += 2 * seen_test * dim * m + 2 * seen_test * m * per_class * (t + 1)  # scored
        fit_rows = int(0.8 * train[0])  # the ridge, chosen on the first task
        flops += 6 * fit_rows**2 * m if fit_rows < m else 10 * m**3 / 3
        return flops, "float64"

    def __init__(
        self,
        projection_dim: int = 10_000,
        ridge: float | None = None,
        ridges: tuple[float, ...] = RANPAC_RIDGES,
        validation_fraction: float = 0.2,
        seed: int = 0,
        device: str | torch.device = "cpu",
    ):
        self.projection_dim = projection_dim
        self.ridge = ridge
        self.ridges = ridges
        self.validation_fraction = validation_fraction
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
            m = self.projection_dim
            self.gram_ = torch.zeros(m, m, dtype=torch.float64, device=self.projection_.device)
            self.targets_ = torch.zeros(m, 0, dtype=torch.float64, device=self.projection_.device)
        device = self.projection_.device
        with linalg.workers(device=device) as run:
            blocks = self._projected(features, run)
            n_classes = max(self.targets_.shape[1], int(labels.max()) + 1)
            y = F.one_hot(torch.from_numpy(labels).long(), n_classes).double().to(device)
            if not hasattr(self, "ridge_"):
                self.ridge_, self.ridge_losses_ = (
                    (self.ridge, {})
                    if self.ridge is not None
                    else self._select_ridge(torch.cat([torch.cat(tiles, 1) for tiles in blocks]), y)
                )
                self.tuned_by_ = "given" if self.ridge is not None else RANPAC_RULE
            self.targets_ = F.pad(self.targets_, (0, n_classes - self.targets_.shape[1]))
            linalg.add_gram(self.gram_, blocks, run)
            linalg.add_cross(self.targets_, blocks, linalg.row_blocks(y), run)
            self.weights_ = ridge_solve(self.gram_, self.targets_, self.ridge_, run)
        return self

    def _select_ridge(self, h: torch.Tensor, y: torch.Tensor) -> tuple[float, dict[float, float]]:
        """RanPAC's rule: fit on 80% of the first task, keep the ridge with the least held-out MSE."""
        order = torch.randperm(len(h), generator=torch.Generator().manual_seed(self.seed)).to(h.device)
        n_fit = min(len(h) - 1, int(len(h) * (1 - self.validation_fraction)))
        fit, val = order[:n_fit], order[n_fit:]
        losses = {
            ridge: float(((h[val] @ w - y[val]) ** 2).mean())
            for ridge, w in ridge_path(h[fit], y[fit], self.ridges).items()
        }
        return min(losses, key=losses.__getitem__), losses

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
        return self.decision_function(features).argmax(1)

    def num_parameters(self) -> int:
        return int(self.projection_.numel() + self.weights_.numel())

    def state_bytes(self) -> int:
        """The M x M Gram matrix and the M x C targets (float64): what it carries from task to task
        (the d x M projection is redrawn from its seed; the weights are solved from the two)."""
        return int(self.gram_.numel() * 8 + self.targets_.numel() * 8)


def ridge_solve(
    gram: torch.Tensor, targets: torch.Tensor, ridge: float, run: linalg.Run | None = None
) -> torch.Tensor:
    """W = (G + ridge I)^-1 Q by Cholesky (on a CPU `linalg`'s tiled one, on `run`'s threads, or on
    `linalg_threads()` of its own). G + ridge I is positive definite in exact arithmetic, but
    with fewer rows than M the Gram matrix is singular and a ridge of 1e-8 can drown in its
    rounding (a factorisation that fails): then by G's eigendecomposition (LAPACK on one thread),
    its eigenvalues clamped at 0, which is the same solution where both exist."""
    if gram.device.type != "cpu":
        regularised = gram + ridge * torch.eye(len(gram), dtype=gram.dtype, device=gram.device)
        factor, info = torch.linalg.cholesky_ex(regularised)
        if int(info) == 0:
            return torch.cholesky_solve(targets, factor)
    elif run is None:
        with linalg.workers() as own:
            return ridge_solve(gram, targets, ridge, own)
    else:
        tiles = linalg.cholesky(gram, ridge, run)
        if tiles is not None:
            return linalg.cholesky_solve(tiles, targets, run)
    with linalg.single_threaded(gram.device):
        evals, evecs = torch.linalg.eigh(gram)
        return evecs @ ((evecs.T @ targets) / (evals.clamp_min(0) + ridge)[:, None])


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
        self.mean_, self.scale_ = x.mean(0), x.std(0).clamp_min(1e-6)
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
        x = (as_tensor(features, self.device) - self.mean_) / self.scale_
        return (x @ self.weight_.T + self.bias_).argmax(1).cpu().numpy()

    def num_parameters(self) -> int:
        return int(self.weight_.numel() + self.bias_.numel())
