"""The per-task trainer (method.md §4): one LuCA module, all classifier rows and sigma, on features."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F

from featcache.errors import UserError
from tosca_heads.features import FeatureSource
from tosca_heads.head import CosineClassifier
from tosca_heads.luca import FLOWS, LuCA, new_module
from tosca_heads.stream import TaskStream


@dataclass(frozen=True)
class TrainConfig:
    """Every number of the recipe; the `paper` preset is the reference code's."""

    r: int | None = None  # None: d // 16
    s: int | None = None  # None: d // 16
    l1: float = 5e-4
    lr: float = 0.025
    momentum: float = 0.9
    weight_decay: float = 0.0
    epochs: int = 20
    batch_size: int = 48
    eta_min: float = 1e-8
    flow: str = "tosca"
    seed: int = 0

    def resolved(self, dim: int) -> TrainConfig:
        return TrainConfig(**{**asdict(self), "r": self.r or dim // 16, "s": self.s or dim // 16})

    def validate(self) -> None:
        if self.flow not in FLOWS:
            raise UserError(f"unknown --flow {self.flow!r}: use one of {', '.join(FLOWS)}")
        for name in ("epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        for name in ("r", "s"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise UserError(f"--{name} must be at least 1, got {getattr(self, name)}")
        if self.lr <= 0 or self.l1 < 0:
            raise UserError(f"--lr must be > 0 and --l1 >= 0 (got {self.lr}, {self.l1})")


PRESETS: dict[str, TrainConfig] = {"paper": TrainConfig()}


@dataclass
class TaskStats:
    task: int
    loss: float
    train_acc: float
    seconds: float


def task_generator(seed: int, task: int) -> torch.Generator:
    """Per-task RNG: a run resumed at task t draws exactly what an uninterrupted run draws."""
    return torch.Generator().manual_seed(seed * 1_000_003 + task)


@contextlib.contextmanager
def small_step_mode() -> Iterator[None]:
    """CPU settings for thousands of tiny SGD steps, restored afterwards.

    Denormals flushed: L1 drives many weights towards zero, and their denormal floats made steps
    up to 6x slower (EuroSAT task 1: 1.51 s -> 0.26 s, same accuracy). One thread: a 48 x 768
    batch is too small to share, and 2 threads cost 2.4 -> 3.6 ms per step on 2 cores.
    """
    threads = torch.get_num_threads()
    torch.set_flush_denormal(True)
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.set_flush_denormal(False)


def l1_penalty(params: list[torch.Tensor]) -> float:
    return float(sum(float(p.detach().abs().sum()) for p in params))


def add_l1_gradient(params: list[torch.Tensor], weight: float) -> None:
    """d/dp of weight * sum|p| is weight * sign(p) (0 at 0, as autograd's abs gives): added to the
    gradients directly instead of differentiating 2 x len(params) extra ops every step."""
    grads = [p.grad for p in params if p.grad is not None]
    if weight and grads:
        torch._foreach_add_(
            grads, torch._foreach_sign([p for p in params if p.grad is not None]), alpha=weight
        )


def train_task(
    task: int,
    stream: TaskStream,
    train_labels: np.ndarray,
    source: FeatureSource,
    head: CosineClassifier,
    config: TrainConfig,
    dim: int,
) -> tuple[LuCA, TaskStats]:
    """Train task `task`'s module (and every classifier row, and sigma), then write its prototypes."""
    start = time.perf_counter()
    gen = task_generator(config.seed, task)
    classes = stream.task_classes(task)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=gen)))
        module = new_module(dim, config.r or dim // 16, config.s or dim // 16, config.flow, task)
        head.grow(len(classes), generator=gen)
    rows = stream.rows_of_task(train_labels, task)
    targets = torch.from_numpy(train_labels[rows])
    luca_params = list(module.parameters())
    optimizer = torch.optim.SGD(
        [*luca_params, head.weight, head.sigma],
        lr=config.lr,
        momentum=config.momentum,
        weight_decay=config.weight_decay,
    )
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
        optimizer, T_max=config.epochs, eta_min=config.eta_min
    )
    loss_sum, correct, seen = 0.0, 0, 0
    module.train()
    with small_step_mode():
        for epoch in range(config.epochs):
            features = source.epoch_features(rows, epoch)
            last_epoch = epoch == config.epochs - 1
            for batch in torch.randperm(len(rows), generator=gen).split(config.batch_size):
                x, y = features[batch], targets[batch]
                logits = head(module(x))
                loss = F.cross_entropy(logits, y)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                add_l1_gradient(luca_params, config.l1)
                optimizer.step()
                if last_epoch:  # the table reports the last epoch's loss (CE + L1 term) and accuracy
                    loss_sum += (loss.item() + config.l1 * l1_penalty(luca_params)) * len(batch)
                    correct += int((logits.argmax(1) == y).sum())
                    seen += len(batch)
            scheduler.step()
    module.eval()
    with torch.no_grad():
        out = module(source.clean("train", rows))
        prototypes = torch.stack([out[targets == c].mean(0) for c in classes])
    head.set_rows(classes, prototypes)
    return module, TaskStats(
        task, loss_sum / max(seen, 1), correct / max(seen, 1), time.perf_counter() - start
    )
