"""Runner: plan an extraction, open or create its store, compute the pending chunks.

`plan_extraction` resolves names into a backbone, a dataset and a preprocessing policy and
decides the store's identity; `run_extraction` computes only the chunks not yet flagged done,
locally (DataLoader workers) or on a Dask cluster (`featcache.distributor`).
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from featcache.backbones import BackboneSpec, LoadedBackbone, load_backbone, resolve_backbone
from featcache.datasets import DatasetSource, SplitSamples, load_dataset
from featcache.errors import UserError
from featcache.mapper import FeatureMapper, default_batch_size, resolve_device, resolve_precision
from featcache.reader import SampleImages, chunk_batches, make_loader
from featcache.store import DTYPES, SPLITS, FeatureStore, identity_differences
from featcache.transforms import POLICIES, Preprocessing, make_preprocessing
from featcache.writer import ChunkWriter

# progress(split, images_done_now, images_total_for_split)
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class ExtractRequest:
    """Everything a user can ask of `tosca extract` (the CLI's flags, resolved to values)."""

    model: str
    dataset: str
    data_root: Path | None = None
    cache_dir: Path = Path("cache")
    store: Path | None = None
    weights: Path | None = None
    random_init: bool = False
    policy: str | None = None
    views: int = 0
    seed: int = 0
    dtype: str = "float32"
    batch_size: int | None = None  # None: default_batch_size(device)
    workers: int | None = None  # None: default_workers()
    device: str = "auto"
    precision: str = "auto"
    chunk_size: int = 512
    limit_per_class: int | None = None
    overwrite: bool = False
    scheduler: str | None = None

    def validate(self) -> None:
        checks = [
            (self.views >= 0, f"--views must be 0 or more, got {self.views}"),
            (
                self.batch_size is None or self.batch_size >= 1,
                f"--batch-size must be at least 1, got {self.batch_size}",
            ),
            (self.workers is None or self.workers >= 0, f"--workers must be 0 or more, got {self.workers}"),
            (self.chunk_size >= 1, f"--chunk-size must be at least 1, got {self.chunk_size}"),
            (self.dtype in DTYPES, f"unknown --dtype {self.dtype!r}: use one of {', '.join(DTYPES)}"),
            (
                self.policy is None or self.policy in POLICIES,
                f"unknown --policy {self.policy!r}: use {', '.join(POLICIES)}",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise UserError(message)


@dataclass
class ExtractPlan:
    request: ExtractRequest
    spec: BackboneSpec
    backbone: LoadedBackbone
    dataset: DatasetSource
    preprocessing: Preprocessing
    precision: str
    device: str
    batch_size: int
    store_path: Path
    identity: dict[str, Any]
    meta: dict[str, Any]


@dataclass
class ExtractSummary:
    store: Path
    samples: dict[str, int]
    dim: int
    views: int
    images_computed: int
    chunks_computed: int
    chunks_skipped: int
    seconds: float
    store_bytes: int
    already_done: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def images_per_second(self) -> float:
        return self.images_computed / self.seconds if self.seconds > 0 else 0.0


def default_workers() -> int:
    """One core stays with the forward pass: on 2 cores, 2 decoders cost 10% of the throughput."""
    return max(0, min(8, (os.cpu_count() or 1) - 1))


def default_store_path(cache_dir: Path, dataset: str, spec: BackboneSpec, policy: str) -> Path:
    suffix = "" if policy == spec.default_policy else f"-{policy}"
    return Path(cache_dir) / dataset / f"{spec.alias}{suffix}.zarr"


def _ids_sha256(samples: SplitSamples) -> str:
    digest = hashlib.sha256()
    for sample_id, label in zip(samples.ids, samples.labels.tolist(), strict=True):
        digest.update(f"{sample_id}\x1f{label}\n".encode())
    return digest.hexdigest()


def _versions() -> dict[str, str]:
    import timm
    import torch
    import torchvision
    import zarr

    import featcache

    return {
        "tosca": featcache.__version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "timm": timm.__version__,
        "zarr": zarr.__version__,
        "numpy": np.__version__,
    }


def plan_extraction(request: ExtractRequest) -> ExtractPlan:
    request.validate()
    spec = resolve_backbone(request.model)
    dataset = load_dataset(request.dataset, request.data_root, request.cache_dir, request.limit_per_class)
    backbone = load_backbone(spec, request.weights, request.random_init)
    policy = request.policy or spec.default_policy
    prep = make_preprocessing(policy, backbone.data_config)
    device = resolve_device(request.device)
    precision = resolve_precision(request.precision, device)
    store_path = (
        Path(request.store)
        if request.store
        else default_store_path(request.cache_dir, request.dataset, spec, policy)
    )
    dataset_attrs = dataset.attrs()
    identity = {
        "backbone": {k: v for k, v in backbone.attrs().items() if k != "weights_file"},
        "preprocessing": prep.attrs(),
        "dataset": {
            **{k: v for k, v in dataset_attrs.items() if k != "source"},
            "ids_sha256": {split: _ids_sha256(s) for split, s in dataset.splits.items()},
        },
        "views": request.views,
        "seed": request.seed,
        "dtype": request.dtype,
        "chunk_size": request.chunk_size,
        "precision": precision,
    }
    meta = {
        "backbone_weights_file": backbone.weights_file,
        "dataset_source": dataset.source,
        "compute": {"device": device.type, "precision": precision},
        "versions": _versions(),
    }
    batch_size = request.batch_size or default_batch_size(device)
    return ExtractPlan(
        request, spec, backbone, dataset, prep, precision, str(device), batch_size, store_path, identity, meta
    )


def open_or_create_store(plan: ExtractPlan) -> tuple[FeatureStore, bool]:
    """(store, created). Refuses an existing store made with another configuration."""
    path = plan.store_path
    if path.exists() and not plan.request.overwrite:
        store = FeatureStore.open(path, mode="r+")
        diffs = identity_differences(store.identity, plan.identity)
        if diffs:
            shown = "; ".join(diffs[:4]) + (f"; and {len(diffs) - 4} more" if len(diffs) > 4 else "")
            raise UserError(
                f"store {path} was made with another configuration ({shown}); "
                "pass --overwrite to replace it or --store PATH for a new one"
            )
        return store, False
    staging = path.with_name(path.name + ".creating")
    shutil.rmtree(staging, ignore_errors=True)
    FeatureStore.create(
        staging,
        plan.identity,
        plan.meta,
        ids={s: plan.dataset.splits[s].ids for s in SPLITS},
        labels={s: plan.dataset.splits[s].labels for s in SPLITS},
        dim=plan.backbone.feature_dim,
        views=plan.request.views,
        chunk_size=plan.request.chunk_size,
        dtype=plan.request.dtype,
    )
    if path.exists():
        shutil.rmtree(path)
    staging.rename(path)  # a store appears whole or not at all
    return FeatureStore.open(path, mode="r+"), True


def extract_chunks(
    store: FeatureStore,
    split: str,
    chunks: list[int],
    samples: SplitSamples,
    prep: Preprocessing,
    mapper: FeatureMapper,
    seed: int,
    batch_size: int,
    workers: int,
    progress: Progress | None = None,
) -> int:
    """Compute and write the given chunks of one split; returns the number of images forwarded."""
    views = store.views if split == "train" else 0
    batches = chunk_batches(store.layout(split), chunks, batch_size)
    loader = make_loader(SampleImages(samples, prep, split, seed, views), batches, workers)
    writer = ChunkWriter(store, split, str(store.group[f"{split}/features"].dtype))
    images = 0
    total = sum(len(b) for b in batches) * (1 + views)
    for batch in loader:
        if batch.errors:
            chunk = batch.indices[0] // store.chunk_size
            raise UserError(
                f"cannot read image {batch.errors[0]}; stopped, {split} chunk {chunk} not marked done"
            )
        assert batch.images is not None
        out = mapper(batch.images)
        n = len(batch.indices)
        view_out = out[n:].reshape(n, views, -1) if views else None
        writer.add(batch.indices, out[:n], view_out)
        images += out.shape[0]
        if progress is not None:
            progress(split, out.shape[0], total)
    return images


def run_extraction(plan: ExtractPlan, progress: Progress | None = None) -> ExtractSummary:
    start = time.perf_counter()
    store, _ = open_or_create_store(plan)
    pending = {split: store.pending_chunks(split) for split in SPLITS}
    total_chunks = sum(store.layout(s).n_chunks for s in SPLITS)
    n_pending = sum(len(c) for c in pending.values())
    samples = {s: len(plan.dataset.splits[s]) for s in SPLITS}
    if n_pending == 0:
        return ExtractSummary(
            store.path,
            samples,
            store.dim,
            store.views,
            0,
            0,
            total_chunks,
            time.perf_counter() - start,
            store.size_bytes(),
            already_done=True,
        )
    req = plan.request
    if req.scheduler:
        from featcache.distributor import extract_on_cluster

        images = extract_on_cluster(plan, store, pending, req.scheduler, progress)
    else:
        mapper = FeatureMapper(
            plan.backbone.model, resolve_device(plan.device), plan.precision, plan.batch_size
        )
        images = 0
        for split in SPLITS:
            if pending[split]:
                images += extract_chunks(
                    store,
                    split,
                    pending[split],
                    plan.dataset.splits[split],
                    plan.preprocessing,
                    mapper,
                    req.seed,
                    plan.batch_size,
                    default_workers() if req.workers is None else req.workers,
                    progress,
                )
    store.touch()
    return ExtractSummary(
        store.path,
        samples,
        store.dim,
        store.views,
        images,
        n_pending,
        total_chunks - n_pending,
        time.perf_counter() - start,
        store.size_bytes(),
    )
