"""The batched engine: analytic gradients equal autograd's, zero padding is inert, a group equals
its points run alone, and the cosine schedule is PyTorch's."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from support.layouts import padding_mask
from support.stores import synthetic_store

from tosca_heads.engine.evaluate import ModuleScorer
from tosca_heads.engine.kernels import LucaStep, bmm, luca_forward
from tosca_heads.engine.layout import ParamLayout
from tosca_heads.engine.optim import GroupSGD, cosine_lrs
from tosca_heads.method.luca import FLOWS, LuCA
from tosca_heads.method.protocol import StreamConfig
from tosca_heads.method.recipe import TrainConfig
from tosca_heads.requests.plan import FitPlan
from tosca_heads.running.group import fit_group, fit_run

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _reference(module: LuCA, weight: torch.Tensor, sigma: torch.Tensor, x: torch.Tensor, y: torch.Tensor):
    """Autograd through the reference modules: loss and every gradient."""
    weight = weight.clone().requires_grad_(True)
    sigma = sigma.clone().requires_grad_(True)
    module.zero_grad()
    logits = sigma * F.linear(F.normalize(module(x), dim=1), F.normalize(weight, dim=1))
    loss = F.cross_entropy(logits, y)
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in module.named_parameters()}, weight.grad, sigma.grad


def _perturbed(d: int, r: int, s: int, flow: str, seed: int) -> LuCA:
    torch.manual_seed(seed)
    module = LuCA(d, r, s, flow).double()
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.1 * torch.randn_like(p))  # non-trivial LN affine and biases
    return module


@pytest.mark.cpu_reference
@pytest.mark.parametrize("flow", FLOWS)
def test_group_step_is_autograd_of_each_configuration(flow: str) -> None:
    """G = 3 configurations of different r and s, padded to the largest, in float64: the written-out
    backward equals autograd of each reference module to 1e-9, including the zero classifier rows of
    the reference quirk (their gradient is divided by eps = 1e-12), and padded units get exactly 0."""
    d, classes, batch = 16, 7, 6
    bottlenecks = [(3, 5), (6, 2), (1, 1)]
    layout = ParamLayout(d, max(r for r, _ in bottlenecks), max(s for _, s in bottlenecks), flow)
    modules = [_perturbed(d, r, s, flow, seed) for seed, (r, s) in enumerate(bottlenecks)]
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(3, classes, d, generator=gen, dtype=torch.float64)
    weight[:, 5:] = 0  # rows of a new task's classes start at zero
    sigma = torch.tensor([1.3, 0.7, 2.0], dtype=torch.float64)
    x = torch.randn(3, batch, d, generator=gen, dtype=torch.float64)
    y = torch.randint(0, classes, (3, batch), generator=gen)
    flat = torch.stack(
        [layout.pack(m.state_dict(), r, s) for m, (r, s) in zip(modules, bottlenecks, strict=True)]
    )
    grad = torch.zeros_like(flat)
    grad_weight, grad_sigma = torch.zeros_like(weight), torch.zeros_like(sigma)
    step = LucaStep(layout, 3)
    result = step(
        step.views(flat),
        step.views(grad),
        *step.head(weight, sigma),
        *step.head(grad_weight, grad_sigma, grad=True),
        x,
        y,
    )
    outputs = luca_forward(layout.views(flat), x, flow)
    for g, (module, (r, s)) in enumerate(zip(modules, bottlenecks, strict=True)):
        loss, grads, d_weight, d_sigma = _reference(module, weight[g], sigma[g : g + 1], x[g], y[g])
        torch.testing.assert_close(outputs[g], module(x[g]).detach(), rtol=0, atol=1e-12)
        torch.testing.assert_close(result.loss[g], loss, rtol=1e-12, atol=0)
        got = layout.unpack(grad[g], r, s)
        for name, expected in grads.items():
            scale = float(expected.abs().max())
            assert float((got[name] - expected).abs().max()) <= 1e-9 * scale, (flow, g, name)
        assert float((grad_weight[g] - d_weight).abs().max()) <= 1e-9 * float(d_weight.abs().max())
        assert float(d_weight[5:].abs().max()) > 1e6  # the quirk is there, and reproduced
        torch.testing.assert_close(grad_sigma[g : g + 1], d_sigma, rtol=1e-10, atol=0)
        padding = padding_mask(layout, r, s)
        assert torch.all(grad[g][padding] == 0)  # padded gradients exactly 0


def _steps(layout: ParamLayout, state: dict, r: int, s: int, data: tuple, n: int) -> dict:
    """n SGD steps (momentum, L1, weight decay) of one configuration in `layout`."""
    x, y, weight0 = data
    flat = layout.pack(state, r, s).unsqueeze(0)
    grad = torch.zeros_like(flat)
    weight, sigma = weight0.clone().unsqueeze(0), torch.ones(1)
    grad_weight, grad_sigma = torch.zeros_like(weight), torch.zeros_like(sigma)
    optimizer = GroupSGD(
        [flat, weight, sigma], [grad, grad_weight, grad_sigma], [True, False, False], [0.9], [1e-4], [5e-3]
    )
    step = LucaStep(layout, 1)
    params, grads = step.views(flat), step.views(grad)
    outputs = []
    for i in range(n):
        batch = slice(8 * (i % 4), 8 * (i % 4) + 8)
        outputs.append(luca_forward(layout.views(flat), x[batch], layout.flow)[0])
        step(
            params,
            grads,
            *step.head(weight, sigma),
            *step.head(grad_weight, grad_sigma, grad=True),
            x[batch],
            y[batch],
        )
        optimizer.step(optimizer.learning_rates([0.05]))
    return {
        "flat": flat[0],
        "grad": grad[0],
        "momentum": optimizer.buffers[0][0],
        "weight": weight[0],
        "outputs": torch.stack(outputs),
    }


@pytest.mark.cpu_reference
def test_padding_r16_to_48_is_exactly_inert() -> None:
    """r = s = 16 trained inside a layout padded to 48 gives the same outputs, gradients and updated
    weights as r = 16 unpadded; padded parameters, gradients and momenta stay exactly 0."""
    d = 96
    torch.manual_seed(0)
    state = LuCA(d, 16, 16, "tosca").state_dict()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(32, d, generator=gen)
    y = torch.randint(0, 10, (32,), generator=gen)
    weight = torch.randn(10, d, generator=gen)
    weight[6:] = 0
    plain = _steps(ParamLayout(d, 16, 16, "tosca"), state, 16, 16, (x, y, weight), 12)
    padded_layout = ParamLayout(d, 48, 48, "tosca")
    padded = _steps(padded_layout, state, 16, 16, (x, y, weight), 12)
    torch.testing.assert_close(padded["outputs"], plain["outputs"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(padded["weight"], plain["weight"], rtol=1e-5, atol=1e-6)
    small = ParamLayout(d, 16, 16, "tosca")
    for key in ("flat", "grad", "momentum"):
        live = padded_layout.unpack(padded[key], 16, 16)
        reference = small.unpack(plain[key], 16, 16)
        for name in live:
            torch.testing.assert_close(live[name], reference[name], rtol=1e-5, atol=1e-7, msg=f"{key} {name}")
        padding = padding_mask(padded_layout, 16, 16)
        assert int(padding.sum()) == padded_layout.size - small.size
        assert torch.all(padded[key][padding] == 0), key  # parameters, gradients, momenta of padding: 0


@pytest.mark.cpu_reference
def test_cosine_schedule_is_pytorchs() -> None:
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=0.025)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=20, eta_min=1e-8)
    expected = []
    for _ in range(20):
        expected.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert cosine_lrs(0.025, 1e-8, 20) == expected  # the same floats, not just close


GROUP = [
    TrainConfig(r=4, s=4, l1=5e-4, lr=0.025, seed=0, epochs=4, batch_size=8),
    TrainConfig(r=8, s=6, l1=0.0, lr=0.05, seed=1, epochs=4, batch_size=8),
    TrainConfig(r=2, s=8, l1=1e-3, lr=0.01, seed=2, epochs=4, batch_size=8),
    TrainConfig(r=6, s=2, l1=1e-4, lr=0.03, seed=3, epochs=4, batch_size=8, momentum=0.8, weight_decay=1e-4),
]


@pytest.mark.heavy  # 5-8 s a step kind; a fast grouped check: test_sweeps.py::test_grouped_sweep_equals_one_point_per_engine_run
@pytest.mark.parametrize("step", ["torch", "auto"])
def test_a_group_of_four_equals_the_four_points_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """Four points that differ in r, s, L1, lr, seed (and momentum, weight decay), trained as one
    engine run, give each point's lone numbers: A_t per routing mode within 0.1 points and the first
    task's module allclose (rtol 1e-4). Both with the PyTorch step (batched matmuls over G) and
    with the default step (on a CPU the compiled one, configuration after configuration)."""
    monkeypatch.setenv("TOSCA_STEP", step)
    store = synthetic_store(tmp_path / "s.zarr", classes=8, per_class=24, views=2, spread=2.0)
    stream = StreamConfig(2, 2)
    grouped = fit_group(
        FitPlan.build(store, stream, trains=GROUP, dirs=[tmp_path / f"g{i}" for i in range(4)])
    )
    spread = set()
    for i, config in enumerate(GROUP):
        alone = fit_run(store, stream, config, None, tmp_path / f"a{i}")
        assert grouped[i].group_size == 4 and alone.group_size == 1
        for mode, block in alone.metrics()["routers"].items():
            np.testing.assert_allclose(grouped[i].metrics()["routers"][mode]["A_t"], block["A_t"], atol=1e-3)
            spread.add(block["A_last"])
        from safetensors.torch import load_file

        first_group = load_file(str(tmp_path / f"g{i}" / "state" / "task_000.safetensors"))
        first_alone = load_file(str(tmp_path / f"a{i}" / "state" / "task_000.safetensors"))
        assert first_group.keys() == first_alone.keys()
        for key in first_group:
            torch.testing.assert_close(first_group[key], first_alone[key], rtol=1e-4, atol=1e-6, msg=key)
    assert len(spread) > 2  # the points really differ, so the comparison is not vacuous


@pytest.mark.cpu_reference
@pytest.mark.parametrize("groups", [1, 3])
def test_cpu_logits_in_row_blocks_are_the_whole_matmul_bit_for_bit(groups: int) -> None:
    """Evaluation multiplies 512 test rows at a time on a CPU (MKL is faster at that height); the
    cosines must be exactly the single matmul's, so no routing decision moves."""
    gen = torch.Generator().manual_seed(0)
    units = F.normalize(torch.randn(groups, 1300, 64, generator=gen), dim=-1)
    w_unit = F.normalize(torch.randn(groups, 30, 64, generator=gen), dim=-1).transpose(1, 2)
    evaluator = ModuleScorer.__new__(ModuleScorer)  # only its device matters here
    evaluator.device = torch.device("cpu")
    blocks = evaluator._logits(units, w_unit)
    assert torch.equal(blocks, bmm(units, w_unit))  # the one matmul evaluation did before


