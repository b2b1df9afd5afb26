"""A sweep on a CIFAR-100-shaped store, against what the same runs would cost if every run re-ran
the backbone on every image of every epoch, as the reference code does.

    python benchmarks/sweep_speed.py [--jobs N] [--train 50000] [--test 10000] [--model vit_b16]
    python benchmarks/sweep_speed.py --device cuda --group 256 --grid 256 --no-reference

`--grid 20` (default): r {8, 16, 32, 48, 96} x l1 {0, 1e-4, 5e-4, 1e-3}. `--grid 256`: r {8, 16,
24, 32, 48, 64, 96, 128} x l1 {0, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2} x seeds {0, 1, 2, 3}.
`--group N` trains up to N points per engine run (default: 1 on the CPU, as many as fit on CUDA).

Both sides are measured on this machine in this run: the sweep's wall time, and the backbone's
per-image forward time (random-init weights: the timing does not depend on the values). The
reference's backbone work per run is counted from the protocol: every epoch's training images,
one pass for the prototypes, and after each task the test images of all classes seen so far.
The store itself costs one backbone pass over train + test (reported too).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from fit_speed import make_store

from tosca_foundation.devices import resolve_device
from tosca_heads.method.protocol import TaskStream
from tosca_heads.method.recipe import PRESETS
from tosca_heads.requests.command_requests import SweepRequest
from tosca_heads.studies.sweeps import sweep

GRIDS = {
    "20": {"r": [8, 16, 32, 48, 96], "l1": [0.0, 1e-4, 5e-4, 1e-3]},
    "256": {
        "r": [8, 16, 24, 32, 48, 64, 96, 128],
        "l1": [0.0, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2],
        "seed": [0, 1, 2, 3],
    },
}


def backbone_seconds_per_image(model: str, batch: int, batches: int) -> float:
    from featcache.backbones import load_backbone, resolve_backbone

    loaded = load_backbone(resolve_backbone(model), None, random_init=True)
    net = loaded.model.eval()
    x = torch.randn(batch, 3, 224, 224)
    with torch.inference_mode():
        net(x)  # warm-up
        start = time.perf_counter()
        for _ in range(batches):
            net(x)
    return (time.perf_counter() - start) / (batch * batches)


def reference_forwards(train: np.ndarray, test: np.ndarray, stream: TaskStream, epochs: int) -> int:
    """Backbone forwards of one reference run: epochs x train + prototype pass + test after each task."""
    per_task_test = sum(len(stream.rows_seen(test, t)) for t in range(stream.num_tasks))
    return epochs * len(train) + len(train) + per_task_test


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--train", type=int, default=50_000)
    parser.add_argument("--test", type=int, default=10_000)
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--jobs", type=int, default=None, help="worker processes (default: cores; 1 on CUDA)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--group", type=int, default=None, help="points per engine run")
    parser.add_argument("--grid", choices=sorted(GRIDS), default="20")
    parser.add_argument("--model", default="vit_b16", help="backbone whose forward cost is measured")
    parser.add_argument("--batches", type=int, default=3, help="timed forward batches of 8 images")
    parser.add_argument("--no-reference", action="store_true", help="skip the backbone timing and ratios")
    args = parser.parse_args()
    device = resolve_device(args.device)
    jobs = args.jobs or (1 if device.type == "cuda" else os.cpu_count() or 1)
    grid = GRIDS[args.grid]

    with tempfile.TemporaryDirectory() as tmp:
        store = make_store(Path(tmp) / "bench.zarr", args.train, args.test, args.dim, 100)
        flags = {**{k: ",".join(map(str, v)) for k, v in grid.items()}, "init_cls": "5", "increment": "5"}
        request = SweepRequest(  # the paper's protocol: no validation split, as the figures before it
            store=store,
            out=Path(tmp) / "sweep",
            jobs=jobs,
            group=args.group,
            device=str(device),
            val_fraction=0.0,
            grid=flags,
        )
        start = time.perf_counter()
        outcome = sweep(request)
        sweep_s = time.perf_counter() - start
        stream = TaskStream.build(100, 5, 5)
        train = stream.remap(store.labels("train"))
        test = stream.remap(store.labels("test"))
    frame = outcome.frame
    print(
        f"sweep: {outcome.points} points ({' x '.join(f'{k} {v}' for k, v in grid.items())}), 20 tasks each, "
        f"{args.train:,} x {args.dim} train, {jobs} worker(s) on {device}, up to {outcome.group} points "
        f"per engine run: {sweep_s:.1f} s wall ({frame['run_seconds'].mean():.2f} s per point)"
    )
    if args.no_reference:
        return
    sec_per_image = backbone_seconds_per_image(args.model, 8, args.batches)
    print(
        f"{args.model} forward on this machine: {sec_per_image:.3f} s/image ({1 / sec_per_image:.1f} img/s)"
    )
    forwards = reference_forwards(train, test, stream, PRESETS["paper"].epochs)
    reference_s = outcome.points * forwards * sec_per_image
    extract_s = (args.train + args.test) * sec_per_image
    print(
        f"reference: {forwards:,} backbone forwards per run x {outcome.points} runs x {sec_per_image:.3f} s "
        f"= {reference_s:,.0f} s ({reference_s / 86400:.1f} days) on this machine"
    )
    print(
        f"ratio reference / sweep: {reference_s / sweep_s:,.0f}x; counting the one-time extraction "
        f"({extract_s:,.0f} s for {args.train + args.test:,} images): {reference_s / (sweep_s + extract_s):,.0f}x"
    )
    # The reference augments every epoch; the cached equivalent is a store with one view per epoch,
    # whose extraction costs (1 + V) forwards per training image. Training on views reads other
    # rows of the same size, so the sweep's cost is the one measured above.
    views = PRESETS["paper"].epochs
    extract_views_s = (args.train * (1 + views) + args.test) * sec_per_image
    print(
        f"with {views} cached views per training image (the reference's per-epoch augmentation): extraction "
        f"{extract_views_s:,.0f} s, ratio {reference_s / (sweep_s + extract_views_s):,.1f}x for these "
        f"{outcome.points} runs; each further run costs {sweep_s / outcome.points * jobs:,.0f} s of one core "
        f"instead of {forwards * sec_per_image:,.0f} s"
    )


if __name__ == "__main__":
    main()
