"""ACIL: analytic class-incremental learning (Zhuang et al., NeurIPS 2022): a random ReLU buffer,
then the ridge solution that recursive least squares reaches, kept as Gram matrices."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from featcache.foundation.limits import require_memory
from tosca_heads.method import linalg
from tosca_heads.method.baseline_estimators import Array, as_labels, as_tensor, ridge_solve
from tosca_heads.method.baseline_registry import Interval, Param


def draw_buffer(dim: int, size: int, seed: int) -> torch.Tensor:
    """The authors' RandomBuffer weight, transposed to d x D: torch.nn.Linear's default
    initialisation (Kaiming uniform with a = sqrt(5), i.e. U(-1/sqrt(d), 1/sqrt(d))), no bias, in
    float64 (ACIL builds its buffer with dtype=torch.double); drawn on the CPU from `seed`."""
    gen = torch.Generator().manual_seed(seed)
    bound = 1.0 / math.sqrt(dim)
    weight = torch.rand(size, dim, generator=gen, dtype=torch.float64) * (2 * bound) - bound
    return weight.T.contiguous()


def expanded_blocks(
    x: torch.Tensor, buffer: list[torch.Tensor], activation, run: linalg.Run
) -> list[list[torch.Tensor]]:
    """activation(x W) in float64, as row blocks (linalg.ROWS rows) of column tiles (the buffer's
    tiles, linalg.TILE wide): one product per (block, tile) on `run`'s threads."""
    blocks = linalg.row_blocks(x)
    pairs = [(b, t) for b in range(len(blocks)) for t in range(len(buffer))]
    flat = run(lambda pair: activation(blocks[pair[0]] @ buffer[pair[1]]), pairs)
    return [flat[b * len(buffer) : (b + 1) * len(buffer)] for b in range(len(blocks))]


def joined(blocks: list[list[torch.Tensor]], size: int, device: torch.device) -> torch.Tensor:
    if not blocks:
        return torch.zeros(0, size, dtype=torch.float64, device=device)
    return torch.cat([torch.cat(tiles, 1) for tiles in blocks])


class RidgeStream:
    """One analytic linear stream: G = H^T H and Q = H^T Y summed over the rows seen and the
    weights W = (G + gamma I)^-1 Q, the matrix that the authors' RecursiveLinear reaches by
    recursive least squares (R = (G + gamma I)^-1 updated by Woodbury's identity, W += R H^T (Y -
    H W)); the same solution in exact arithmetic, here by `linalg`'s tiled Cholesky (the same bits
    on any thread count)."""

    def __init__(self, size: int, gamma: float, device: torch.device):
        self.gamma = gamma
        self.gram = torch.zeros(size, size, dtype=torch.float64, device=device)
        self.cross = torch.zeros(size, 0, dtype=torch.float64, device=device)
        self.weights = self.cross.clone()

    def widen(self, classes: int) -> None:
        if classes > self.cross.shape[1]:
            self.cross = F.pad(self.cross, (0, classes - self.cross.shape[1]))
            self.weights = F.pad(self.weights, (0, classes - self.weights.shape[1]))

    def add(self, blocks: list[list[torch.Tensor]], targets: torch.Tensor, run: linalg.Run) -> None:
        self.widen(targets.shape[1])
        linalg.add_gram(self.gram, blocks, run)
        linalg.add_cross(self.cross, blocks, linalg.row_blocks(targets), run)

    def solve(self, run: linalg.Run) -> None:
        self.weights = ridge_solve(self.gram, self.cross, self.gamma, run)

    def scores(self, blocks: list[list[torch.Tensor]]) -> torch.Tensor:
        """H W, one product per row block."""
        rows = [torch.cat(tiles, 1) @ self.weights for tiles in blocks]
        return torch.cat(rows) if rows else torch.zeros(0, self.weights.shape[1], dtype=torch.float64)

    def numel(self) -> int:
        return int(self.gram.numel() + self.cross.numel() + self.weights.numel())


