"""Runner: plan an extraction, open or create its store, compute the pending chunks.

`plan_extraction` takes what `featcache.outline` worked out before torch loaded (the flags
checked, the store's place, the dataset listed), loads the backbone, resolves the preprocessing
policy, the decoder and the precision, and decides the store's identity; `run_extraction` computes only the chunks
not yet flagged done, locally (DataLoader workers) or on a Dask cluster (`featcache.distributor`).

`run_extraction` holds the store's lock (`tosca_foundation.locks`) from before it opens or creates the
store until it is done: one writer per store, and a dead writer's lock is gone with it.
"""

from __future__ import annotations

import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from featcache.backbones import BackboneSpec, LoadedBackbone, load_backbone
from featcache.distributor import ChunkJob, extract_on_cluster
from featcache.extract_request import ExtractRequest
from featcache.images.decoding import resolve_decoder
from featcache.images.scan import BadImage, drop_ids, find_bad_images, refuse_empty_files, without
from featcache.images.transforms import Preprocessing, make_preprocessing
from featcache.outline import (
    ExtractOutline,
    outline_extraction,
    refuse_replacing_other_things,
    scheduler_choice,
    something_there,
    store_path_of,
    stored_identity,
)
from featcache.pipeline.chunks import Progress, extract_chunks, uses_device_stage
from featcache.pipeline.mapper import FeatureMapper, default_batch_size
from featcache.sources.datasets import DatasetSource, SplitSamples, check_classes
from featcache.store import SPLITS, FeatureStore, ids_sha256, stored_chunk_size
from featcache.store.meanings import resolve_precision
from featcache.store.object_lock import store_lock
from featcache.store.object_store import ObjectStorePath, is_remote
from featcache.store.staging import clear_leftovers, create_in_place
from tosca_foundation.devices import resolve_device, worker_device
from tosca_foundation.errors import UserError
from tosca_foundation.fingerprints import identity_differences
from tosca_foundation.limits import require_disk, require_memory, usable_cores
from tosca_foundation.locks import acquire
from tosca_foundation.scheduler import SchedulerChoice
from tosca_foundation.version import __version__


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
    store_path: Path | ObjectStorePath
    identity: dict[str, Any]
    meta: dict[str, Any]
    skipped: list[BadImage] = field(default_factory=list)
    sources: dict[str, list[str]] = field(default_factory=dict)  # split -> each chunk's files fingerprint


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
    return max(0, min(8, usable_cores() - 1))


def _ids_sha256(samples: SplitSamples) -> str:
    return ids_sha256(samples.ids, samples.labels)


def _versions() -> dict[str, str]:
    import timm
    import torch
    import torchvision
    import zarr

    return {
        "tosca": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "timm": timm.__version__,
        "zarr": zarr.__version__,
        "numpy": np.__version__,
    }


def _stored_skip_list(path: Path | ObjectStorePath) -> list[BadImage] | None:
    """What an existing `--skip-bad-images` store left out (reused on resume: no second scan)."""
    if not something_there(path):
        return None
    store = FeatureStore.open(path)
    if not store.identity.get("skip_bad_images"):
        return None
    items = store.attrs.get("skipped_images") or []
    return [
        BadImage(str(item.get("split", "")), str(item["id"]), str(item.get("reason", "")))
        for item in items
        if isinstance(item, dict) and "id" in item
    ]


def _select_samples(
    request: ExtractRequest, dataset: DatasetSource, store_path: Path | ObjectStorePath, prep: Preprocessing
) -> list[BadImage]:
    """Leave bad images out (with --skip-bad-images) or refuse empty files; returns what was left out."""
    if not request.skip_bad_images:
        refuse_empty_files(dataset.splits)
        return []
    stored = None if request.overwrite else _stored_skip_list(store_path)
    skipped: list[BadImage] = []
    for split in SPLITS:
        samples = dataset.splits[split]
        if stored is not None:  # resuming: the same images as the first run, no second scan
            dataset.splits[split] = drop_ids(samples, {b.sample_id for b in stored if b.split == split})
            continue
        workers = default_workers() if request.workers is None else request.workers
        bad = find_bad_images(split, samples, prep, workers)
        dataset.splits[split] = without(samples, [i for i, _ in bad])
        skipped += [item for _, item in bad]
    check_classes(dataset)
    return stored if stored is not None else skipped


FLOAT32 = 4


