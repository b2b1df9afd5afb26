"""The inner loop of one task: SGD steps over a group's batches, by one of two interchangeable steps.

- `TorchStep`: `kernels.LucaStep` + `optim.GroupSGD`, PyTorch operations; every device.
- `NativeStep`: the compiled C step (`native.py`), forward, backward and update of all G
  configurations in one call; CPU only, several times faster there (docs/benchmarks.md).

Both do the same arithmetic (tests hold them to each other), keep the same tallies (per epoch, the
sums over its steps of the cross-entropy and of the L1 term, each times the step's batch size: the
training curve, and the divergence check; the correct count over the last epoch), and update the
caller's `flat`, `weight` and `sigma` in place.
"""

from __future__ import annotations

import ctypes
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from tosca_heads.engine import native
from tosca_heads.engine.cores import ThreadChooser, evaluation_busy
from tosca_heads.engine.kernels import LucaStep
from tosca_heads.engine.layout import ParamLayout
from tosca_heads.engine.optim import GroupSGD


class Step(Protocol):
    def start_epoch(
        self, features: torch.Tensor, order: torch.Tensor, lrs: Sequence[float], track: bool
    ) -> None:
        """features [n, d] of this epoch, order [G, n] each configuration's batch order, lrs the
        epoch's learning rate per configuration; track: tally the correct count (the last epoch)."""
        ...

    def step(self, begin: int, size: int) -> None:
        """One step on rows order[:, begin : begin + size]."""
        ...

    def run_epoch(self, rows: int, batch: int) -> None:
        """The epoch's steps: rows order[:, 0 : rows], `batch` at a time (the last takes the rest)."""
        ...

    def epoch_sums(self) -> tuple[torch.Tensor, torch.Tensor]:
        """[G] each, over this epoch's steps: the sum of the step's mean cross-entropy x its batch
        size, and of its L1 term (l1 x |module|_1 after the step's update) x its batch size (NaN or
        inf once a configuration diverged)."""
        ...

    def correct(self) -> list[float]:
        """Per configuration, the correct predictions over the tracked epoch."""
        ...


class _Config(Protocol):
    momentum: float
    weight_decay: float
    l1: float
    batch_size: int


