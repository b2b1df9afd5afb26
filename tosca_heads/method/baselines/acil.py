"""ACIL: analytic class-incremental learning (Zhuang et al., NeurIPS 2022): a random ReLU buffer,
then ridge regression onto one-hot targets by recursive least squares."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from tosca_foundation.limits import require_memory
from tosca_heads.method import linalg
from tosca_heads.method.baseline_estimators import Array, as_labels, as_tensor
from tosca_heads.method.baseline_registry import Interval, Param
from tosca_heads.method.scale import within_reach
from tosca_heads.method.ties import top_class


def draw_buffer(dim: int, size: int, seed: int) -> torch.Tensor:
    """The authors' RandomBuffer weight, transposed to d x D: torch.nn.Linear's default
    initialisation (Kaiming uniform with a = sqrt(5), i.e. U(-1/sqrt(d), 1/sqrt(d))), no bias, in
    float64 (ACIL builds its buffer with dtype=torch.double); drawn on the CPU from `seed`."""
    gen = torch.Generator().manual_seed(seed)
    bound = 1.0 / math.sqrt(dim)
    weight = torch.rand(size, dim, generator=gen, dtype=torch.float64) * (2 * bound) - bound
    return weight.T.contiguous()


def expanded(x: torch.Tensor, buffer: list[torch.Tensor], activation, run: linalg.Run) -> torch.Tensor:
    """activation(x W_buf) in float64 (n x D): one product per (row block, column tile of the
    buffer) on `run`'s threads, joined."""
    blocks = linalg.row_blocks(x)
    pairs = [(b, t) for b in range(len(blocks)) for t in range(len(buffer))]
    flat = run(lambda pair: activation(blocks[pair[0]] @ buffer[pair[1]]), pairs)
    if not flat:
        return torch.zeros(0, sum(len(t.T) for t in buffer), dtype=torch.float64, device=x.device)
    return torch.cat(
        [torch.cat(flat[b * len(buffer) : (b + 1) * len(buffer)], 1) for b in range(len(blocks))]
    )


CHUNK = 4096  # rows per recursive update: the authors' --IL-batch-size (a bound on memory only)


class RecursiveStream:
    """One analytic linear stream as the authors' RecursiveLinear: R = (H^T H + gamma I)^-1 over
    the rows seen, R_0 = I / gamma, updated per chunk of rows H by Woodbury's identity
    R <- R - R H^T (I + H R H^T)^-1 H R, and the weights W = R Q with Q = H^T Y summed (the
    authors update W += R H^T (Y - H W): the same matrix in exact arithmetic). Its D x D products
    are `linalg`'s tiled ones (R H^T as a cross product over R's row blocks, the correction as a
    Gram sum of L^-1 (R H^T)^T with L L^T = I + H R H^T): the same bits on any thread count."""

    def __init__(
        self,
        size: int,
        gamma: float,
        device: torch.device,
        said: tuple[str, str, float] = ("ACIL", "gamma", 0.0),
    ):
        self.gamma = gamma
        self.said = said  # (method, keyword, its value) that set gamma, for `scale.within_reach`'s line
        self.mass = 0.0  # |H|_F^2 over every row learnt: R holds 1 / gamma and 1 / mass at once
        self.inverse = torch.eye(size, dtype=torch.float64, device=device) / gamma
        self.cross = torch.zeros(size, 0, dtype=torch.float64, device=device)
        self.weights = self.cross.clone()

    def _times_inverse(self, right: torch.Tensor, run: linalg.Run) -> torch.Tensor:
        """R right (D x k), R symmetric: R^T right as a cross product over R's row blocks."""
        out = torch.zeros(len(self.inverse), right.shape[1], dtype=torch.float64, device=right.device)
        linalg.add_cross(out, linalg.tiled(self.inverse), linalg.row_blocks(right), run)
        return out

    def add(self, h: torch.Tensor, targets: torch.Tensor, run: linalg.Run) -> None:
        """Learn rows h (n x D) with targets (n x C, C at least the classes so far); W updated."""
        method, keyword, value = self.said
        self.mass += float(h.pow(2).sum())
        within_reach(method, keyword, value or self.gamma, self.mass, self.gamma)  # before any update
        if targets.shape[1] > self.cross.shape[1]:
            self.cross = F.pad(self.cross, (0, targets.shape[1] - self.cross.shape[1]))
        for rows in linalg.spans(len(h), CHUNK):
            chunk = h[rows]
            projected = self._times_inverse(chunk.T.contiguous(), run)  # R H^T, D x n
            kernel = chunk @ projected  # H R H^T, on this (pinned) thread
            kernel.diagonal().add_(1.0)
            factor = torch.linalg.cholesky(kernel)
            half = torch.linalg.solve_triangular(factor, projected.T.contiguous(), upper=False)  # L^-1 H R
            self.inverse.neg_()  # R - half^T half, as -(-R + half^T half): add_gram adds, negation is exact
            linalg.add_gram(self.inverse, linalg.tiled(half), run)
            self.inverse.neg_()
            linalg.add_cross(self.cross, linalg.tiled(chunk), linalg.row_blocks(targets[rows]), run)
        self.weights = self._times_inverse(self.cross, run)

    def scores(self, h: torch.Tensor) -> torch.Tensor:
        """H W, one product per row block, on this (pinned) thread."""
        rows = [block @ self.weights for block in linalg.row_blocks(h)]
        return torch.cat(rows) if rows else torch.zeros(0, self.weights.shape[1], dtype=torch.float64)

    def numel(self) -> int:
        return int(self.inverse.numel() + self.cross.numel() + self.weights.numel())


