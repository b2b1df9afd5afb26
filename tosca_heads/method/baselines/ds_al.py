"""DS-AL: dual-stream analytic learning (Zhuang et al., AAAI 2024): ACIL's main stream plus a
compensation stream fitted to the main stream's residuals on the new classes."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from tosca_foundation.limits import require_memory
from tosca_heads.method import linalg
from tosca_heads.method.baseline_estimators import Array, as_labels, as_tensor
from tosca_heads.method.baseline_registry import Interval, Param
from tosca_heads.method.baselines.acil import ACIL, RecursiveStream, draw_buffer, expanded
from tosca_heads.method.ties import top_class

COMPENSATION_GRID = tuple(round(0.1 * k, 1) for k in range(21))  # the authors' advice: a grid over [0, 2]


def _identity(values: torch.Tensor) -> torch.Tensor:
    return values


class DSAL:
    """Dual-stream analytic learning: ACIL's ReLU stream plus a tanh stream fitted to its residuals on the new classes.

    One random linear buffer Z = X W_buf (d x D, torch.nn.Linear's initialisation, no bias, D =
    8192); the main stream is ACIL's ridge on ReLU(Z) onto one-hot targets (gamma_main = 0.1);
    the compensation stream is a ridge on tanh(Z) (gamma_comp = 0.1) onto the main stream's
    residuals Y - ReLU(Z) W_main, computed with the main stream just updated on the same rows,
    with the columns of the classes learnt before this task set to 0 ("previous label
    cleansing"); scores ReLU(Z) W_main + C tanh(Z) W_comp. Zhuang, He, Tong, Zeng, Chen, Lin,
    "DS-AL: A Dual-Stream Analytic Learning for Exemplar-Free Class-Incremental Learning", AAAI
    2024 (doi 10.1609/aaai.v38i15.29670); authors' code github:ZHUANGHP/Analytic-continual-learning,
    analytic/DSAL.py. The authors learn a task in mini-batches of --IL-batch-size (4096 in their
    commands) rows, each residual taken after that mini-batch's main update: `batch_size` does
    the same, on the task's rows in their given order (theirs are shuffled). C is chosen on the
    validation split (grid 0, 0.1, .., 2, the authors' advice: "grid search in [0, 2]"), else
    their default 1. State: the buffer (d x D), two D x D float64 inverses R (as ACIL's), their D
    x C cross products and weights; never samples."""

    paper = (  # the paper it follows, as `tosca list` and docs/baselines.md cite it
        "Zhuang, He, Tong, Zeng, Chen & Lin, DS-AL: A Dual-Stream Analytic Learning for "
        "Exemplar-Free Class-Incremental Learning, AAAI 2024, arXiv:2403.17503"
    )
    incremental = True
    deterministic = False
    runs_by_default = False
    order_free = False  # the compensation targets are residuals of the main stream at each task
    label = "DS-AL"
    tuned = "compensation"
    params = (
        Param(
            "buffer_size",
            int,
            "DS-AL's random buffer size D (the authors': 8192 on CIFAR-100, 16384 on ImageNet).",
            valid=Interval(1, None),
            said="D = {:,}",
        ),
        Param(
            "gamma_main",
            float,
            "DS-AL's main-stream regularisation (the authors': 0.1).",
            valid=Interval(0, None, closed="neither"),
        ),
        Param(
            "gamma_comp",
            float,
            "DS-AL's compensation-stream regularisation (the authors': 0.1).",
            valid=Interval(0, None, closed="neither"),
        ),
        Param(
            "compensation",
            float,
            "DS-AL's compensation ratio C without a validation split (the authors' default: 1).",
            valid=Interval(0, None),
            said="C = {:g}",
        ),
        Param(
            "tune_compensation",
            bool,
            "Choose C on the validation split when the run has one (grid 0, 0.1, .., 2).",
        ),
        Param(
            "batch_size",
            int,
            "Rows per recursive update within a task (the authors' --IL-batch-size: 4096).",
            valid=Interval(1, None),
        ),
        Param(
            "seed", int, "Seed of DS-AL's random buffer.", valid=Interval(0, 2**32, closed="left"), seed=True
        ),
    )

    @staticmethod
    def check_fits(dim: int, buffer_size: int = 8192, classes: int = 0, **_: object) -> None:
        """Two D x D float64 inverses R and a tiled copy of one must fit."""
        d = buffer_size
        require_memory(f"DS-AL with D = {d:,}", 3 * 8 * d * d + 8 * d * dim, "lower --ds-al-buffer-size")

    @staticmethod
    def work(
        shape: object, buffer_size: int = 8192, batch_size: int = 4096, **_: object
    ) -> tuple[float, str]:
        """ACIL's twice (two recursive streams on the same buffer), less one buffer product."""
        flops, precision = ACIL.work(shape, buffer_size=buffer_size)
        return 2 * flops, precision

    def __init__(
        self,
        buffer_size: int = 8192,
        gamma_main: float = 0.1,
        gamma_comp: float = 0.1,
        compensation: float = 1.0,
        tune_compensation: bool = True,
        batch_size: int = 4096,
        seed: int = 0,
        device: str | torch.device = "cpu",
    ):
        self.buffer_size = buffer_size
        self.gamma_main = gamma_main
        self.gamma_comp = gamma_comp
        self.compensation = compensation
        self.tune_compensation = tune_compensation
        self.batch_size = batch_size
        self.seed = seed
        self.device = device

    def _start(self, dim: int) -> None:
        if not hasattr(self, "buffer_"):
            self.buffer_ = draw_buffer(dim, self.buffer_size, self.seed).to(self.device)
            self.tiles_ = linalg.column_tiles(self.buffer_)
            device = self.buffer_.device
            self.main_ = RecursiveStream(
                self.buffer_size, self.gamma_main, device, ("DS-AL", "gamma_main", self.gamma_main)
            )
            self.comp_ = RecursiveStream(
                self.buffer_size, self.gamma_comp, device, ("DS-AL", "gamma_comp", self.gamma_comp)
            )
            self.compensation_ = self.compensation
            self.tuned_by_ = "the authors' default"
            self.largest_residual_ = 0.0

    def streams(self, features: Array, run: linalg.Run) -> tuple[torch.Tensor, torch.Tensor]:
        """ReLU(Z) and tanh(Z), Z = x W_buf in float64."""
        z = expanded(as_tensor(features, self.buffer_.device, torch.float64), self.tiles_, _identity, run)
        return torch.relu(z), torch.tanh(z)

    def partial_fit(self, features: Array, labels: Array) -> DSAL:
        labels = as_labels(labels)
        self._start(features.shape[1])
        x = as_tensor(features, self.buffer_.device, torch.float64)
        previous = self.main_.cross.shape[1]
        classes = max(previous, int(labels.max()) + 1)
        with linalg.workers(device=self.buffer_.device) as run:
            for start in range(0, len(labels), self.batch_size):
                rows = slice(start, start + self.batch_size)
                y = F.one_hot(torch.from_numpy(labels[rows]).long(), classes).double().to(x.device)
                main, comp = self.streams(x[rows], run)
                self.main_.add(main, y, run)
                residual = y - self.main_.scores(main)
                residual[:, :previous] = 0  # previous label cleansing
                # what the compensation stream is given to learn, said beside the figures: where
                # the main stream interpolates a task's rows (fewer than D), next to nothing
                self.largest_residual_ = max(self.largest_residual_, float(residual.abs().max()))
                self.comp_.add(comp, residual, run)
        return self

    def _both(self, features: Array) -> tuple[torch.Tensor, torch.Tensor]:
        with linalg.workers(device=self.buffer_.device) as run:
            main, comp = self.streams(features, run)
            return self.main_.scores(main), self.comp_.scores(comp)

    def tune(self, features: Array, labels: Array) -> None:
        """C of the grid most accurate on the validation rows; among equally accurate ones the
        least mean squared error to the one-hot targets (what both streams regress), then the
        smaller C (nearer ACIL)."""
        if not self.tune_compensation:
            return
        main, comp = self._both(features)
        labels = as_labels(labels)
        targets = F.one_hot(torch.from_numpy(labels).long(), main.shape[1]).double().to(main.device)
        found = {}
        with linalg.single_threaded(main.device):
            for c in COMPENSATION_GRID:
                scores = main + c * comp
                accuracy = float((scores.argmax(1).cpu().numpy() == labels).mean())
                found[c] = (accuracy, float(((scores - targets) ** 2).mean()))
        self.compensation_ = max(found, key=lambda c: (found[c][0], -found[c][1], -c))
        self.compensation_scores_, self.tuned_by_ = found, "validation"

    def decision_function(self, features: Array) -> np.ndarray:
        main, comp = self._both(features)
        with linalg.single_threaded(main.device):
            return (main + self.compensation_ * comp).cpu().numpy()

    def predict(self, features: Array) -> np.ndarray:
        return top_class(self.decision_function(features))  # a tie counts as wrong

    @staticmethod
    def parameters_for(features: int, classes: int, /, buffer_size: int = 8192, **_: object) -> int:
        """The d x m random buffer and the m x C weights of each stream, main and compensation
        (`num_parameters()`'s count, from what was asked)."""
        return features * buffer_size + 2 * buffer_size * classes

    def num_parameters(self) -> int:
        return int(self.buffer_.numel() + self.main_.weights.numel() + self.comp_.weights.numel())

    def state_bytes(self) -> int:
        return int(8 * (self.buffer_.numel() + self.main_.numel() + self.comp_.numel()))
