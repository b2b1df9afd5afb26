"""GACL: exemplar-free generalized analytic continual learning (Zhuang, Chen, Fang, He, Tong, Wei,
Zeng & Chen, NeurIPS 2024, arXiv:2403.15706), the analytic learner made for the blurry (Si-Blurry)
setting, where a class's images arrive in several tasks and new classes appear mid-task."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from tosca_foundation.limits import require_memory
from tosca_heads.method import linalg
from tosca_heads.method.baseline_estimators import Array, as_labels, as_tensor
from tosca_heads.method.baseline_registry import Interval, Param
from tosca_heads.method.baselines.acil import RecursiveStream, draw_buffer, expanded
from tosca_heads.method.ties import top_class


class GACL:
    """Generalized analytic continual learning: a random ReLU buffer, then recursive least squares onto one-hot targets of every class exposed so far.

    The authors' learner (github CHEN-YIZHU/GACL, methods/GACL.py; models/pretrained.py's VITACIL):
    H = ReLU(X W_buf), W_buf d x `buffer_size` with torch.nn.Linear's initialisation and no bias
    (their `Hidden`, 5,000 on CIFAR-100, ImageNet-R and Tiny-ImageNet), R_0 = I / gamma (their
    `Gamma`, 100), and per online batch R <- R - R H^T (I + H R H^T)^-1 H R, W <- W + R H^T (Y - H W)
    with W padded by zero columns when a batch exposes a new class (their exposed-class label gain:
    the weight-invariant property, so W is the joint ridge solution over every row seen, whatever
    the order or the blur). Each batch is fitted `online_iter` times (their ONLINE_ITER = 3): in
    exact arithmetic the joint ridge with each row counted that often, W = (H^T H + gamma/k I)^-1
    H^T Y, which is what is solved here (ACIL's `RecursiveStream`, tiled, the same bits on any
    thread count). Its labels may recur across calls: it never needs a class's rows in one task."""

    incremental = True
    deterministic = False
    runs_by_default = False
    order_free = True
    recurring_classes = True  # a class's rows may come in several calls (blurry, domain-incremental)
    label = "GACL"
    paper = (
        "Zhuang, Chen, Fang, He, Tong, Wei, Zeng & Chen, GACL: Exemplar-Free Generalized Analytic "
        "Continual Learning, NeurIPS 2024, arXiv:2403.15706"
    )
    params = (
        Param(
            "buffer_size",
            int,
            "GACL's random buffer size (the authors' Hidden: 5000).",
            valid=Interval(1, None),
            said="D = {:,}",
        ),
        Param(
            "gamma",
            float,
            "GACL's regularisation (the authors' Gamma: 100).",
            valid=Interval(0, None, closed="neither"),
            said="gamma = {:g}",
        ),
        Param(
            "online_iter",
            int,
            "Times each batch is fitted (the authors' online_iter: 3).",
            valid=Interval(1, None),
            said="{} passes",
        ),
        Param(
            "seed", int, "Seed of GACL's random buffer.", valid=Interval(0, 2**32, closed="left"), seed=True
        ),
    )

    @staticmethod
    def check_fits(dim: int, buffer_size: int = 5000, classes: int = 0, **_: object) -> None:
        """R (D x D float64) and a tiled copy of it must fit."""
        d = buffer_size
        require_memory(f"GACL with D = {d:,}", 2 * 8 * d * d + 8 * d * dim, "lower --gacl-buffer-size")

    @staticmethod
    def work(shape: object, buffer_size: int = 5000, **_: object) -> tuple[float, str]:
        """ACIL's arithmetic on a buffer of `buffer_size`."""
        from tosca_heads.method.baselines.acil import ACIL

        return ACIL.work(shape, buffer_size=buffer_size)

    def __init__(
        self,
        buffer_size: int = 5000,
        gamma: float = 100.0,
        online_iter: int = 3,
        seed: int = 0,
        device: str | torch.device = "cpu",
    ):
        self.buffer_size = buffer_size
        self.gamma = gamma
        self.online_iter = online_iter
        self.seed = seed
        self.device = device

    def _start(self, dim: int) -> None:
        if not hasattr(self, "buffer_"):
            self.buffer_ = draw_buffer(dim, self.buffer_size, self.seed).to(self.device)
            self.tiles_ = linalg.column_tiles(self.buffer_)
            self.main_ = RecursiveStream(
                self.buffer_size,
                self.gamma / self.online_iter,
                self.buffer_.device,
                ("GACL", "gamma", self.gamma),
            )

    def expand(self, features: Array, run: linalg.Run) -> torch.Tensor:
        """ReLU(x W_buf) in float64 (the authors' `expansion`)."""
        return expanded(as_tensor(features, self.buffer_.device, torch.float64), self.tiles_, torch.relu, run)

    def partial_fit(self, features: Array, labels: Array) -> GACL:
        """Learn rows of any classes, seen before or not (class ids as they were first exposed)."""
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
    def parameters_for(features: int, classes: int, /, buffer_size: int = 5000, **_: object) -> int:
        """The d x m random buffer and the m x C weights (`num_parameters()`'s count, from what
        was asked)."""
        return features * buffer_size + buffer_size * classes

    def num_parameters(self) -> int:
        return int(self.buffer_.numel() + self.main_.weights.numel())

    def state_bytes(self) -> int:
        return int(8 * (self.buffer_.numel() + self.main_.numel()))
