"""Cost of one SGD step of the paper recipe (CIFAR-100 shape: d = 768, r = s = 48, batch 48, C classes),
the engine's written-out step against autograd through the reference modules, for G stacked
configurations.

    python benchmarks/step_speed.py [--device cpu|cuda] [--groups 1,8] [--classes 52] [--steps 300]

Prints milliseconds per step and configuration-steps per second, for the PyTorch step and (on a
CPU) the compiled C step that training uses there, on one thread and on two (whole epochs in one
call, as training runs them: the helper thread gathers the next batch and updates the classifier
while the next step's forward runs). The autograd row is the step as a plain PyTorch trainer
would take it (reference LuCA + cosine_logits + F.cross_entropy + torch.optim.SGD, L1 added to
the gradients), so both are measured on the same machine, same day.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from tosca_foundation.devices import resolve_device
from tosca_heads.engine import native
from tosca_heads.engine.device import step_mode
from tosca_heads.engine.layout import ParamLayout
from tosca_heads.engine.steppers import NativeStep, Step, StepTask, TorchStep
from tosca_heads.method.classifier import cosine_logits, new_rows
from tosca_heads.method.luca import LuCA
from tosca_heads.method.recipe import TrainConfig  # the paper recipe: momentum, weight decay, L1, batch


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def engine_step_ms(
    kind: Callable[..., Step], groups: int, args: argparse.Namespace, device: torch.device
) -> list[float]:
    """The trainer's inner step (forward, backward and update) of `kind` (TorchStep or NativeStep)."""
    d, r, batch, classes = args.dim, args.r, args.batch, args.classes
    layout = ParamLayout(d, r, r, "tosca")
    torch.manual_seed(0)
    flat = torch.stack([layout.pack(LuCA(d, r, r).state_dict(), r, r) for _ in range(groups)]).to(device)
    weight = (0.03 * torch.randn(groups, classes, d)).to(device)
    sigma = torch.ones(groups, device=device)
    features = torch.randn(2500, d, device=device)
    targets = torch.randint(0, classes, (2500,), device=device)
    order = torch.stack([torch.randperm(2500) for _ in range(groups)]).to(device)
    step = kind(StepTask(layout, [TrainConfig(batch_size=batch)] * groups, flat, weight, sigma, targets))
    step.start_epoch(features, order, [0.025] * groups, track=False)
    if isinstance(step, NativeStep):
        step.threads.choose = lambda: step.threads.most  # every epoch on this many threads

        def run(n: int) -> None:  # whole epochs of 52 steps, as training runs them
            for _ in range(max(1, n // 52)):
                step.run_epoch(52 * batch, batch)

    else:

        def run(n: int) -> None:
            for i in range(n):
                step.step((i % 52) * batch, batch)

    return _timed(run, args, device)


def autograd_step_ms(args: argparse.Namespace, device: torch.device) -> list[float]:
    d, r, batch, classes = args.dim, args.r, args.batch, args.classes
    torch.manual_seed(0)
    module = LuCA(d, r, r).to(device)
    weight = new_rows(classes, d, first_task=True).to(device).requires_grad_()
    sigma = torch.ones(1, device=device, requires_grad=True)
    params = list(module.parameters())
    optimizer = torch.optim.SGD([*params, weight, sigma], lr=0.025, momentum=0.9)
    features = torch.randn(2500, d, device=device)
    targets = torch.randint(0, classes, (2500,), device=device)
    order = torch.randperm(2500).to(device)

    def run(n: int) -> None:
        for i in range(n):
            index = order[(i % 52) * batch : (i % 52) * batch + batch]
            loss = F.cross_entropy(cosine_logits(module(features[index]), weight, sigma), targets[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch._foreach_add_([p.grad for p in params], torch._foreach_sign(params), alpha=5e-4)
            optimizer.step()

    return _timed(run, args, device)


def _timed(run: Callable[[int], None], args: argparse.Namespace, device: torch.device) -> list[float]:
    run(20)
    _sync(device)
    times = []
    steps = max(52, args.steps // 52 * 52)
    for _ in range(args.repeats):
        start = time.perf_counter()
        run(steps)
        _sync(device)
        times.append((time.perf_counter() - start) / steps * 1e3)
    return times


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--groups", default="1,8", help="comma-separated G values for the engine")
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--r", type=int, default=48)
    parser.add_argument("--batch", type=int, default=48)
    parser.add_argument(
        "--classes", type=int, default=52, help="the mean number of seen classes over a 20-task run"
    )
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-autograd", action="store_true")
    parser.add_argument(
        "--matmul-threads",
        type=_at_least_one,
        default=1,
        help="MKL threads per matmul (1: as `tosca fit` trains while evaluating on the other core)",
    )
    args = parser.parse_args()
    device = resolve_device(args.device)
    print(f"device {device}, d {args.dim}, r = s = {args.r}, batch {args.batch}, {args.classes} classes")
    print(f"{'step':>16} {'G':>5} {'ms/step (median, min-max)':>28} {'config-steps/s':>15}")
    with step_mode(device, args.matmul_threads):
        rows = [] if args.no_autograd else [("autograd", 1, autograd_step_ms(args, device))]
        kinds = [("torch-step", TorchStep)]
        if device.type == "cpu" and native.load()[0] is not None:
            kinds.append(("compiled-step", NativeStep))
            kinds.append(("compiled-2-threads", functools.partial(NativeStep, threads=2)))
        elif device.type == "cpu":
            print(f"(no compiled step: {native.load()[2]})")
        for name, kind in kinds:
            rows += [
                (name, g, engine_step_ms(kind, g, args, device))
                for g in (int(v) for v in args.groups.split(","))
            ]
    for name, groups, times in rows:
        median = statistics.median(times)
        print(
            f"{name:>16} {groups:>5} {median:>10.3f} ({min(times):.3f}-{max(times):.3f}) {' ' * 6}"
            f"{groups * 1e3 / median:>15,.0f}"
        )


if __name__ == "__main__":
    main()
