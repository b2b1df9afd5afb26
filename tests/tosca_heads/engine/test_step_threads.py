"""The compiled step on two threads computes one thread's numbers bit for bit (the same BLAS calls
with the same shapes, threads only choose who runs which): across flows, full and remainder
batches, one-row steps, odd class counts, padded groups, a whole epoch in one call, two trainings
at once in one process, and a whole fit."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from support.stores import synthetic_store

from tosca_heads.engine import native
from tosca_heads.engine.device import step_mode
from tosca_heads.engine.layout import ParamLayout
from tosca_heads.engine.steppers import NativeStep, StepTask
from tosca_heads.method.luca import FLOWS, new_module
from tosca_heads.method.protocol import StreamConfig, ValidationConfig
from tosca_heads.method.recipe import TrainConfig
from tosca_heads.running.group import fit_run

# cpu_reference on each test but the whole fit, which writes a run folder (its plots need
# matplotlib, which the GPU bundle leaves out: benchmarks/gpu_bundle.py)
pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler here")


@dataclass
class Hyper:
    momentum: float
    weight_decay: float
    l1: float
    batch_size: int


HYPER = [Hyper(0.9, 0.0, 5e-4, 0), Hyper(0.5, 1e-3, 0.0, 0), Hyper(0.8, 1e-4, 1e-2, 0)]
# d, the configurations' bottlenecks (r, s), classes, rows, batch
SHAPES = [
    (768, [(48, 48)], 52, 100, 48),  # the paper's step: two full batches and a 4-row remainder
    (1280, [(80, 80)], 2, 61, 48),  # the demo's width and first task: a 13-row remainder
    (64, [(4, 6)], 7, 13, 5),  # odd classes, a 3-row remainder
    (32, [(4, 4), (2, 3), (4, 1)], 7, 44, 8),  # three padded configurations
    (40, [(5, 3)], 3, 7, 3),  # a one-row last step
    (100, [(7, 9)], 11, 1, 48),  # a task of one row
    (96, [(16, 8)], 5, 30, 64),  # a batch larger than the task
]


@dataclass
class Problem:
    """A group's modules, classifier and data, and every epoch's batch order (made once, so that
    trainings running at once draw nothing from shared generators)."""

    layout: ParamLayout
    hyper: list[Hyper]
    flat: torch.Tensor
    weight: torch.Tensor
    sigma: torch.Tensor
    features: torch.Tensor
    targets: torch.Tensor
    orders: list[torch.Tensor]
    batch: int


def _problem(flow: str, shape: tuple) -> Problem:
    d, bottlenecks, classes, n, batch = shape
    groups = len(bottlenecks)
    layout = ParamLayout(d, max(r for r, _ in bottlenecks), max(s for _, s in bottlenecks), flow)
    torch.manual_seed(0)
    flat = torch.stack([layout.pack(new_module(d, r, s, flow, 1).state_dict(), r, s) for r, s in bottlenecks])
    gen = torch.Generator().manual_seed(1)
    weight = 0.3 * torch.randn(groups, classes, d, generator=gen)
    weight[:, classes - max(1, classes // 3) :] = 0  # a new task's rows start at zero
    features = torch.randn(n, d, generator=gen)
    targets = torch.randint(0, classes, (n,), generator=gen)
    orders = [torch.stack([torch.randperm(n, generator=gen) for _ in range(groups)]) for _ in range(2)]
    hyper = [Hyper(h.momentum, h.weight_decay, h.l1, batch) for h in HYPER[:groups]]
    sigma = torch.linspace(0.8, 1.3, groups)
    return Problem(layout, hyper, flat, weight, sigma, features, targets, orders, batch)


def _train(problem: Problem, threads: int, whole_epochs: bool) -> dict[str, torch.Tensor]:
    flat, weight, sigma = problem.flat.clone(), problem.weight.clone(), problem.sigma.clone()
    step = NativeStep(StepTask(problem.layout, problem.hyper, flat, weight, sigma, problem.targets), threads)
    step.threads.choose = lambda: threads  # every epoch on `threads` threads, whatever is faster here
    n, batch, losses = len(problem.targets), problem.batch, []
    with step_mode(torch.device("cpu"), 1):
        for epoch, order in enumerate(problem.orders):
            step.start_epoch(problem.features, order, [0.05, 0.02, 0.03][: len(flat)], track=epoch == 1)
            if whole_epochs:
                step.run_epoch(n, batch)
            else:
                for begin in range(0, n, batch):
                    step.step(begin, min(batch, n - begin))
            losses.append(torch.stack(step.epoch_sums()).clone())
    assert not torch.equal(flat, problem.flat)  # training moved the modules
    correct = step.correct()
    return {
        "flat": flat,
        "weight": weight,
        "sigma": sigma,
        "epoch losses": torch.stack(losses),
        "correct": torch.tensor(correct),
        **{f"last gradient {i}": g for i, g in enumerate(step.grads)},
    }


def _assert_identical(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    for name in a:
        assert torch.equal(a[name], b[name]), f"{name} differs"


@pytest.mark.cpu_reference
@pytest.mark.parametrize("flow", FLOWS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"d{s[0]}-G{len(s[1])}-C{s[2]}-n{s[3]}-b{s[4]}")
def test_two_threads_give_one_threads_numbers_bit_for_bit(flow: str, shape: tuple) -> None:
    problem = _problem(flow, shape)
    _assert_identical(_train(problem, 1, whole_epochs=False), _train(problem, 2, whole_epochs=False))


@pytest.mark.cpu_reference
@pytest.mark.parametrize("threads", [1, 2])
def test_an_epoch_in_one_call_is_its_steps_one_by_one(threads: int) -> None:
    for shape in (SHAPES[0], SHAPES[3], SHAPES[4]):
        problem = _problem("tosca", shape)
        _assert_identical(_train(problem, 1, whole_epochs=False), _train(problem, threads, whole_epochs=True))


@pytest.mark.cpu_reference
def test_two_trainings_at_once_in_one_process_give_their_numbers() -> None:
    """Two threads each train on two step threads at once: one takes the helper, the other finds
    it busy and runs alone; both end as they do trained one after the other."""
    problems = [_problem("tosca", SHAPES[0]), _problem("tosca_r", SHAPES[3])]
    alone = [_train(problem, 1, whole_epochs=True) for problem in problems]
    together: list[dict[str, torch.Tensor]] = [{}, {}]

    def train(i: int) -> None:
        together[i] = _train(problems[i], 2, whole_epochs=True)

    workers = [threading.Thread(target=train, args=(i,)) for i in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    for a, b in zip(alone, together, strict=True):
        _assert_identical(a, b)


def _tensors(run: Path) -> dict[str, torch.Tensor]:
    return {f"{f.name}:{k}": v for f in sorted(run.glob("*.safetensors")) for k, v in load_file(f).items()}


def _figures(run: Path) -> dict:
    metrics = json.loads((run / "metrics.json").read_text())
    for task in metrics["tasks"]:
        del task["seconds"], task["eval_seconds"]
    return metrics


def test_a_fit_on_two_step_threads_is_the_fit_on_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every figure of metrics.json (A_t of every router, each task's loss and training accuracy)
    and every saved tensor, with remainder batches in every task and a validation split."""
    store = synthetic_store(tmp_path / "s.zarr", classes=6, per_class=23, dim=48, views=2, spread=2.0)
    config = TrainConfig(r=5, s=3, epochs=3, batch_size=10)
    monkeypatch.setenv("TOSCA_STEP", "native")
    runs = {}
    for threads in ("1", "2"):
        monkeypatch.setenv("TOSCA_STEP_THREADS", threads)
        runs[threads] = tmp_path / f"run-{threads}"
        fit_run(store, StreamConfig(2, 2), config, None, runs[threads], validation=ValidationConfig(0.2, 1))
    assert _figures(runs["1"]) == _figures(runs["2"])
    one, two = _tensors(runs["1"]), _tensors(runs["2"])
    assert one.keys() == two.keys() and len(one) > 6
    _assert_identical(one, two)
