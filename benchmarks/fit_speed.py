"""Wall time of the paper preset on a CIFAR-100-shaped store (B0 Inc5: 20 tasks), beside a plain
eager PyTorch re-implementation of the same fit (benchmarks/eager_fit.py).

    python benchmarks/fit_speed.py [--train 50000] [--test 10000] [--dim 768] [--device cpu] [--no-eager]

Random class-structured features stand in for real ones (timing only). Prints seconds per task,
the split between training and evaluation, and the mean time of one SGD step. The goals on a
2-core machine: the whole 20-task run, training and all evaluations, in 20 s or less, and in at
most a quarter of the eager re-implementation's time (which takes minutes: `--no-eager` skips it).
Evaluation of task t overlaps the training of task t+1 on a multi-core CPU; TOSCA_OVERLAP_EVAL=0
turns that off (then the train and eval columns add up to the whole).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from eager_fit import eager_fit

from featcache.store import FeatureStore
from tosca_heads.method.protocol import StreamConfig
from tosca_heads.method.recipe import PRESETS
from tosca_heads.running.group import fit_run


def make_store(path: Path, n_train: int, n_test: int, dim: int, classes: int) -> FeatureStore:
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(classes, dim)).astype(np.float32)
    labels = {"train": np.arange(n_train) % classes, "test": np.arange(n_test) % classes}
    identity = {
        "dataset": {
            "name": "cifar100",
            "num_classes": classes,
            "samples": {"train": n_train, "test": n_test},
        },
        "backbone": {"alias": "random", "feature_dim": dim},
        "views": 0,
    }
    store = FeatureStore.create(
        path,
        identity,
        {},
        {s: [str(i) for i in range(len(v))] for s, v in labels.items()},
        labels,
        dim,
        0,
        4096,
        "float32",
    )
    for split, y in labels.items():
        for chunk in range(store.layout(split).n_chunks):
            sl = store.layout(split).chunk_slice(chunk)
            x = centres[y[sl]] + rng.normal(scale=2.0, size=(sl.stop - sl.start, dim)).astype(np.float32)
            store.write_chunk(split, chunk, x)
    return store


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--train", type=int, default=50_000)
    parser.add_argument("--test", type=int, default=10_000)
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--increment", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--no-eager", action="store_true", help="skip the eager re-implementation")
    parser.add_argument("--eager-threads", type=int, default=1, help="PyTorch threads of the eager fit")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = make_store(Path(tmp) / "bench.zarr", args.train, args.test, args.dim, args.classes)
        start = time.perf_counter()
        result = fit_run(
            store,
            StreamConfig(args.increment, args.increment),
            PRESETS["paper"],
            None,
            Path(tmp) / "run",
            device=args.device,
        )
        total = time.perf_counter() - start
        eager = (
            None
            if args.no_eager
            else eager_fit(store, StreamConfig(args.increment, args.increment), PRESETS["paper"])
        )
    train_s = sum(s.stats["seconds"] for s in result.stages)
    eval_s = sum(s.eval_seconds for s in result.stages)
    print(f"{len(result.stages)} tasks, {args.train:,} x {args.dim} train, {args.test:,} test, paper preset")
    for s in result.stages:
        print(f"  task {s.task:2d}  train {s.stats['seconds']:6.2f} s  eval {s.eval_seconds:5.2f} s")
    preset = PRESETS["paper"]
    per_task = [int(np.ceil(args.train / args.classes * args.increment / preset.batch_size))] * len(
        result.stages
    )
    steps = sum(per_task) * preset.epochs
    print(
        f"train {train_s:.1f} s ({1e3 * train_s / steps:.2f} ms per SGD step, {steps:,} steps) + eval {eval_s:.1f} s; "
        f"whole run incl. loading and writing {total:.1f} s (goal <= 20 s)"
    )
    print(
        f"A_last oracle {result.metrics()['routers']['oracle']['A_last']:.3f}, "
        f"entropy {result.metrics()['routers']['entropy']['A_last']:.3f}"
    )
    if eager is not None:
        seconds, accuracy = eager
        print(
            f"eager re-implementation (autograd, torch.optim.SGD, every module on every seen test row after "
            f"each task, {args.eager_threads} thread(s)): {seconds:.1f} s, A_last entropy {accuracy:.3f}; the engine takes "
            f"{total / seconds:.2f} of its time (goal <= 0.25)"
        )


if __name__ == "__main__":
    main()