class ACIL:
    """Analytic class-incremental learning: a random ReLU buffer, then ridge regression onto one-hot targets by recursive least squares.

    H = ReLU(X W_buf), W_buf a fixed d x D random matrix (torch.nn.Linear's initialisation,
    U(-1/sqrt(d), 1/sqrt(d)), no bias; D = 8192, the authors' buffer size for CIFAR-100 and their
    default); the classifier W = (H^T H + gamma I)^-1 H^T Y over every row seen (gamma = 0.1, the
    authors' value on CIFAR-100 and ImageNet: fixed, not tuned), which their recursive update of
    R = (H^T H + gamma I)^-1 and W reaches task by task ("absolute memorization": the joint
    solution whatever the order). Zhuang, Weng, Wei, Xie, Toh, Lin, "ACIL: Analytic
    Class-Incremental Learning with Absolute Memorization and Privacy Protection", NeurIPS 2022
    (arXiv 2205.14922); authors' code github:ZHUANGHP/Analytic-continual-learning,
    analytic/ACIL.py, Buffer.py, AnalyticLinear.py (RecursiveLinear). The backbone's base
    training on the first task is not done: the backbone stays frozen. State: the buffer (d x D),
    G = H^T H (D x D float64), Q = H^T Y and W (D x C float64); never samples."""

    incremental = True
    deterministic = False
    runs_by_default = False
    order_free = True  # G and Q are sums over rows: the joint ridge solution on the buffer
    label = "ACIL"
    paper = "Zhuang et al., ACIL: Analytic Class-Incremental Learning, NeurIPS 2022"
    params = (
        Param(
            "buffer_size",
            int,
            "ACIL's random buffer size D (the authors': 8192 on CIFAR-100, 16384 on ImageNet).",
            valid=Interval(1, None),
            said="D = {:,}",
        ),
        Param(
            "gamma",
            float,
            "ACIL's regularisation gamma (the authors': 0.1).",
            valid=Interval(0, None, closed="neither"),
            said="gamma = {:g}",
        ),
        Param(
            "seed", int, "Seed of ACIL's random buffer.", valid=Interval(0, 2**32, closed="left"), seed=True
        ),
    )

    @staticmethod
    def check_fits(dim: int, buffer_size: int = 8192, classes: int = 0, **_: object) -> None:
        """The D x D float64 Gram matrix and its Cholesky factor (with a copy) must fit."""
        d = buffer_size
        require_memory(f"ACIL with D = {d:,}", 3 * 8 * d * d + 8 * d * dim, "lower --acil-buffer-size")

    @staticmethod
    def work(shape: object, buffer_size: int = 8192, **_: object) -> tuple[float, str]:
        """As RanPAC's, with M = D: the buffer, the Gram sums, a Cholesky solve per task, scoring."""
        train, test, dim = shape.train, shape.test, shape.dim  # type: ignore[attr-defined]
        m, per_class = buffer_size, shape.classes / max(len(train), 1)  # type: ignore[attr-defined]
        flops = 0.0
        for t, rows in enumerate(train):
            seen_test = sum(test[: t + 1])
            flops += 2 * rows * dim * m + 2 * rows * m * m + 2 * m**3 / 3
            flops += 2 * seen_test * dim * m + 2 * seen_test * m * per_class * (t + 1)
        return flops, "float64"

    def __init__(
        self, buffer_size: int = 8192, gamma: float = 0.1, seed: int = 0, device: str | torch.device = "cpu"
    ):
        self.buffer_size = buffer_size
        self.gamma = gamma
        self.seed = seed
        self.device = device

    def _start(self, dim: int) -> None:
        if not hasattr(self, "buffer_"):
            self.buffer_ = draw_buffer(dim, self.buffer_size, self.seed).to(self.device)
            self.tiles_ = linalg.column_tiles(self.buffer_)
            self.main_ = RidgeStream(self.buffer_size, self.gamma, self.buffer_.device)

    def expand(self, features: Array, run: linalg.Run) -> list[list[torch.Tensor]]:
        """ReLU(x W_buf) in float64, as row blocks of column tiles."""
        return expanded_blocks(
            as_tensor(features, self.buffer_.device, torch.float64), self.tiles_, torch.relu, run
        )

    def partial_fit(self, features: Array, labels: Array) -> ACIL:
        labels = as_labels(labels)
        self._start(features.shape[1])
        classes = max(self.main_.cross.shape[1], int(labels.max()) + 1)
        y = F.one_hot(torch.from_numpy(labels).long(), classes).double().to(self.buffer_.device)
        with linalg.workers(device=self.buffer_.device) as run:
            self.main_.add(self.expand(features, run), y, run)
            self.main_.solve(run)
        return self

    def decision_function(self, features: Array) -> np.ndarray:
        with linalg.workers(device=self.buffer_.device) as run:
            return self.main_.scores(self.expand(features, run)).cpu().numpy()

    def predict(self, features: Array) -> np.ndarray:
        return self.decision_function(features).argmax(1)

    def num_parameters(self) -> int:
        return int(self.buffer_.numel() + self.main_.weights.numel())

    def state_bytes(self) -> int:
        return int(8 * (self.buffer_.numel() + self.main_.numel()))
