"""Distributor: pending chunks as Dask tasks; each worker loads the backbone once and writes its chunks.

Chunks are whole-chunk writes by exactly one writer, so many workers (or machines sharing the
store path) can fill one store; the seeded views make their output identical to a local run.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from featcache.backbones import BackboneSpec, LoadedBackbone, load_backbone
from featcache.datasets import SplitSamples
from featcache.extract import ExtractPlan, Progress, extract_chunks
from featcache.mapper import FeatureMapper, resolve_device
from featcache.store import FeatureStore
from featcache.transforms import Preprocessing

_BACKBONES: dict[tuple, LoadedBackbone] = {}
_BACKBONES_LOCK = threading.Lock()


@dataclass(frozen=True)
class ChunkJob:
    """One unit of distributed work: some chunks of one split (the samples travel separately)."""

    store_path: str
    split: str
    chunks: tuple[int, ...]
    preprocessing: Preprocessing
    spec: BackboneSpec
    weights: str | None
    random_init: bool
    weights_sha256: str
    seed: int
    batch_size: int
    device: str
    precision: str


def _backbone_on_worker(job: ChunkJob) -> LoadedBackbone:
    """Load once per worker process; refuse weights that differ from what the store records."""
    key = (job.spec, job.weights, job.random_init)
    with _BACKBONES_LOCK:
        if key not in _BACKBONES:
            loaded = load_backbone(job.spec, Path(job.weights) if job.weights else None, job.random_init)
            if loaded.weights_sha256 != job.weights_sha256:
                raise RuntimeError(f"worker loaded other weights for {job.spec.alias} than the store records")
            _BACKBONES[key] = loaded
        return _BACKBONES[key]


def run_chunk_job(job: ChunkJob, samples: SplitSamples) -> int:
    """Runs on a worker; `samples` is the split's list, scattered to each worker once."""
    backbone = _backbone_on_worker(job)
    mapper = FeatureMapper(backbone.model, resolve_device(job.device), job.precision, job.batch_size)
    store = FeatureStore.open(job.store_path, mode="r+")
    return extract_chunks(
        store, job.split, list(job.chunks), samples, job.preprocessing, mapper, job.seed, job.batch_size, 0
    )


def extract_on_cluster(
    plan: ExtractPlan,
    store: FeatureStore,
    pending: dict[str, list[int]],
    scheduler: str,
    progress: Progress | None = None,
) -> int:
    from distributed import Client, as_completed

    req = plan.request
    device = "auto" if plan.device.startswith("cuda") else "cpu"
    jobs = [
        ChunkJob(
            str(store.path.resolve()),
            split,
            (chunk,),
            plan.preprocessing,
            plan.spec,
            str(req.weights) if req.weights else None,
            req.random_init,
            plan.backbone.weights_sha256,
            req.seed,
            plan.batch_size,
            device,
            plan.precision,
        )
        for split, chunks in pending.items()
        for chunk in chunks
    ]
    totals = {s: sum(_chunk_images(store, s, c) for c in pending[s]) for s in pending}
    images = 0
    with Client(scheduler) as client:
        scattered = {s: client.scatter(plan.dataset.splits[s], broadcast=True) for s in pending if pending[s]}
        futures = {client.submit(run_chunk_job, job, scattered[job.split], pure=False): job for job in jobs}
        for future in as_completed(futures):
            done = future.result()
            images += done
            if progress is not None:
                progress(futures[future].split, done, totals[futures[future].split])
    return images


def _chunk_images(store: FeatureStore, split: str, chunk: int) -> int:
    sl = store.layout(split).chunk_slice(chunk)
    return (sl.stop - sl.start) * (1 + (store.views if split == "train" else 0))
