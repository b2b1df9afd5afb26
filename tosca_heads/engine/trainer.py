"""A group's training task by task (method.md §4): its modules, its classifier, its generators.

Each configuration draws its module init, its classifier growth and its batch order from its own
generator, seeded by (seed, task) exactly as a lone run, so a configuration trained in a group
equals the same configuration trained alone (up to float rounding of batched matmuls).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from tosca_foundation.errors import UserError
from tosca_heads.engine.evaluate import Snapshot
from tosca_heads.engine.layout import ParamLayout
from tosca_heads.engine.numeric_errors import NumericalError, scale_refusal
from tosca_heads.engine.optim import cosine_lrs
from tosca_heads.engine.outputs import module_outputs
from tosca_heads.engine.steppers import StepTask, make_step
from tosca_heads.method.class_names import said_class
from tosca_heads.method.classifier import new_rows
from tosca_heads.method.features import FeatureSource
from tosca_heads.method.luca import new_module
from tosca_heads.method.protocol import TaskStream
from tosca_heads.method.recipe import SHARED_FIELDS, TrainConfig
from tosca_heads.method.scale import outside_cosine_reach

PROTOTYPE_BYTES = 256 << 20  # module outputs held at once while computing prototypes


@dataclass
class TaskStats:
    """One configuration's task, as its last epoch ended: `ce` the epoch's mean cross-entropy per
    training image, `l1_term` its mean L1 term (l1 x |module|_1 after each step, weighted like the
    cross-entropy), `loss` = ce + l1_term (the objective SGD minimises, weight decay aside: it is
    the optimiser's); `train_acc` the accuracy on the task's images over that epoch."""

    task: int
    ce: float
    l1_term: float
    loss: float
    train_acc: float
    seconds: float


@dataclass
class TaskCurve:
    """One configuration's training curve over one task, an entry per epoch: `ce` and `l1_term` as
    `TaskStats` defines them (the task's stats are its last epoch's entries), `lr` the epoch's
    learning rate. Read off the tallies both steps keep per epoch."""

    ce: list[float]
    l1_term: list[float]
    lr: list[float]


def task_generator(seed: int, task: int) -> torch.Generator:
    """Per-task RNG: a run resumed at task t draws exactly what an uninterrupted run draws."""
    return torch.Generator().manual_seed(seed * 1_000_003 + task)


def check_group(configs: Sequence) -> None:
    """Refuse a group whose configurations cannot step together."""
    if not configs:
        raise ValueError("a group needs at least one configuration")
    for name in SHARED_FIELDS:
        values = {getattr(c, name) for c in configs}
        if len(values) > 1:
            raise ValueError(f"configurations of one group must share {name}, got {sorted(values)}")
    if any(c.r is None or c.s is None for c in configs):
        raise ValueError("configurations must be resolved (r and s set) before grouping")


class GroupTrainer:
    """G configurations (resolved `TrainConfig`s sharing flow, epochs and batch size) on one stream.

    Fitted state: `modules_` (one frozen `[G, size]` parameter tensor per finished task),
    `weight_` `[G, C, d]` and `sigma_` `[G]` (the classifier after the last task).
    """

    def __init__(
        self, configs: Sequence, dim: int, device: torch.device | str = "cpu", step_threads: int = 1
    ):
        self.configs = list(configs)
        self.dim = dim
        self.device = torch.device(device)
        self.step_threads = step_threads  # the compiled CPU step's threads (1 or 2)

    # ------------------------------------------------------------------ state

    @property
    def layout(self) -> ParamLayout:
        if not hasattr(self, "layout_"):
            check_group(self.configs)
            self.layout_ = ParamLayout(
                self.dim,
                max(c.r for c in self.configs),
                max(c.s for c in self.configs),
                self.configs[0].flow,
            )
            self.modules_: list[torch.Tensor] = []
            self.weight_ = torch.zeros(len(self.configs), 0, self.dim, device=self.device)
            self.sigma_ = torch.ones(len(self.configs), device=self.device)
        return self.layout_

    @property
    def groups(self) -> int:
        return len(self.configs)

    def snapshot(self) -> Snapshot:
        """The modules and classifier as they are now, for evaluation (possibly while training on)."""
        return Snapshot(self.layout, tuple(self.modules_), self.weight_, self.sigma_)

    def module_state(self, task: int, g: int) -> dict[str, torch.Tensor]:
        """Configuration g's module of `task` as the reference `LuCA` state dict (padding dropped)."""
        cfg = self.configs[g]
        return self.layout.unpack(self.modules_[task][g].cpu(), cfg.r, cfg.s)

    def head_state(self, g: int) -> dict[str, torch.Tensor]:
        return {
            "head.weight": self.weight_[g].detach().cpu().clone(),
            "head.sigma": self.sigma_[g : g + 1].detach().cpu().clone(),
        }

    def load_task(
        self, task: int, modules: Sequence[dict[str, torch.Tensor]], heads: Sequence[dict[str, torch.Tensor]]
    ) -> GroupTrainer:
        """Take a finished task back from run files (resume): one state dict and head per configuration."""
        layout = self.layout
        if task != len(self.modules_):
            raise ValueError(f"tasks load in order: expected task {len(self.modules_)}, got {task}")
        rows = [layout.pack(m, c.r, c.s) for m, c in zip(modules, self.configs, strict=True)]
        self.modules_.append(torch.stack(rows).to(self.device))
        self.weight_ = torch.stack([h["head.weight"] for h in heads]).to(self.device, torch.float32)
        self.sigma_ = torch.cat([h["head.sigma"].reshape(1) for h in heads]).to(self.device, torch.float32)
        return self

    # ------------------------------------------------------------------ one task

    def _init_task(self, task: int, n_new: int) -> tuple[torch.Tensor, torch.Tensor, list[torch.Generator]]:
        """Each configuration's new module (flat, padded) and new classifier rows, from its generator."""
        layout, first = self.layout, self.weight_.shape[1] == 0
        rows, new_head, generators = [], [], []
        for cfg in self.configs:
            gen = task_generator(cfg.seed, task)
            with torch.random.fork_rng(devices=[]):  # seeds and restores the CPU generator only
                torch.default_generator.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=gen)))
                module = new_module(self.dim, cfg.r, cfg.s, cfg.flow, task)
                new_head.append(new_rows(n_new, self.dim, first, gen))
            rows.append(layout.pack(module.state_dict(), cfg.r, cfg.s))
            generators.append(gen)
        return torch.stack(rows).to(self.device), torch.stack(new_head).to(self.device), generators

    def partial_fit(
        self,
        task: int,
        stream: TaskStream,
        train_labels: np.ndarray,
        source: FeatureSource,
    ) -> GroupTrainer:
        """Train `task`'s modules (and every classifier row, and sigma), then write its prototypes.

        train_labels are incremental class ids of every training row. Appends one `TaskStats` per
        configuration to `stats_[task]`, and one `TaskCurve` per configuration to `curves_[task]`.
        """
        layout = self.layout
        if task != len(self.modules_):
            raise ValueError(f"tasks train in order: expected task {len(self.modules_)}, got {task}")
        start = time.perf_counter()
        device, configs, groups = self.device, self.configs, self.groups
        classes = stream.task_classes(task)
        rows = stream.rows_of_task(train_labels, task)
        targets = torch.from_numpy(train_labels[rows]).to(device)
        flat, new_head, generators = self._init_task(task, len(classes))
        weight = torch.cat([self.weight_, new_head], dim=1)
        sigma = self.sigma_.clone()
        step = make_step(StepTask(layout, configs, flat, weight, sigma, targets), self.step_threads)
        epochs, batch = configs[0].epochs, configs[0].batch_size
        schedules = [cosine_lrs(c.lr, c.eta_min, epochs) for c in configs]
        n = len(rows)
        ces: list[list[float]] = []  # per epoch, per configuration
        l1_terms: list[list[float]] = []
        read: dict[int, torch.Tensor] = {}  # view -> features: epochs of the same view share one read
        for epoch in range(epochs):
            view = epoch % source.views if source.views else -1
            if view not in read:
                read[view] = source.epoch_features(rows, epoch).to(device)
                if not bool(torch.isfinite(read[view]).all()):
                    raise NumericalError(
                        f"the training features of task {task}, epoch {epoch} hold NaN or inf; "
                        "check the store with `tosca cache verify STORE`"
                    )
                peak = outside_cosine_reach(read[view])
                if peak is not None:
                    raise scale_refusal(f"the training features of task {task}", peak, read[view].shape[-1])
            features = read[view]
            order = torch.stack([torch.randperm(n, generator=g) for g in generators]).to(device)
            step.start_epoch(features, order, [s[epoch] for s in schedules], track=epoch == epochs - 1)
            step.run_epoch(n, batch)
            if source.views and epoch + source.views >= epochs:  # no later epoch uses this view
                del read[view], features
            ce_sum, l1_sum = step.epoch_sums()
            self._check_finite(ce_sum + l1_sum, task, epoch)
            ces.append([float(v) / n for v in ce_sum.tolist()])
            l1_terms.append([float(v) / n for v in l1_sum.tolist()])
        before = (self.weight_, self.sigma_)
        self.modules_.append(flat.detach())
        self.weight_, self.sigma_ = weight.detach(), sigma.detach()
        self._write_prototypes(task, stream, targets, source.clean("train", rows).to(device))
        # the last steps' updates come after the last loss, and the new classes' prototypes are the
        # module's outputs (a huge --lr leaves finite weights whose outputs overflow): check what is kept
        kept = [flat.reshape(groups, -1), self.weight_.reshape(groups, -1), sigma.reshape(groups, -1)]
        finite = torch.stack([torch.isfinite(k).all(1) for k in kept]).all(0)
        try:
            self._check_finite(torch.where(finite, 0.0, float("nan")), task, epochs - 1)
        except NumericalError:
            self.modules_.pop()
            self.weight_, self.sigma_ = before
            raise
        seconds = time.perf_counter() - start
        acc = [v / n for v in step.correct()]
        if not hasattr(self, "stats_"):
            self.stats_: dict[int, list[TaskStats]] = {}
        ce, l1_term = ces[-1], l1_terms[-1]
        self.stats_[task] = [
            TaskStats(task, ce[g], l1_term[g], ce[g] + l1_term[g], acc[g], seconds) for g in range(groups)
        ]
        if not hasattr(self, "curves_"):
            self.curves_: dict[int, list[TaskCurve]] = {}
        self.curves_[task] = [
            TaskCurve([e[g] for e in ces], [e[g] for e in l1_terms], [float(lr) for lr in schedules[g]])
            for g in range(groups)
        ]
        return self

    def reuse_task(
        self,
        task: int,
        stream: TaskStream,
        train_labels: np.ndarray,
        source: FeatureSource,
        module_of: int = 0,
    ) -> GroupTrainer:
        """Learn `task` with no training: task `module_of`'s module, frozen, serves as its module, and
        each of its classes' classifier row is the prototype of that module's output over the class's
        clean training features (as every task's rows are after its training). Nothing trained
        before moves. The few-shot literature's rule (adapt on the base session, then freeze and
        add prototypes), within TOSCA's layout (a module per task): every module is then the same,
        so a router's choice changes nothing (`TOSCAClassifier.routed` answers with the first).
        Its stats are NaN and its curve empty: no epoch ran."""
        self.layout  # noqa: B018 - the state, made on first use
        if task != len(self.modules_):
            raise ValueError(f"tasks train in order: expected task {len(self.modules_)}, got {task}")
        if not 0 <= module_of < task:
            raise ValueError(f"task {task} can reuse a finished task's module, not task {module_of}'s")
        start = time.perf_counter()
        classes = stream.task_classes(task)
        rows = stream.rows_of_task(train_labels, task)
        targets = torch.from_numpy(train_labels[rows]).to(self.device)
        self.modules_.append(self.modules_[module_of].clone())
        fresh = torch.zeros(self.groups, len(classes), self.dim, device=self.device)
        self.weight_ = torch.cat([self.weight_, fresh], dim=1)
        self._write_prototypes(task, stream, targets, source.clean("train", rows).to(self.device))
        seconds, nan = time.perf_counter() - start, float("nan")
        if not hasattr(self, "stats_"):
            self.stats_ = {}
        self.stats_[task] = [TaskStats(task, nan, nan, nan, nan, seconds) for _ in range(self.groups)]
        if not hasattr(self, "curves_"):
            self.curves_ = {}
        self.curves_[task] = [TaskCurve([], [], []) for _ in range(self.groups)]
        return self

    def _check_finite(self, epoch_loss: torch.Tensor, task: int, epoch: int) -> None:
        """One line naming the configurations whose value (per configuration: [G]) is NaN or inf."""
        bad = (~torch.isfinite(epoch_loss)).nonzero().flatten().tolist()
        if bad:
            which = ", ".join(
                f"r={self.configs[g].r} l1={self.configs[g].l1:g} lr={self.configs[g].lr:g} seed={self.configs[g].seed}"
                for g in bad[:3]
            )
            raise NumericalError(
                f"training diverged: the loss or the weights became NaN or inf at task {task}, epoch {epoch} ({which}); "
                "lower --lr, or check the store with `tosca cache verify`"
            )

    @torch.no_grad()
    def _write_prototypes(
        self, task: int, stream: TaskStream, targets: torch.Tensor, clean: torch.Tensor
    ) -> None:
        """Each class's mean module output over its clean training features becomes its classifier row."""
        classes = stream.task_classes(task)
        per_config = max(1, PROTOTYPE_BYTES // max(1, clean.numel() * 4))
        for lo in range(0, self.groups, per_config):
            hi = min(self.groups, lo + per_config)
            out = module_outputs(self.layout, self.modules_[task][lo:hi], clean, normalize=False)
            for c in classes:
                mask = targets == c
                if not bool(mask.any()):
                    raise UserError(
                        f"class {said_class(int(stream.order[c]))} of task {task} has no training sample: "
                        "its prototype is undefined"
                    )
                self.weight_[lo:hi, c] = out[:, mask].mean(1)


def make_trainer(
    configs: Sequence[TrainConfig], dim: int, device: torch.device | str = "cpu", step_threads: int = 1
) -> GroupTrainer:
    """The engine for these recipes (resolved to numbers for feature dim `dim`): G = len(configs)."""
    for config in configs:
        config.validate()
    return GroupTrainer([c.resolved(dim) for c in configs], dim, device, step_threads)