@pytest.mark.cpu_reference
def test_group_members_must_share_flow_epochs_and_batch(tmp_path: Path) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=4)
    with pytest.raises(ValueError, match="must share epochs"):
        plan = FitPlan.build(store, StreamConfig(2, 2), trains=[TrainConfig(epochs=2), TrainConfig(epochs=3)])
        fit_group(plan, write_outputs=False)


@pytest.mark.gpu
@cuda
def test_cuda_step_equals_cpu_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same step on CUDA and CPU, float32: gradients agree to 1e-4 relative (TF32 off)."""
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    d, classes, groups = 64, 10, 3
    layout = ParamLayout(d, 8, 8, "tosca")
    torch.manual_seed(0)
    flat = torch.stack([layout.pack(LuCA(d, 8, 8).state_dict(), 8, 8) for _ in range(groups)])
    weight, sigma = torch.randn(groups, classes, d), torch.ones(groups)
    x, y = torch.randn(groups, 16, d), torch.randint(0, classes, (groups, 16))
    grads = {}
    for device in ("cpu", "cuda"):
        f, w, s = flat.to(device), weight.to(device), sigma.to(device)
        g, gw, gs = torch.zeros_like(f), torch.zeros_like(w), torch.zeros_like(s)
        step = LucaStep(layout, groups)
        step(
            step.views(f),
            step.views(g),
            *step.head(w, s),
            *step.head(gw, gs, grad=True),
            x.to(device),
            y.to(device),
        )
        grads[device] = (g.cpu(), gw.cpu(), gs.cpu())
    for cpu, gpu in zip(grads["cpu"], grads["cuda"], strict=True):
        torch.testing.assert_close(gpu, cpu, rtol=1e-4, atol=1e-6)


@pytest.mark.cpu_reference
def test_training_leaves_the_cuda_generators_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each module's init seeds the CPU generator only, inside fork_rng: a user's CUDA random
    state in the same process is not reseeded by a fit."""
    calls: list[int] = []
    monkeypatch.setattr(torch.cuda, "manual_seed_all", calls.append)
    store = synthetic_store(tmp_path / "s.zarr", classes=4, per_class=8)
    before = torch.random.get_rng_state()
    fit_group(FitPlan.build(store, StreamConfig(2, 2), trains=GROUP[:1], device="cpu"), write_outputs=False)
    assert calls == [] and torch.equal(torch.random.get_rng_state(), before)


@pytest.mark.gpu
@cuda
def test_cuda_run_agrees_with_cpu_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A whole run on CUDA and on the CPU: A_t per router within 1 point or two test images,
    whichever is more (float32 matmuls differ in rounding and SGD amplifies it a little over
    tasks, TF32 off; one image is 2.5 points of the 40 seen after the first task)."""
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    store = synthetic_store(
        tmp_path / "s.zarr", classes=8, per_class=24, test_per_class=20, views=2, spread=2.0
    )
    plan = FitPlan.build(store, StreamConfig(2, 2), trains=GROUP)
    cpu = fit_group(replace(plan, device="cpu"), write_outputs=False)
    gpu = fit_group(replace(plan, device="cuda"), write_outputs=False)
    seen = np.array([20 * 2 * (task + 1) for task in range(4)])  # test images after each task
    tolerance = np.maximum(0.01, 2 / seen) + 1e-9
    for a, b in zip(cpu, gpu, strict=True):
        for mode, block in a.metrics()["routers"].items():
            gap = np.abs(np.array(b.metrics()["routers"][mode]["A_t"]) - np.array(block["A_t"]))
            assert (gap <= tolerance).all(), (mode, gap)
