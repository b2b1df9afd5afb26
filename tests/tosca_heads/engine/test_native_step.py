"""The compiled CPU step (engine/native.py + csrc/luca_step.c) against the PyTorch step:
the same gradients, the same updated weights over epochs, inert padding, the same tallies, and
the choice between them (`TOSCA_STEP`) with one-line errors."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from support.layouts import padding_mask
from support.stores import synthetic_store

from tosca_foundation.errors import UserError
from tosca_heads.engine import native
from tosca_heads.engine.device import ThreadPlan, plan_threads
from tosca_heads.engine.kernels import LucaStep, luca_forward, normalize_rows
from tosca_heads.engine.layout import ParamLayout
from tosca_heads.engine.steppers import NativeStep, StepTask, TorchStep, make_step
from tosca_heads.method.luca import FLOWS, new_module
from tosca_heads.method.protocol import StreamConfig
from tosca_heads.method.recipe import TrainConfig
from tosca_heads.running.group import fit_run

pytestmark = pytest.mark.cpu_reference

# where a C compiler is, the compiled step must build: its tests fail there, never skip
needs_native = pytest.mark.skipif(native.compiler() is None, reason="no C compiler here")


@dataclass
class Hyper:
    momentum: float
    weight_decay: float
    l1: float
    batch_size: int = 8


CONFIGS = [Hyper(0.9, 0.0, 5e-3), Hyper(0.5, 1e-3, 0.0), Hyper(0.8, 1e-4, 1e-2)]
BOTTLENECKS = [(4, 4), (2, 3), (4, 1)]  # padded to r = s = 4


def _group(flow: str, d: int = 32, classes: int = 7) -> tuple[ParamLayout, list[torch.Tensor]]:
    layout = ParamLayout(d, 4, 4, flow)
    torch.manual_seed(0)
    flat = torch.stack([layout.pack(new_module(d, r, s, flow, 1).state_dict(), r, s) for r, s in BOTTLENECKS])
    with torch.no_grad():
        flat += (
            0.05 * torch.randn_like(flat) * ~torch.stack([padding_mask(layout, r, s) for r, s in BOTTLENECKS])
        )
    weight = 0.3 * torch.randn(3, classes, d)
    weight[:, 5:] = 0  # a new task's rows start at zero (the reference quirk's huge first step)
    return layout, [flat, weight, torch.tensor([1.0, 1.3, 0.8])]


def _train(kind: type, flow: str, epochs: int = 3) -> tuple[list[torch.Tensor], object]:
    layout, tensors = _group(flow)
    gen = torch.Generator().manual_seed(1)
    n = 44  # 5 full batches of 8 and one of 4
    features = torch.randn(n, layout.dim, generator=gen)
    targets = torch.randint(0, 7, (n,), generator=gen)
    step = kind(StepTask(layout, CONFIGS, *tensors, targets))
    for epoch in range(epochs):
        order = torch.stack([torch.randperm(n, generator=gen) for _ in CONFIGS])
        step.start_epoch(features, order, [0.05, 0.02, 0.03], track=epoch == epochs - 1)
        for begin in range(0, n, 8):
            step.step(begin, min(8, n - begin))
    return tensors, step


@needs_native
@pytest.mark.parametrize("flow", FLOWS)
def test_compiled_step_trains_as_the_pytorch_step(flow: str) -> None:
    """Three epochs of three padded configurations (different r, s, L1, momentum, weight decay, lr):
    modules, classifier and sigma agree to float rounding, the padding stays exactly 0, and the
    tallies (cross-entropy and L1 term per epoch, last-epoch correct count) agree."""
    (t_flat, t_weight, t_sigma), torch_step = _train(TorchStep, flow)
    (n_flat, n_weight, n_sigma), native_step = _train(NativeStep, flow)
    torch.testing.assert_close(n_flat, t_flat, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(n_sigma, t_sigma, rtol=1e-4, atol=1e-5)
    # rows that existed keep their scale; the rows that started at zero took a first step divided
    # by eps = 1e-12 (the reference quirk), so they are compared relative to their own size
    torch.testing.assert_close(n_weight[:, :5], t_weight[:, :5], rtol=1e-4, atol=1e-5)
    new_rows = t_weight[:, 5:].abs().amax()
    torch.testing.assert_close(n_weight[:, 5:] / new_rows, t_weight[:, 5:] / new_rows, rtol=0, atol=1e-5)
    layout = ParamLayout(32, 4, 4, flow)
    for g, (r, s) in enumerate(BOTTLENECKS):
        assert torch.all(n_flat[g][padding_mask(layout, r, s)] == 0)
    assert not torch.equal(n_flat, _group(flow)[1][0])  # training moved the weights
    for n_sum, t_sum in zip(native_step.epoch_sums(), torch_step.epoch_sums(), strict=True):
        np.testing.assert_allclose(n_sum.numpy(), t_sum.numpy(), rtol=1e-5)
    assert native_step.correct() == torch_step.correct()
    # the L1 term is l1 x |module|_1 after each step: positive exactly where l1 is
    l1_sum = torch_step.epoch_sums()[1]
    for g, config in enumerate(CONFIGS):
        assert (float(l1_sum[g]) > 0) == (config.l1 > 0)


def test_thread_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    cpu = torch.device("cpu")
    monkeypatch.delenv("TOSCA_OVERLAP_EVAL", raising=False)
    monkeypatch.delenv("TOSCA_STEP_THREADS", raising=False)
    monkeypatch.setattr("tosca_heads.engine.device.usable_cores", lambda: 2)
    # a run alone on two cores: evaluation on the second core, steps on up to two threads
    assert plan_threads(cpu, None, compiled=True) == ThreadPlan(True, 2, 1)
    assert plan_threads(cpu, None, compiled=False) == ThreadPlan(True, 1, 1)  # the PyTorch step
    monkeypatch.setattr("tosca_heads.engine.device.usable_cores", lambda: 1)
    assert plan_threads(cpu, None, compiled=True) == ThreadPlan(False, 1, 1)
    monkeypatch.setattr("tosca_heads.engine.device.usable_cores", lambda: 8)
    # a worker among others (the caller decides overlap): one step thread, one matmul thread
    assert plan_threads(cpu, True, compiled=True) == ThreadPlan(True, 1, 1)
    assert plan_threads(cpu, False, compiled=True) == ThreadPlan(False, 1, 1)  # a sweep worker
    assert plan_threads(torch.device("cuda"), None, compiled=False) == ThreadPlan(False, 1, 1)
    monkeypatch.setenv("TOSCA_STEP_THREADS", "2")
    assert plan_threads(cpu, False, compiled=True).step_threads == 2
    monkeypatch.setenv("TOSCA_STEP_THREADS", "1")
    assert plan_threads(cpu, None, compiled=True).step_threads == 1
    monkeypatch.setenv("TOSCA_OVERLAP_EVAL", "0")
    assert plan_threads(cpu, None, compiled=True).overlap is False
    monkeypatch.setenv("TOSCA_STEP_THREADS", "4")
    with pytest.raises(UserError, match=r"TOSCA_STEP_THREADS='4': use 1 or 2"):
        plan_threads(cpu, True, compiled=True)
    layout, tensors = _group("tosca")
    if native.load()[0] is not None:
        with pytest.raises(ValueError, match="1 or 2 threads"):
            NativeStep(StepTask(layout, CONFIGS, *tensors, torch.zeros(4, dtype=torch.long)), threads=3)


@needs_native
@pytest.mark.parametrize("flow", FLOWS)
def test_compiled_gradients_are_the_written_out_gradients(flow: str) -> None:
    """One step: the raw gradients the C step leaves behind equal LucaStep's (before L1 and decay)."""
    layout, (flat, weight, sigma) = _group(flow)
    gen = torch.Generator().manual_seed(2)
    features = torch.randn(8, layout.dim, generator=gen)
    targets = torch.randint(0, 7, (8,), generator=gen)
    order = torch.stack([torch.randperm(8, generator=gen) for _ in CONFIGS])
    kernel = LucaStep(layout, 3)
    grad, grad_w, grad_s = torch.zeros_like(flat), torch.zeros_like(weight), torch.zeros_like(sigma)
    x, y = kernel.inputs(features, targets, order)
    kernel(kernel.views(flat), kernel.views(grad), weight, sigma.view(-1, 1, 1), grad_w, grad_s, x, y)
    step = NativeStep(StepTask(layout, CONFIGS, flat.clone(), weight.clone(), sigma.clone(), targets))
    step.start_epoch(features, order, [0.0, 0.0, 0.0], track=False)
    step.step(0, 8)
    torch.testing.assert_close(step.grads[0], grad, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(step.grads[1][:, :5], grad_w[:, :5], rtol=1e-4, atol=1e-6)
    new_rows = grad_w[:, 5:].abs().amax()
    torch.testing.assert_close(step.grads[1][:, 5:] / new_rows, grad_w[:, 5:] / new_rows, rtol=0, atol=1e-6)
    torch.testing.assert_close(step.grads[2], grad_s, rtol=1e-4, atol=1e-6)


@needs_native
def test_a_run_is_the_same_with_either_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A whole 4-task run, compiled step against PyTorch step: A_t of every routing mode within 0.1
    points, and training accuracy per task within 1 point (two compiled threads give one's numbers
    bit for bit: test_step_threads.py)."""
    store = synthetic_store(tmp_path / "s.zarr", classes=8, per_class=24, views=2, spread=2.0)
    config = TrainConfig(r=4, s=4, epochs=4, batch_size=8)
    runs = {}
    for kind in ("native", "torch"):
        monkeypatch.setenv("TOSCA_STEP", kind)
        runs[kind] = fit_run(store, StreamConfig(2, 2), config, None, write_outputs=False)
    results = {k: r.metrics() for k, r in runs.items()}
    accuracy = {k: [s.stats["train_acc"] for s in r.stages] for k, r in runs.items()}
    for mode, block in results["torch"]["routers"].items():
        np.testing.assert_allclose(results["native"]["routers"][mode]["A_t"], block["A_t"], atol=1e-3)
    np.testing.assert_allclose(accuracy["native"], accuracy["torch"], atol=1e-2)


def test_step_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    cpu = torch.device("cpu")
    monkeypatch.setenv("TOSCA_STEP", "torch")
    layout, tensors = _group("tosca")
    assert isinstance(
        make_step(StepTask(layout, CONFIGS, *tensors, torch.zeros(4, dtype=torch.long))), TorchStep
    )
    monkeypatch.setenv("TOSCA_STEP", "fastest")
    with pytest.raises(UserError, match=r"unknown TOSCA_STEP='fastest': use one of auto, native, torch"):
        native.use_native(cpu)
    monkeypatch.setenv("TOSCA_STEP", "native")
    with pytest.raises(UserError, match="TOSCA_STEP=native is a CPU step"):
        native.use_native(torch.device("cuda"))


@needs_native
@pytest.mark.parametrize("flow", FLOWS)
def test_compiled_outputs_are_luca_forward(flow: str) -> None:
    """Module outputs over many rows (evaluation, prototypes): 150 rows cross the library's 64-row
    blocks; raw and unit outputs equal the PyTorch forward's, padding included."""
    layout, (flat, _, _) = _group(flow)
    x = torch.randn(150, layout.dim, generator=torch.Generator().manual_seed(3))
    raw = luca_forward(layout.views(flat), x, flow)
    rows = torch.empty(len(flat), len(x), layout.dim)
    torch.testing.assert_close(native.forward(layout, flat, x, False, rows), raw, rtol=1e-5, atol=1e-6)
    unit = native.forward(layout, flat, x, True, torch.empty_like(rows))
    torch.testing.assert_close(unit, normalize_rows(raw), rtol=1e-5, atol=1e-6)


@needs_native
def test_the_compiled_step_refuses_what_would_index_out_of_bounds() -> None:
    layout, tensors = _group("tosca")
    with pytest.raises(ValueError, match=r"class ids must lie in \[0, 7\)"):
        NativeStep(StepTask(layout, CONFIGS, *tensors, torch.tensor([0, 7])))
    step = NativeStep(StepTask(layout, CONFIGS, *tensors, torch.zeros(10, dtype=torch.long)))
    with pytest.raises(ValueError, match="outside"):
        step.start_epoch(torch.zeros(10, layout.dim), torch.full((3, 10), 10), [0.1] * 3, track=False)
    step.start_epoch(
        torch.zeros(10, layout.dim), torch.zeros(3, 10, dtype=torch.long), [0.1] * 3, track=False
    )
    with pytest.raises(ValueError, match=r"a step takes 1\.\.8 rows"):
        step.step(0, 9)


@needs_native
@pytest.mark.parametrize("threads", [1, 2])
def test_small_shapes_stay_inside_the_workspace(threads: int) -> None:
    """d = 32, r = s = 2, batches of 2 and 1, 2 classes (where rounding each buffer up overflowed
    once): the step writes nothing past the size the library asks for its workspace."""
    layout = ParamLayout(32, 2, 2, "tosca")
    flat = layout.pack(new_module(32, 2, 2, "tosca", 1).state_dict(), 2, 2)[None].contiguous()
    hyper = [Hyper(0.9, 0.0, 0.0, batch_size=2)]
    targets = torch.tensor([0, 1, 1])
    step = NativeStep(StepTask(layout, hyper, flat, torch.randn(1, 2, 32), torch.ones(1), targets), threads)
    floats = step.work.numel()
    step.work = torch.full((floats + 4096,), float("nan"))  # a canary beyond the declared size
    step.args.work = step.work.data_ptr()
    step.start_epoch(torch.randn(3, 32), torch.tensor([[0, 1, 2]]), [0.1], track=True)
    step.run_epoch(3, 2)
    assert torch.isnan(step.work[floats:]).all()


@pytest.mark.parametrize("kind", [TorchStep, pytest.param(NativeStep, marks=needs_native)])
def test_an_epoch_cross_entropy_and_l1_term_are_per_image_whatever_the_batches(kind: type) -> None:
    """With the weights held still (learning rate 0), one epoch in batches of 8, 8, 8, 8, 8, 4 tallies
    what one batch of all 44 rows does: each image counts once, a short last batch no more than
    its rows (a mean over steps would count its 4 rows as 8); the L1 term is l1 x |module|_1."""
    layout, (flat, _, sigma) = _group("tosca")
    weight = 0.3 * torch.randn(3, 7, layout.dim, generator=torch.Generator().manual_seed(2))
    gen = torch.Generator().manual_seed(1)
    n = 44
    features, targets = torch.randn(n, layout.dim, generator=gen), torch.randint(0, 7, (n,), generator=gen)
    order = torch.stack([torch.randperm(n, generator=gen) for _ in CONFIGS])
    sums = []
    for batch in (8, n):
        configs = [Hyper(c.momentum, c.weight_decay, c.l1, batch) for c in CONFIGS]
        step = kind(StepTask(layout, configs, flat.clone(), weight.clone(), sigma.clone(), targets))
        step.start_epoch(features, order, [0.0, 0.0, 0.0], track=True)
        step.run_epoch(n, batch)
        sums.append([t.clone() for t in step.epoch_sums()])
    torch.testing.assert_close(sums[0][0], sums[1][0], rtol=1e-5, atol=0)
    l1 = torch.tensor([c.l1 for c in CONFIGS], dtype=torch.float64)
    expected = l1 * flat.double().abs().sum(1) * n
    for ce, l1_sum in sums:
        torch.testing.assert_close(l1_sum, expected, rtol=1e-5, atol=0)
        assert bool((ce > 0).all())
