"""Bare backbone forward on pre-made tensors vs the whole extract pipeline, per decoder, same images and batch.

    python benchmarks/extract_throughput.py [--model effnet_lite0] [--per-class 40] [--workers 1]
        [--decode pil,torch] [--precision fp32] [--device auto] [--repeats 3] [--breakdown]

The pipeline = decode + transform (DataLoader workers, or the device stage for `torch` on CUDA)
+ forward + whole-chunk zarr writes, via the same `run_extraction` the CLI uses. `decode only`
is the decode + transform cost alone, one process, no forward: what a loader worker spends per
image. `--breakdown` also runs loader + forward without the store, per decoder, and splits the
main process's time per image into waiting for the loader and the forward, with the loader
workers' CPU time per image: where the time goes. Decoders are interleaved within each repeat, in alternating order, so that a busy machine
hurts both alike; figures are the median and the range over the repeats. Goal on the 2-core dev machine with
EfficientNet-Lite0: pipeline >= 0.9 x bare forward, and `torch` at least as fast as `pil`.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from featcache.extraction import ExtractPlan, ExtractRequest, plan_extraction, run_extraction
from featcache.pipeline.mapper import FeatureMapper
from featcache.pipeline.reader import SampleImages, chunk_batches, make_loader
from featcache.store import SplitLayout
from tosca_foundation.devices import resolve_device

DATA = Path(os.environ.get("TOSCA_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):8.1f}  ({min(values):.1f}-{max(values):.1f})"


def decode_only(plan: ExtractPlan) -> float:
    """Images per second of decode + clean transform in this process (torch at 1 thread, as in a worker)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        start, n = time.perf_counter(), 0
        for split, samples in plan.dataset.splits.items():
            dataset = SampleImages(samples, plan.preprocessing, split, 0, 0)
            for i in range(len(dataset)):
                assert dataset[i].error is None
                n += 1
        return n / (time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)


def breakdown(plan: ExtractPlan, mapper: FeatureMapper, workers: int) -> tuple[float, float, float]:
    """(ms waiting for the loader, ms in the forward, loader workers' CPU ms) per image, train split."""
    samples = plan.dataset.splits["train"]
    layout = SplitLayout(len(samples), 128)
    batches = chunk_batches(layout, list(range(layout.n_chunks)), plan.batch_size)
    loader = make_loader(SampleImages(samples, plan.preprocessing, "train", 0, 0), batches, workers)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wait = forward = 0.0
    n = 0
    batches_iter = iter(loader)
    while True:
        start = time.perf_counter()
        batch = next(batches_iter, None)
        if batch is None:
            break
        got = time.perf_counter()
        mapper(batch.images)
        wait, forward, n = wait + got - start, forward + time.perf_counter() - got, n + len(batch.indices)
    del batches_iter  # joins the workers, whose CPU time then counts as the children's
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return 1e3 * wait / n, 1e3 * forward / n, 1e3 * cpu / n


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="effnet_lite0")
    parser.add_argument("--data-root", type=Path, default=DATA / "eurosat" / "EuroSAT-RGB.tar.gz")
    parser.add_argument("--dataset", default="eurosat")
    parser.add_argument("--per-class", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--decode", default="pil,torch", help="comma-separated decoders to compare")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--random-init", action="store_true")
    parser.add_argument("--breakdown", action="store_true")
    args = parser.parse_args()
    decoders = [d.strip() for d in args.decode.split(",") if d.strip()]

    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(os.environ.get("TOSCA_BENCH_CACHE", tmp))
        base = ExtractRequest(
            model=args.model,
            dataset=args.dataset,
            data_root=args.data_root,
            cache_dir=cache,
            store=Path(tmp) / "bench.zarr",
            random_init=args.random_init,
            batch_size=args.batch_size,
            workers=args.workers,
            limit_per_class=args.per_class,
            chunk_size=128,
            overwrite=True,
            device=args.device,
            precision=args.precision,
        )
        plans = {d: plan_extraction(replace(base, decode=d, store=Path(tmp) / f"{d}.zarr")) for d in decoders}
        first = plans[decoders[0]]
        n = sum(len(s) for s in first.dataset.splits.values())

        # Pre-made tensors: every image of both splits decoded and transformed up front (untimed).
        tensors = [
            first.preprocessing.clean(s.open_image(i))
            for s in first.dataset.splits.values()
            for i in range(len(s))
        ]
        batches = [torch.stack(tensors[i : i + first.batch_size]) for i in range(0, n, first.batch_size)]
        mapper = FeatureMapper(
            first.backbone.model, resolve_device(first.device), first.precision, first.batch_size
        )
        mapper(batches[0])  # warm-up, as the pipeline's first batch also pays it

        bare: list[float] = []
        decode: dict[str, list[float]] = {d: [] for d in decoders}
        pipeline: dict[str, list[float]] = {d: [] for d in decoders}
        parts: dict[str, list[tuple[float, float, float]]] = {d: [] for d in decoders}
        for repeat in range(args.repeats):
            start = time.perf_counter()
            for batch in batches:
                mapper(batch)
            bare.append(n / (time.perf_counter() - start))
            for d in decoders if repeat % 2 == 0 else decoders[::-1]:  # alternate who goes first
                decode[d].append(decode_only(plans[d]))
                start = time.perf_counter()
                summary = run_extraction(plans[d])
                pipeline[d].append(summary.images_computed / (time.perf_counter() - start))
                compute = summary.extra["compute"]
                print(f"  {d:6s} {pipeline[d][-1]:7.1f} img/s  ({compute})", flush=True)
                if args.breakdown and resolve_device(plans[d].device).type == "cpu":
                    parts[d].append(breakdown(plans[d], mapper, args.workers))

    print(
        f"model {args.model}  dataset {args.dataset}  images {n}  batch {first.batch_size}  workers {args.workers}  "
        f"threads {torch.get_num_threads()}  device {first.device}  precision {first.precision}  "
        f"repeats {args.repeats}  (median, range)"
    )
    print(f"bare forward          {_spread(bare)} img/s")
    for d in decoders:
        print(f"decode only   {d:6s}  {_spread(decode[d])} img/s  (decode + transform, 1 process, 1 thread)")
    for d in decoders:
        ratio = [p / b for p, b in zip(pipeline[d], bare, strict=True)]
        print(
            f"whole pipeline {d:6s} {_spread(pipeline[d])} img/s  ratio {statistics.median(ratio):.3f} "
            f"({min(ratio):.3f}-{max(ratio):.3f}; goal >= 0.9)"
        )
    for d in decoders:
        if parts[d]:
            wait, forward, worker = (statistics.median(x) for x in zip(*parts[d], strict=True))
            print(
                f"breakdown {d:6s} per image: waiting for the loader {wait:6.2f} ms, forward {forward:6.2f} ms, "
                f"loader workers' CPU {worker:6.2f} ms (medians)"
            )


if __name__ == "__main__":
    main()
