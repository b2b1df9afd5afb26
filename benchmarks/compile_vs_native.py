"""The compiled C step against `torch.compile` of the PyTorch step, on this CPU (issue 45, 6a).

    python benchmarks/compile_vs_native.py [--shapes paper,demo] [--fits 2] [--mode MODE] [--dynamic]

Three ways of taking the same SGD step (LuCA + cosine classifier + cross-entropy + L1, momentum
SGD, `engine/steppers.py`): the compiled C step (`NativeStep`, csrc/luca_step.c), the PyTorch step
(`TorchStep`, eager) and the PyTorch step under `torch.compile` (inductor, its default mode unless
`--mode` says otherwise; `--dynamic` for dynamic=True), which would be the CPU path if the C step
went. The figures and the decision they led to: docs/benchmarks.md.

Prints, in turn:
1. that the compiled PyTorch step gives the eager step's numbers (and the C step's) to float
   rounding after a few dozen steps, so the timings compare the same arithmetic;
2. milliseconds per step at the paper's shape (d 768, r = s = 48, batch 48, 52 classes: the
   mean number of seen classes over a CIFAR-100 B0 Inc5 run) and at the demo's (EuroSAT,
   EfficientNet-Lite0: d 1280, r 80, 6 classes), the three kinds interleaved repeat by repeat,
   each after its warm-up (compilation excluded), median and range, one matmul thread (as
   `step_mode` trains);
3. the wall time of whole 20-task fits (`benchmarks/fit_speed.py`'s CIFAR-100-shaped synthetic
   store, the paper preset, evaluation included), each in a fresh process, the kinds interleaved
   round by round: the C step as the tool runs it (TOSCA_STEP=auto, its default threads) and on
   one thread (TOSCA_STEP_THREADS=1, as the compiled step runs), and the
   compiled PyTorch step as it would run without the C library (TOSCA_STEP=torch, so evaluation
   takes the PyTorch forward too) with inductor's on-disk cache empty ("cold": every kernel
   generated and built by the C++ compiler) and then filled by that fit ("warm": a user's later
   fit; Dynamo still traces in every process). Compile time and recompilations (the classifier
   grows every task, and the last batch of an epoch is smaller: new shapes) are counted from
   Dynamo's own counters.

The machine's load (`os.getloadavg`) is printed beside each measurement: other processes share it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from tosca_heads.engine import native
from tosca_heads.engine.device import step_mode
from tosca_heads.engine.layout import ParamLayout
from tosca_heads.engine.steppers import NativeStep, Step, StepTask, TorchStep
from tosca_heads.method.luca import LuCA
from tosca_heads.method.recipe import TrainConfig  # the paper recipe: momentum, weight decay, L1, batch

HERE = Path(__file__).resolve().parent


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f} (5 min {five:.1f})"


class CompiledStep(TorchStep):
    """The PyTorch step with its whole body (batch gather, forward, backward, SGD update and the
    tallies) under one `torch.compile`; the epoch loop stays in Python, as `TorchStep`'s."""

    def __init__(self, task: StepTask, mode: str | None = None, dynamic: bool | None = None):
        super().__init__(task)
        self._body = torch.compile(self._step_body, backend="inductor", mode=mode, dynamic=dynamic)

    def _step_body(self, index: torch.Tensor, neg_lr: list[torch.Tensor], size: int, track: bool) -> None:
        x, y = self.kernel.inputs(self.features, self.targets, index)
        result = self.kernel(self.params, self.grads, *self.head, *self.head_grad, x, y)
        self.optimizer.step(neg_lr)
        self._ce.add_(result.loss.double() * size)
        self._l1_term.add_(self.flat.abs().sum(1).mul_(self.l1).double() * size)
        if track:
            self._correct.add_((result.logits.argmax(-1) == y).sum(-1))

    def step(self, begin: int, size: int) -> None:
        self._body(self.order[:, begin : begin + size], self.neg_lr, size, self.track)


@dataclass(frozen=True)
class Shape:
    name: str
    dim: int
    r: int
    batch: int
    classes: int


ROWS = 2500  # one CIFAR-100 B0 Inc5 task's training rows


def _state(shape: Shape, seed: int = 0) -> tuple[StepTask, torch.Tensor, torch.Tensor]:
    """A step's task (the modules, classifier and targets it updates) and an epoch's features and
    batch order, the same for every kind."""
    d, r, classes = shape.dim, shape.r, shape.classes
    layout = ParamLayout(d, r, r, "tosca")
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    flat = layout.pack(LuCA(d, r, r).state_dict(), r, r).unsqueeze(0)
    weight = 0.03 * torch.randn(1, classes, d, generator=gen)
    sigma = torch.ones(1)
    features = torch.randn(ROWS, d, generator=gen)
    targets = torch.randint(0, classes, (ROWS,), generator=gen)
    order = torch.randperm(ROWS, generator=gen).unsqueeze(0)
    task = StepTask(layout, [TrainConfig(batch_size=shape.batch)], flat, weight, sigma, targets)
    return task, features, order


