"""Bare backbone forward on pre-made tensors vs the whole extract pipeline, same images and batch.

    python benchmarks/extract_throughput.py [--model effnet_lite0] [--per-class 40] [--workers 1]

The pipeline = decode + transform (DataLoader workers) + forward + whole-chunk zarr writes,
via the same `run_extraction` the CLI uses. Goal on the 2-core dev machine with
EfficientNet-Lite0: pipeline >= 0.9 x bare forward.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch

from featcache.extract import ExtractRequest, plan_extraction, run_extraction
from featcache.mapper import FeatureMapper, resolve_device

DATA = Path(os.environ.get("TOSCA_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


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
    parser.add_argument("--random-init", action="store_true")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(os.environ.get("TOSCA_BENCH_CACHE", tmp))
        request = ExtractRequest(
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
        )
        plan = plan_extraction(request)
        samples = plan.dataset.splits["train"]
        n = len(samples) + len(plan.dataset.splits["test"])

        # Pre-made tensors: every image of both splits decoded and transformed up front (untimed).
        tensors = [
            plan.preprocessing.clean(s.open_image(i))
            for s in plan.dataset.splits.values()
            for i in range(len(s))
        ]
        batches = [torch.stack(tensors[i : i + plan.batch_size]) for i in range(0, n, plan.batch_size)]
        mapper = FeatureMapper(
            plan.backbone.model, resolve_device(plan.device), plan.precision, plan.batch_size
        )
        mapper(batches[0])  # warm-up, as the pipeline's first batch also pays it
        start = time.perf_counter()
        for batch in batches:
            mapper(batch)
        bare = n / (time.perf_counter() - start)

        start = time.perf_counter()
        summary = run_extraction(plan)
        pipeline = summary.images_computed / (time.perf_counter() - start)

    print(
        f"model {args.model}  images {n}  batch {plan.batch_size}  workers {args.workers}  threads {torch.get_num_threads()}"
    )
    print(f"bare forward    {bare:8.1f} img/s")
    print(f"whole pipeline  {pipeline:8.1f} img/s  (decode + transform + forward + write)")
    print(f"ratio           {pipeline / bare:8.3f}  (goal >= 0.9)")


if __name__ == "__main__":
    main()
