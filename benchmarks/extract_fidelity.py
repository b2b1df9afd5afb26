"""How far a decoder or precision moves the cached features from the reference (pil, fp32), and its speed.

    python benchmarks/extract_fidelity.py --dataset eurosat --per-class 250 --vary decode
    python benchmarks/extract_fidelity.py --dataset eurosat --per-class 100 --vary precision

Extracts the same real subset twice (the reference, then `--decode torch` or `--precision bf16`)
and prints, per image: cosine between the two features (min, mean), the largest absolute
difference, how many are bit-identical; nearest-class-mean accuracy of each store on its test
split; and each extraction's img/s (whole pipeline). `--views V` also compares V seeded views.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from featcache.extraction import ExtractRequest, plan_extraction, run_extraction
from featcache.store import FeatureStore

DATA = Path(os.environ.get("TOSCA_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
ARCHIVES = {
    "eurosat": "eurosat/EuroSAT-RGB.tar.gz",
    "cifar10": "cifar10/cifar10-jpeg.tar.gz",
    "cifar100": "cifar100/cifar100-jpeg.tar.gz",
}
VARIANTS = {"decode": {"decode": "torch"}, "precision": {"precision": "bf16"}}


def ncm_accuracy(store: FeatureStore) -> float:
    x, y = store.features("train"), store.labels("train")
    classes = np.unique(y)
    means = np.stack([x[y == c].mean(0) for c in classes])
    means /= np.linalg.norm(means, axis=1, keepdims=True)
    test = store.features("test")
    scores = (test / np.linalg.norm(test, axis=1, keepdims=True)) @ means.T
    return float((classes[scores.argmax(1)] == store.labels("test")).mean())


def compare(a: np.ndarray, b: np.ndarray, what: str) -> None:
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    same = int((a == b).all(1).sum())
    print(
        f"{what:16s} cosine min {cos.min():.6f} mean {cos.mean():.6f}  max |diff| {np.abs(a - b).max():.4g}  "
        f"bit-identical {same}/{len(a)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="effnet_lite0")
    parser.add_argument("--dataset", default="eurosat", choices=sorted(ARCHIVES))
    parser.add_argument("--per-class", type=int, default=250)
    parser.add_argument("--vary", default="decode", choices=sorted(VARIANTS))
    parser.add_argument("--views", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(os.environ.get("TOSCA_BENCH_CACHE", tmp))
        reference = ExtractRequest(
            model=args.model,
            dataset=args.dataset,
            data_root=DATA / ARCHIVES[args.dataset],
            cache_dir=cache,
            store=Path(tmp) / "reference.zarr",
            limit_per_class=args.per_class,
            views=args.views,
            chunk_size=256,
            device=args.device,
            workers=args.workers,
            decode="pil",
            precision="fp32",
        )
        variant = replace(reference, store=Path(tmp) / "variant.zarr", **VARIANTS[args.vary])
        stores, rates = [], []
        for request in (reference, variant):
            summary = run_extraction(plan_extraction(request))
            stores.append(FeatureStore.open(summary.store))
            rates.append(summary.images_per_second)
        ref, var = stores
        label = f"{variant.decode}/{variant.precision}"
        print(
            f"{args.dataset} / {args.model}, {args.per_class} per class "
            f"(train {ref.layout('train').n}, test {ref.layout('test').n}), device {args.device}, "
            f"reference pil/fp32 vs {label}"
        )
        for split in ("train", "test"):
            compare(ref.features(split), var.features(split), f"{split} features")
        for k in range(args.views):
            compare(ref.view(k), var.view(k), f"train view {k}")
        print(
            f"NCM accuracy     pil/fp32 {100 * ncm_accuracy(ref):.2f}%   {label} {100 * ncm_accuracy(var):.2f}%"
        )
        print(f"pipeline         pil/fp32 {rates[0]:.1f} img/s   {label} {rates[1]:.1f} img/s")


if __name__ == "__main__":
    main()