def make(kind: str, task: StepTask, compile_args: dict) -> Step:
    if kind == "c":
        return NativeStep(task, threads=1)
    if kind == "eager":
        return TorchStep(task)
    return CompiledStep(task, **compile_args)


KIND_NAMES = {
    "c": "C step (1 thread)",
    "eager": "PyTorch step, eager",
    "compiled": "PyTorch step, torch.compile",
}


def agreement(shape: Shape, steps: int, compile_args: dict) -> dict[str, float]:
    """Largest relative difference of the updated tensors and the epoch's CE sum after `steps`
    steps, compiled against eager and C against eager."""
    finals = {}
    for kind in ("eager", "compiled", "c"):
        task, features, order = _state(shape)
        step = make(kind, task, compile_args)
        step.start_epoch(features, order, [0.025], track=True)
        step.run_epoch(steps * shape.batch, shape.batch)
        finals[kind] = [*(t.clone() for t in task.updated), step.epoch_sums()[0].float().clone()]

    def worst(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
        return max(
            float((x - y).abs().max() / y.abs().max().clamp_min(1e-30)) for x, y in zip(a, b, strict=True)
        )

    return {
        "compiled vs eager": worst(finals["compiled"], finals["eager"]),
        "C vs eager": worst(finals["c"], finals["eager"]),
    }


def step_times(shape: Shape, kinds: Sequence[str], steps: int, repeats: int, compile_args: dict) -> dict:
    """ms per step of each kind, its repeats interleaved with the other kinds' (whole epochs of
    `steps` steps; C: one call per epoch, as training runs it)."""
    runs: dict[str, Callable[[], None]] = {}
    for kind in kinds:
        task, features, order = _state(shape)
        step = make(kind, task, compile_args)
        step.start_epoch(features, order, [0.025], track=False)
        rows = steps * shape.batch

        def run(step: Step = step, rows: int = rows) -> None:
            step.run_epoch(rows, shape.batch)

        start = time.perf_counter()
        run()  # warm-up: compilation, first-touch of memory
        runs[kind] = run
        print(f"  warm-up {KIND_NAMES[kind]}: {time.perf_counter() - start:.1f} s", flush=True)
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    for _ in range(repeats):
        for kind, run in runs.items():
            start = time.perf_counter()
            run()
            times[kind].append((time.perf_counter() - start) / steps * 1e3)
    return times


# ----------------------------------------------------------------------------- whole fits

# label, the step the child takes, the environment it runs in
FIT_KINDS = (
    ("C step", "c", {"TOSCA_STEP": "auto"}),
    ("C step, 1 thread", "c", {"TOSCA_STEP": "auto", "TOSCA_STEP_THREADS": "1"}),
    ("compiled, cold", "compiled", {"TOSCA_STEP": "torch"}),
    ("compiled, warm", "compiled", {"TOSCA_STEP": "torch"}),
)


def one_fit(store_path: str, kind: str, compile_args: dict) -> dict:
    """One 20-task fit in this process (the child of `--one-fit`), as a dict of figures."""
    from featcache.store import FeatureStore
    from tosca_heads.engine import trainer
    from tosca_heads.method.protocol import StreamConfig
    from tosca_heads.method.recipe import PRESETS
    from tosca_heads.running.group import fit_run

    if kind == "compiled":  # the trainer takes this step wherever it would take TorchStep or NativeStep
        trainer.make_step = lambda task, threads=1: CompiledStep(task, **compile_args)
    store = FeatureStore.open(Path(store_path))
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        result = fit_run(store, StreamConfig(5, 5), PRESETS["paper"], None, Path(tmp) / "run", device="cpu")
        wall = time.perf_counter() - start
    figures = {
        "wall": wall,
        "train": sum(s.stats["seconds"] for s in result.stages),
        "eval": sum(s.eval_seconds for s in result.stages),
        "tasks": len(result.stages),
        "A_last": result.metrics()["routers"]["entropy"]["A_last"],
    }
    if kind == "compiled":
        from torch._dynamo.utils import compilation_time_metrics, counters

        figures["graphs"] = int(counters["stats"]["unique_graphs"])
        figures["graph_breaks"] = int(sum(counters["graph_break"].values()))
        # Dynamo's own total of the time spent compiling frames (tracing, AOT, inductor, C++)
        figures["compile_s"] = float(sum(compilation_time_metrics.get("_compile.compile_inner", [])))
    return figures


def fit_in_child(store: Path, kind: str, env: dict, compile_args: dict, cache: Path) -> dict:
    env = {
        **os.environ,
        **env,
        "PYTHONPATH": os.pathsep.join([str(HERE.parent), str(HERE)]),
        "TORCHINDUCTOR_CACHE_DIR": str(cache),
    }
    argv = [sys.executable, str(Path(__file__).resolve()), "--one-fit", kind, "--store", str(store)]
    argv += ["--mode", compile_args["mode"]] if compile_args["mode"] else []
    argv += ["--dynamic"] if compile_args["dynamic"] else []
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the {kind} fit failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def fits(args: argparse.Namespace, compile_args: dict) -> None:
    from fit_speed import make_store

    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "bench.zarr"
        make_store(store, args.train, args.test, args.dim, args.fit_classes)
        rows: list[tuple[str, dict, str]] = []
        for round_ in range(args.fits):
            cache = Path(tmp) / f"inductor-{round_}"  # empty for the round's cold fit
            for label, kind, env in FIT_KINDS:
                before = load()
                figures = fit_in_child(store, kind, env, compile_args, cache)
                rows.append((label, figures, f"{before} -> {load()}"))
                print(f"  round {round_ + 1} {label}: {json.dumps(figures)} ({rows[-1][2]})", flush=True)
    print()
    print("| fit | wall s | train s | eval s | compile s | graphs | graph breaks | A_last | load |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, f, loads in rows:
        compiled = (
            f"{f['compile_s']:.1f} | {f['graphs']} | {f['graph_breaks']}" if "compile_s" in f else "– | – | –"
        )
        print(
            f"| {label} | {f['wall']:.1f} | {f['train']:.1f} | {f['eval']:.1f} | {compiled} | "
            f"{f['A_last']:.4f} | {loads} |"
        )
    c = [f["wall"] for label, f, _ in rows if label == "C step"]
    for label in ("compiled, cold", "compiled, warm"):
        ratios = [f["wall"] / cw for (_, f, _), cw in zip([r for r in rows if r[0] == label], c, strict=True)]
        print(f"{label} / C step, round by round: {', '.join(f'{r:.2f}' for r in ratios)} (rule: <= 1.25)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=52, help="steps per timed epoch")
    parser.add_argument("--repeats", type=int, default=7, help="interleaved timed epochs per kind")
    parser.add_argument("--check-steps", type=int, default=40, help="steps of the agreement check")
    parser.add_argument("--mode", default=None, help="torch.compile mode (default: inductor's default)")
    parser.add_argument("--dynamic", action="store_true", help="torch.compile(dynamic=True)")
    parser.add_argument("--shapes", default="paper,demo", help="which step shapes to time (paper, demo)")
    parser.add_argument("--fits", type=int, default=2, help="rounds of whole fits (0: none)")
    parser.add_argument("--train", type=int, default=50_000, help="the fits' training rows")
    parser.add_argument("--test", type=int, default=10_000, help="the fits' test rows")
    parser.add_argument("--dim", type=int, default=768, help="the fits' feature dimension")
    parser.add_argument("--fit-classes", type=int, default=100, help="the fits' classes (5 a task)")
    parser.add_argument("--one-fit", choices=("c", "compiled"), help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    args = parser.parse_args()
    compile_args = {"mode": args.mode, "dynamic": True if args.dynamic else None}
    if args.one_fit:
        print(json.dumps(one_fit(args.store, args.one_fit, compile_args)))
        return
    why = native.load()[2]
    if why:
        raise SystemExit(f"no compiled C step on this machine: {why}")
    print(
        f"torch {torch.__version__}, {os.cpu_count()} CPUs, {load()}; torch.compile backend inductor, "
        f"mode {args.mode or 'default'}, dynamic {compile_args['dynamic']}"
    )
    shapes = {
        "paper": Shape("paper (CIFAR-100, ViT-B/16)", 768, 48, 48, 52),
        "demo": Shape("demo (EuroSAT, EfficientNet-Lite0)", 1280, 80, 48, 6),
    }
    with step_mode(torch.device("cpu"), 1):
        for key in filter(None, args.shapes.split(",")):
            shape = shapes[key]
            print(
                f"{shape.name}: d {shape.dim}, r = s = {shape.r}, batch {shape.batch}, {shape.classes} classes"
            )
            for pair, diff in agreement(shape, args.check_steps, compile_args).items():
                print(f"  after {args.check_steps} steps, {pair}: largest relative difference {diff:.1e}")
            before = load()
            times = step_times(shape, ("c", "eager", "compiled"), args.steps, args.repeats, compile_args)
            c = statistics.median(times["c"])
            for kind, values in times.items():
                median = statistics.median(values)
                print(
                    f"  {KIND_NAMES[kind]:>28}: {median:6.3f} ms/step ({min(values):.3f}-{max(values):.3f}), "
                    f"{median / c:.2f}x the C step"
                )
            print(f"  ({before} -> {load()})")
    if args.fits:
        fits(args, compile_args)


if __name__ == "__main__":
    main()