def check_sizes(
    request: ExtractRequest,
    dataset: DatasetSource,
    dim: int,
    prep: Preprocessing,
    store_path: Path | ObjectStorePath,
    batch_size: int,
) -> None:
    """What --chunk-size, --views and --batch-size will allocate, checked before anything runs: one
    chunk's buffers, one batch of images in flight, and (for a new store) the store on disk (object
    storage says nothing of its room: a full quota is one line when a chunk is written)."""
    rows = max(len(dataset.splits[split]) for split in SPLITS)
    chunk = stored_chunk_size(request.chunk_size, rows)
    per_sample = (1 + request.views) * dim * FLOAT32
    require_memory(
        f"a chunk of {chunk:,} samples with {request.views} view(s) each",
        2 * chunk * per_sample,  # the writer's buffer and its converted copy
        "lower --chunk-size or --views",
    )
    batch = min(batch_size, chunk)
    image = 3 * prep.input_size * prep.input_size * FLOAT32
    in_flight = 1 + 4 * max(1, request.workers if request.workers is not None else default_workers())
    require_memory(
        f"batches of {batch} images with {request.views} view(s) each ({in_flight} in flight)",
        in_flight * batch * (1 + request.views) * image,
        "lower --batch-size, --views or --workers",
    )
    if not is_remote(store_path) and (request.overwrite or not store_path.exists()):
        itemsize = 2 if request.dtype == "float16" else 4
        samples = {split: len(dataset.splits[split]) for split in SPLITS}
        padded = {split: -(-n // chunk) * chunk for split, n in samples.items()}
        need = (padded["train"] * (1 + request.views) + padded["test"]) * dim * itemsize
        require_disk(
            "the store", need, store_path.parent, "free some space, lower --views or pass --store elsewhere"
        )


def plan_extraction(
    request: ExtractRequest, locked: bool = False, outline: ExtractOutline | None = None
) -> ExtractPlan:
    """Every check, the dataset listed (an archive unpacked; or as `outline` listed it), the
    backbone loaded, the identity decided. `locked`: the caller holds the store's lock
    (`featcache.runner.extract` takes it before this runs, so of two extractions of one store the
    first one started is the one that goes on); otherwise a store being written by another process
    is refused now, before anything is listed or loaded."""
    if outline is None:
        store_path = store_path_of(request)
        if not locked and not is_remote(store_path) and store_path.parent.is_dir():  # refuse now, not later
            acquire(store_path).release()
        outline = outline_extraction(request, store_path)
    spec, store_path, dataset = outline.spec, outline.store_path, outline.dataset
    policy = request.policy or spec.default_policy
    device = resolve_device(request.device)
    precision = resolve_precision(request.precision)
    existing = outline.existing
    decoder = resolve_decoder(
        request.decode, device, existing["preprocessing"]["decoder"] if existing else None
    )
    backbone = load_backbone(spec, request.weights, request.random_init)
    prep = make_preprocessing(policy, backbone.data_config, decoder)
    batch_size = request.batch_size or default_batch_size(device)
    check_sizes(request, dataset, backbone.feature_dim, prep, store_path, batch_size)
    skipped = _select_samples(request, dataset, store_path, prep)
    rows = max(len(dataset.splits[split]) for split in SPLITS)
    sources = dataset.chunk_sources(stored_chunk_size(request.chunk_size, rows))
    identity = {
        "backbone": {k: v for k, v in backbone.attrs().items() if k != "weights_file"},
        "preprocessing": prep.attrs(),
        "dataset": {
            **dataset.attrs(),
            "files_sha256": dataset.files_sha256(sources),
            "ids_sha256": {split: _ids_sha256(s) for split, s in dataset.splits.items()},
        },
        "views": request.views,
        "seed": request.seed,
        "dtype": request.dtype,
        "chunk_size": request.chunk_size,
        "precision": precision,
        **({"skip_bad_images": True} if request.skip_bad_images else {}),
    }
    meta = {
        "backbone_weights_file": backbone.weights_file,
        "dataset_source": dataset.source,
        "compute": {"device": device.type, "precision": precision, "tf32": False, "decoder": decoder},
        "versions": _versions(),
        "left_out": dataset.left_out.attrs(),
        **({"skipped_images": [item.attrs() for item in skipped]} if request.skip_bad_images else {}),
    }
    return ExtractPlan(
        request,
        spec,
        backbone,
        dataset,
        prep,
        precision,
        str(device),
        batch_size,
        store_path,
        identity,
        meta,
        skipped,
        sources,
    )


def open_or_create_store(plan: ExtractPlan) -> tuple[FeatureStore, bool]:
    """(store, created). Refuses an existing store made with another configuration.

    Call with the store's lock held. A new store is built in `<store>.creating` and renamed into
    place, and a replaced one is renamed aside before the new one takes its name, so at the
    store's path there is always a whole store or none.
    """
    path = plan.store_path
    clear_leftovers(path)
    existing = None if plan.request.overwrite else stored_identity(path)
    if existing is not None:
        store = FeatureStore.open(path, mode="r+")
        if _only_files_changed(existing, plan.identity):
            _resume_with_changed_files(store, plan)
            existing = plan.identity
        diffs = identity_differences(existing, plan.identity)
        if diffs:
            shown = "; ".join(diffs[:4]) + (f"; and {len(diffs) - 4} more" if len(diffs) > 4 else "")
            raise UserError(
                f"store {path} was made with another configuration ({shown}); "
                "pass --overwrite to replace it or --store PATH for a new one"
            )
        store.prepare_for_writing()
        return store, False
    refuse_replacing_other_things(path)
    create_in_place(
        path,
        lambda staging: FeatureStore.create(
            staging,
            plan.identity,
            plan.meta,
            ids={s: plan.dataset.splits[s].ids for s in SPLITS},
            labels={s: plan.dataset.splits[s].labels for s in SPLITS},
            dim=plan.backbone.feature_dim,
            views=plan.request.views,
            chunk_size=plan.request.chunk_size,
            dtype=plan.request.dtype,
        ),
    )
    return FeatureStore.open(path, mode="r+"), True


def _only_files_changed(existing: dict[str, Any], new: dict[str, Any]) -> bool:
    """The configuration is the same but some files' sizes or modification times are not."""
    diffs = identity_differences(existing, new)
    return bool(diffs) and all(d.startswith("dataset.files_sha256:") for d in diffs)


def _resume_with_changed_files(store: FeatureStore, plan: ExtractPlan) -> None:
    """Files changed since the store was started: fine where only chunks still to compute use them
    (a broken image replaced before the rerun); refused, naming a chunk and a file, where a chunk
    already computed would now describe other images. Call with the store's lock held."""
    for split in SPLITS:
        recorded = store.sources(split)
        done = store.done(split)
        for chunk, current in enumerate(plan.sources[split]):
            if done[chunk] and str(recorded[chunk]) != current:
                sl = store.layout(split).chunk_slice(chunk)
                samples = plan.dataset.splits[split]
                files = f"{sl.stop - sl.start} files, {samples.describe(sl.start)} to {samples.describe(sl.stop - 1)}"
                raise UserError(
                    f"store {store.path} was made from other images: a file of its {split} chunk {chunk} "
                    f"({files}) changed since it was extracted (size or modification time); pass "
                    "--overwrite to rebuild it, or --store PATH for a new one"
                )
    store.replace_identity(plan.identity)


def run_extraction(plan: ExtractPlan, progress: Progress | None = None) -> ExtractSummary:
    """Compute the pending chunks under the store's lock (a second writer is refused, naming this one)."""
    with store_lock(plan.store_path):
        return run_locked(plan, progress)


def run_locked(plan: ExtractPlan, progress: Progress | None) -> ExtractSummary:
    """Compute the pending chunks; the caller holds the store's lock."""
    start = time.perf_counter()
    store, _ = open_or_create_store(plan)
    pending = {split: store.pending_chunks(split) for split in SPLITS}
    total_chunks = sum(store.layout(s).n_chunks for s in SPLITS)
    n_pending = sum(len(c) for c in pending.values())
    samples = {s: len(plan.dataset.splits[s]) for s in SPLITS}
    skipped = len(plan.skipped)
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
            extra={"skipped_images": skipped},
        )
    req = plan.request
    choice = scheduler_choice(req)
    if choice is not None:
        images = extract_on_cluster(
            _job_template(plan, choice), store, pending, plan.dataset.splits, choice, progress, plan.sources
        )
        where = choice.describe()
    else:
        mapper = FeatureMapper(
            plan.backbone.model, resolve_device(plan.device), plan.precision, plan.batch_size
        )
        images = 0
        workers = default_workers() if req.workers is None else req.workers
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
                    workers,
                    progress,
                    sources=dict(enumerate(plan.sources[split])),
                )
        if uses_device_stage(plan.preprocessing, mapper):
            where = f"{plan.device}; decoded and resized on {plan.device}"
        else:
            where = f"{plan.device}; decoded by {workers} loader worker(s)" if workers else f"{plan.device}"
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
        extra={
            "precision": plan.precision,
            "decoder": plan.preprocessing.decoder,
            "compute": where,
            "skipped_images": skipped,
        },
    )


def _job_template(plan: ExtractPlan, choice: SchedulerChoice) -> ChunkJob:
    """Everything a worker needs but the chunks themselves."""
    req = plan.request
    threads = None
    if choice.kind == "local" and choice.workers is not None:
        threads = max(1, usable_cores() // choice.workers)
    return ChunkJob(
        store_path=str(plan.store_path),
        split="",
        chunks=(),
        preprocessing=plan.preprocessing,
        spec=plan.spec,
        weights=str(req.weights) if req.weights else None,
        random_init=req.random_init,
        weights_sha256=plan.backbone.weights_sha256,
        seed=req.seed,
        batch_size=req.batch_size,
        device=worker_device(req.device),
        precision=plan.precision,
        torch_threads=threads,
    )
