"""Distributor: pending chunks as Dask tasks; each worker process loads the backbone once, onto its device.

Chunks are whole-chunk writes by exactly one writer, so many workers (or machines sharing the
store path) can fill one store; the seeded views make their output identical to a local run.

The device is decided on the worker: `auto` is the worker's own GPU when it has one (under
dask-cuda, or `dask worker` with CUDA_VISIBLE_DEVICES set, that is `cuda` = its one visible
GPU), else its CPU. Precision and decoder are fixed by the store identity, not by the worker.
"""

from __future__ import annotations

import threading
from concurrent.futures import CancelledError
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from featcache.backbones import BackboneSpec, LoadedBackbone, load_backbone
from featcache.images.transforms import Preprocessing
from featcache.pipeline.chunks import Progress, extract_chunks
from featcache.pipeline.mapper import FeatureMapper, default_batch_size
from featcache.sources.datasets import SplitSamples
from featcache.store import FeatureStore
from tosca_foundation.devices import resolve_device
from tosca_foundation.plugins import load_plugins
from tosca_foundation.scheduler import SchedulerChoice, dask_client
from tosca_foundation.scheduler_link import each_finished, lost_scheduler, result_in_time

# Dask cannot recompute scattered data: when every worker holding a split's sample list dies
# (a worker killed right after the scatter, before the replicas landed), the jobs that need it
# are cancelled. They are idempotent whole-chunk writes, so the list is scattered again and
# only those jobs run again, a few times at most.
SCATTER_ROUNDS = 3

_BACKBONES: dict[tuple, LoadedBackbone] = {}
_MAPPERS: dict[tuple, FeatureMapper] = {}
_LOCK = threading.Lock()


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
    batch_size: int | None  # None: the worker's device default
    device: str  # auto (the worker's GPU if it has one), cpu or cuda
    precision: str
    torch_threads: int | None = None  # set on local:N clusters so N processes share the cores
    sources: tuple[str, ...] = ()  # each chunk's files fingerprint, as the planner saw them


def _backbone_on_worker(job: ChunkJob, device: torch.device) -> LoadedBackbone:
    """Load once per worker process and device; refuse weights that differ from what the store
    records. A mapper moves its model onto its device in place, so a model shared by a CPU and a
    CUDA mapper on one long-lived worker would leave one of them with weights on the other device."""
    key = (job.spec, job.weights, job.random_init, str(device))
    if key not in _BACKBONES:
        loaded = load_backbone(job.spec, Path(job.weights) if job.weights else None, job.random_init)
        if loaded.weights_sha256 != job.weights_sha256:
            raise RuntimeError(f"worker loaded other weights for {job.spec.alias} than the store records")
        _BACKBONES[key] = loaded
    return _BACKBONES[key]


def mapper_on_worker(job: ChunkJob) -> FeatureMapper:
    """One backbone per process, moved once onto this worker's device and reused by every job."""
    device = resolve_device(job.device)
    batch_size = job.batch_size or default_batch_size(device)
    key = (job.spec, job.weights, job.random_init, str(device), job.precision, batch_size)
    with _LOCK:
        if key not in _MAPPERS:
            _MAPPERS[key] = FeatureMapper(
                _backbone_on_worker(job, device).model, device, job.precision, batch_size
            )
        return _MAPPERS[key]


def run_chunk_job(job: ChunkJob, samples: SplitSamples) -> int:
    """Runs on a worker; `samples` is the split's list, scattered to each worker once."""
    load_plugins()  # a worker process has not run the CLI's start: its plug-in backbones
    if job.torch_threads is not None:
        torch.set_num_threads(job.torch_threads)
    mapper = mapper_on_worker(job)
    store = FeatureStore.open(job.store_path, mode="r+")
    return extract_chunks(
        store,
        job.split,
        list(job.chunks),
        samples,
        job.preprocessing,
        mapper,
        job.seed,
        mapper.micro_batch,
        0,  # a Dask worker process is daemonic: no DataLoader processes of its own
        sources=dict(zip(job.chunks, job.sources, strict=True)),
    )


def extract_on_cluster(
    template: ChunkJob,
    store: FeatureStore,
    pending: dict[str, list[int]],
    splits: dict[str, SplitSamples],
    scheduler: SchedulerChoice,
    progress: Progress | None = None,
    sources: dict[str, list[str]] | None = None,
) -> int:
    """Every pending chunk as one task on the cluster; returns the number of images forwarded."""
    jobs = [
        replace(
            template,
            store_path=str(store.path.resolve()),
            split=split,
            chunks=(chunk,),
            sources=(sources[split][chunk],) if sources else ("",),
        )
        for split, chunks in pending.items()
        for chunk in chunks
    ]
    totals = {s: sum(_chunk_images(store, s, c) for c in pending[s]) for s in pending}
    images = 0
    with dask_client(scheduler) as client:
        resources = gpu_resources(client)
        for _ in range(SCATTER_ROUNDS):
            splits_left = {job.split for job in jobs}
            scattered = {s: client.scatter(_absolute(splits[s]), broadcast=True) for s in splits_left}
            futures = {
                client.submit(run_chunk_job, job, scattered[job.split], pure=False, resources=resources): job
                for job in jobs
            }
            lost = []
            for future in each_finished(client, futures):  # bounded: scheduler_link
                try:
                    done = result_in_time(client, future)
                except CancelledError as exc:  # its scattered sample list died with a worker
                    if lost_scheduler(exc, client):  # or the scheduler went: one line (dask_client)
                        raise
                    lost.append(futures[future])
                    continue
                images += done
                if progress is not None:
                    progress(futures[future].split, done, totals[futures[future].split])
            jobs = lost
            if not jobs:
                return images
    raise RuntimeError(
        f"{len(jobs)} chunk job(s) lost their scattered sample list {SCATTER_ROUNDS} times over: "
        "workers keep dying; see the Dask worker logs"
    )


def _absolute(samples: SplitSamples) -> SplitSamples:
    """A worker on another machine (or in another folder) must find the images at the same path."""
    return replace(samples, root=samples.root.resolve()) if samples.root is not None else samples


def gpu_resources(client: Any) -> dict[str, float] | None:
    """{"GPU": 1} when every worker declares a GPU resource (`dask worker --resources GPU=1`), so a
    worker with several threads still runs one chunk per GPU at a time. No constraint otherwise:
    on workers that declare nothing, a task that asks for a GPU would wait forever."""
    try:
        info = client.scheduler_info(n_workers=-1)
    except TypeError:  # older distributed: all workers by default
        info = client.scheduler_info()
    workers = list(info.get("workers", {}).values())
    if workers and all("GPU" in (w.get("resources") or {}) for w in workers):
        return {"GPU": 1}
    return None


def _chunk_images(store: FeatureStore, split: str, chunk: int) -> int:
    sl = store.layout(split).chunk_slice(chunk)
    return (sl.stop - sl.start) * (1 + (store.views if split == "train" else 0))