class ACIL:
    """Analytic class-incremental learning: a random ReLU buffer, then ridge regression onto one-hot targets by recursive least squares.

    H = ReLU(X W_buf), W_buf a fixed d x D random matrix (torch.nn.Linear's initialisation,
    U(-1/sqrt(d), 1/sqrt(d)), no bias; D = 8192, the authors' buffer size for CIFAR-100 and their
    default); the classifier W = (H^T H + gamma I)^-1 H^T Y over every row seen (gamma = 0.1, the
    authors' value on CIFAR-100 and ImageNet: fixed, not tuned), which their recursive update of
    R = (H^T H + gamma I)^-1 and W reaches task by task ("absolute memorization": the joint
    solution whatever the order), done here as theirs (Woodbury per chunk of at most 4096 rows,
    their --IL-batch-size), its D x D products tiled. Zhuang, Weng, Wei, Xie, Toh, Lin, "ACIL: Analytic
    Class-Incremental Learning with Absolute Memorization and Privacy Protection", NeurIPS 2022
    (NeurIPS 35, 11602-11614); authors' code github:ZHUANGHP/Analytic-continual-learning,
    analytic/ACIL.py, Buffer.py, AnalyticLinear.py (RecursiveLinear). The backbone's base
    training on the first task is not done: the backbone stays frozen. State: the buffer (d x D),
    R (D x D float64), Q = H^T Y and W (D x C float64); never samples."""

    paper = (  # the paper it follows, as `tosca list` and docs/baselines.md cite it
        "Zhuang, Weng, Wei, Xie, Toh & Lin, ACIL: Analytic Class-Incremental Learning with "
        "Absolute Memorization and Privacy Protection, NeurIPS 2022, arXiv:2205.14922"
    )
    incremental = True
    deterministic = False
    runs_by_default = False
    order_free = True  # R and Q are those of the joint ridge solution on the buffer, whatever the order
    recurring_classes = True  # a class's rows may come in several calls: R and Q sum over rows
    label = "ACIL"
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
        """R (D x D float64) and a tiled copy of it must fit."""
        d = buffer_size
        require_memory(f"ACIL with D = {d:,}", 2 * 8 * d * d + 8 * d * dim, "lower --acil-buffer-size")

    @staticmethod
    def work(shape: object, buffer_size: int = 8192, **_: object) -> tuple[float, str]:
        """The buffer, per task R H^T (2 n D^2) and the correction's Gram sum (n D^2, one triangle),
        W = R Q, scoring."""
        train, test, dim = shape.train, shape.test, shape.dim  # type: ignore[attr-defined]
        m, per_class = buffer_size, shape.classes / max(len(train), 1)  # type: ignore[attr-defined]
        flops = 0.0
        for t, rows in enumerate(train):
            seen_test = sum(test[: t + 1])
            flops += 2 * rows * dim * m + 3 * rows * m * m + 2 * rows**2 * m + 2 * m * m * per_class * (t + 1)
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
            self.main_ = RecursiveStream(
                self.buffer_size, self.gamma, self.buffer_.device, ("ACIL", "gamma", self.gamma)
            )

    def expand(self, features: Array, run: linalg.Run) -> torch.Tensor:
        """ReLU(x W_buf) in float64."""
        return expanded(as_tensor(features, self.buffer_.device, torch.float64), self.tiles_, torch.relu, run)

    def partial_fit(self, features: Array, labels: Array) -> ACIL:
        labels = as_labels(labels)
        self._start(features.shape[1])
        classes = max(self.main_.cross.shape[1], int(labels.max()) + 1)
        y = F.one_hot(torch.from_numpy(labels).long(), classes).double().to(self.buffer_.device)
        with linalg.workers(device=self.buffer_.device) as run:
            self.main_.add(self.expand(features, run), y, run)
        return self

    def decision_function(self, features: Array) -> np.ndarray:
        with linalg.workers(device=self.buffer_.device) as run:
            return self.main_.scores(self.expand(features, run)).cpu().numpy()

    def predict(self, features: Array) -> np.ndarray:
        return top_class(self.decision_function(features))  # a tie counts as wrong

    @staticmethod
    def parameters_for(features: int, classes: int, /, buffer_size: int = 8192, **_: object) -> int:
        """The d x m random buffer and the m x C weights (`num_parameters()`'s count, from what
        was asked)."""
        return features * buffer_size + buffer_size * classes

    def num_parameters(self) -> int:
        return int(self.buffer_.numel() + self.main_.weights.numel())

    def state_bytes(self) -> int:
        return int(8 * (self.buffer_.numel() + self.main_.numel()))