@dataclass(frozen=True)
class StepTask:
    """One task's training for a group of G configurations, as either step takes it: the group's
    `layout` and `configs` (momentum, weight decay, L1, batch size each), the tensors the steps
    update in place (`flat` modules [G, size], classifier `weight` [G, C, d], `sigma` [G]) and
    the task's `targets` [n] (class ids of its rows)."""

    layout: ParamLayout
    configs: Sequence[_Config]
    flat: torch.Tensor
    weight: torch.Tensor
    sigma: torch.Tensor
    targets: torch.Tensor

    @property
    def groups(self) -> int:
        return len(self.configs)

    @property
    def updated(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """flat, weight and sigma: what the steps update in place."""
        return self.flat, self.weight, self.sigma


class _Tallies:
    """What both steps tally per configuration (module docstring): the epoch's sums of the
    cross-entropy and of the L1 term (float64), and the tracked epoch's correct count."""

    def __init__(self, groups: int, device: torch.device, counted: torch.dtype) -> None:
        self._ce = torch.zeros(groups, device=device, dtype=torch.float64)
        self._l1_term = torch.zeros(groups, device=device, dtype=torch.float64)
        self._correct = torch.zeros(groups, device=device, dtype=counted)

    def _new_epoch(self) -> None:
        self._ce.zero_()
        self._l1_term.zero_()

    def epoch_sums(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._ce, self._l1_term

    def correct(self) -> list[float]:
        return [float(c) for c in self._correct.tolist()]


class TorchStep(_Tallies):
    def __init__(self, task: StepTask):
        layout, configs, (flat, weight, sigma) = task.layout, task.configs, task.updated
        groups, device = task.groups, flat.device
        super().__init__(groups, device, torch.get_default_dtype())
        self.flat, self.targets = flat, task.targets
        grad_flat, grad_weight, grad_sigma = (torch.zeros_like(t) for t in (flat, weight, sigma))
        self.optimizer = GroupSGD(
            [flat, weight, sigma],
            [grad_flat, grad_weight, grad_sigma],
            [True, False, False],
            momentum=[c.momentum for c in configs],
            weight_decay=[c.weight_decay for c in configs],
            l1=[c.l1 for c in configs],
        )
        self.kernel = LucaStep(layout, groups)
        self.params, self.grads = self.kernel.views(flat), self.kernel.views(grad_flat)
        self.head = self.kernel.head(weight, sigma)
        self.head_grad = self.kernel.head(grad_weight, grad_sigma, grad=True)
        self.l1 = torch.tensor([c.l1 for c in configs], device=device)

    def start_epoch(
        self, features: torch.Tensor, order: torch.Tensor, lrs: Sequence[float], track: bool
    ) -> None:
        self.features, self.order, self.track = features, order, track
        self.neg_lr = self.optimizer.learning_rates(lrs)
        self._new_epoch()

    def step(self, begin: int, size: int) -> None:
        x, y = self.kernel.inputs(self.features, self.targets, self.order[:, begin : begin + size])
        result = self.kernel(self.params, self.grads, *self.head, *self.head_grad, x, y)
        self.optimizer.step(self.neg_lr)
        self._ce.add_(result.loss.double() * size)
        self._l1_term.add_(self.flat.abs().sum(1).mul_(self.l1).double() * size)
        if self.track:  # the table reports the last epoch's training accuracy
            self._correct.add_((result.logits.argmax(-1) == y).sum(-1))

    def run_epoch(self, rows: int, batch: int) -> None:
        for begin in range(0, rows, batch):
            self.step(begin, min(batch, rows - begin))


class NativeStep(_Tallies):
    """All G configurations' step in one call into the compiled library (CPU tensors only), on one
    thread or two (`threads` is the most an epoch takes: `cores.ThreadChooser` picks)."""

    def __init__(self, task: StepTask, threads: int = 1):
        layout, configs, (flat, weight, sigma) = task.layout, task.configs, task.updated
        if threads not in (1, 2):
            raise ValueError(f"the compiled step runs on 1 or 2 threads, not {threads}")
        lib, gemm, why = native.load()
        if lib is None:
            raise RuntimeError(f"the compiled step is unavailable: {why}")
        for name, t in (("flat", flat), ("weight", weight), ("sigma", sigma)):
            if t.device.type != "cpu" or t.dtype != torch.float32 or not t.is_contiguous():
                raise ValueError(f"the compiled step needs {name} as a contiguous float32 CPU tensor")
        groups, classes, dim = weight.shape
        self.lib, self.groups = lib, groups
        self.targets = task.targets.to(torch.int64).contiguous()
        # the C step indexes with these unchecked: out-of-range values would write out of bounds
        if len(self.targets) and not 0 <= int(self.targets.min()) <= int(self.targets.max()) < classes:
            raise ValueError(f"class ids must lie in [0, {classes}) for the compiled step")
        grads = [torch.zeros_like(t) for t in (flat, weight, sigma)]
        buffers = [torch.zeros_like(t) for t in (flat, weight, sigma)]

        def per_config(values: Sequence[float]) -> torch.Tensor:
            return torch.tensor(list(values), dtype=torch.float32)

        self.neg_lr = torch.zeros(groups)
        hyper = [
            per_config(c.momentum for c in configs),
            per_config(c.weight_decay for c in configs),
            per_config(c.l1 for c in configs),
        ]
        super().__init__(groups, torch.device("cpu"), torch.int64)
        # a step never has more rows than the task: a larger batch size is one step per epoch
        batch = max(1, min(max(c.batch_size for c in configs), len(self.targets)))
        self.batch = batch
        self.work = torch.empty(lib.tosca_workspace_floats(batch, dim, layout.r, layout.s, classes))
        # keep every tensor the struct points into alive as long as the struct
        self._alive = [flat, weight, sigma, *grads, *buffers, *hyper, self.targets]
        offsets = native.slot_offsets(layout)
        self.args = native.StepArgs(
            groups=groups,
            batch=batch,
            dim=dim,
            r=layout.r,
            s=layout.s,
            classes=classes,
            flow=native.FLOW_CODES[layout.flow],
            track=0,
            threads=threads,
            param_size=layout.size,
            targets=self.targets.data_ptr(),
            flat=flat.data_ptr(),
            grad_flat=grads[0].data_ptr(),
            buf_flat=buffers[0].data_ptr(),
            weight=weight.data_ptr(),
            grad_weight=grads[1].data_ptr(),
            buf_weight=buffers[1].data_ptr(),
            sigma=sigma.data_ptr(),
            grad_sigma=grads[2].data_ptr(),
            buf_sigma=buffers[2].data_ptr(),
            neg_lr=self.neg_lr.data_ptr(),
            momentum=hyper[0].data_ptr(),
            decay=hyper[1].data_ptr(),
            l1=hyper[2].data_ptr(),
            epoch_ce=self._ce.data_ptr(),
            epoch_l1=self._l1_term.data_ptr(),
            correct=self._correct.data_ptr(),
            work=self.work.data_ptr(),
            gemm=gemm,
            blas_threads=native.blas_threads_address(),
            **offsets,
        )
        self.grads = grads  # for tests: the last step's raw gradients (before L1 and decay)
        self._args_ref = ctypes.byref(self.args)
        self.threads = ThreadChooser(threads)

    def start_epoch(
        self, features: torch.Tensor, order: torch.Tensor, lrs: Sequence[float], track: bool
    ) -> None:
        if features.dtype != torch.float32 or features.device.type != "cpu":
            raise ValueError("the compiled step needs float32 CPU features")
        self.features = features.contiguous()
        self.order = order.to(torch.int64).contiguous()
        if len(self.features) != len(self.targets) or self.order.shape[0] != self.groups:
            raise ValueError("features, targets and the [G, n] batch order must describe the same rows")
        if self.order.numel() and not 0 <= int(self.order.min()) <= int(self.order.max()) < len(
            self.features
        ):
            raise ValueError(f"batch order indexes rows outside [0, {len(self.features)})")
        self.neg_lr.copy_(torch.tensor([-lr for lr in lrs], dtype=torch.float32))
        self._new_epoch()
        self.args.features = self.features.data_ptr()
        self.args.index_stride = self.order.shape[1]
        self.args.track = int(track)
        self._order_ptr = self.order.data_ptr()

    def step(self, begin: int, size: int) -> None:
        if not 0 < size <= self.batch or begin < 0 or begin + size > self.order.shape[1]:
            raise ValueError(f"a step takes 1..{self.batch} rows inside the epoch's order")
        self.args.index = self._order_ptr + 8 * begin
        self.args.batch = size
        self.args.threads = self.threads.most
        self.lib.tosca_step(self._args_ref)

    def run_epoch(self, rows: int, batch: int) -> None:
        """The whole epoch in one call into the library (no Python between steps)."""
        if not 0 < rows <= self.order.shape[1] or batch < 1 or min(batch, rows) > self.batch:
            raise ValueError(f"an epoch takes steps of 1..{self.batch} rows inside the epoch's order")
        self.args.index = self._order_ptr
        self.args.batch = batch
        self.args.threads = threads = self.threads.choose()
        busy, start = evaluation_busy(), time.perf_counter()
        self.lib.tosca_epoch(self._args_ref, rows)
        elapsed = time.perf_counter() - start
        self.threads.record(threads, elapsed, math.ceil(rows / batch), busy or evaluation_busy())


def make_step(task: StepTask, threads: int = 1) -> Step:
    """The compiled step on a CPU where it can be built (see `native.use_native`), on `threads`
    threads; else PyTorch's (its matmul threads are `step_mode`'s)."""
    if native.use_native(task.flat.device):
        return NativeStep(task, threads)
    return TorchStep(task)
