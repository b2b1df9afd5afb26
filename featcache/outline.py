"""What an extraction will make, worked out before torch or timm loads: the flags checked, the
store's place, the dataset listed (an archive unpacked), so that `tosca extract`'s first line
(`ExtractOutline.line`: model, dataset, rows, chunks, store) comes within a second or two. The
plan (`featcache.extraction`: the backbone loaded, the identity decided) takes the dataset as
listed here; `featcache.runner` runs the whole command.

Import-light: the registries, the store's format and the listing of samples; no torch, no timm
(a timm model name that is not registered loads timm to be checked).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from featcache.backbones import BackboneSpec, check_weights, resolve_backbone
from featcache.extract_request import ExtractRequest
from featcache.images.decoder_names import DECODERS
from featcache.sources.datasets import DATASETS, SPLITS, DatasetSource, load_dataset
from featcache.store import DTYPES, FeatureStore, check_name, is_tosca_store, stored_chunk_size
from featcache.store.meanings import POLICIES, resolve_precision
from featcache.store.object_store import (
    ObjectStorePath,
    has_object,
    is_remote,
    require_store_key,
    store_location,
)
from featcache.store.object_writing import refuse_replacing_objects
from tosca_foundation.devices import check_device_name
from tosca_foundation.errors import UserError, UserValueError
from tosca_foundation.folders import zarr_root
from tosca_foundation.limits import max_processes, require_at_most
from tosca_foundation.scheduler import SchedulerChoice, check_scheduler, parse_scheduler


def check_request(request: ExtractRequest) -> None:
    """The flags alone, before anything is listed or loaded; each named in a refusal as the
    request spells it (`request.spell`: the command line's flag, Python's keyword)."""
    spell = request.spell
    checks = [
        (request.views >= 0, f"{spell('views')} must be 0 or more, got {request.views}"),
        (
            request.batch_size is None or request.batch_size >= 1,
            f"{spell('batch_size')} must be at least 1, got {request.batch_size}",
        ),
        (
            request.workers is None or request.workers >= 0,
            f"{spell('workers')} must be 0 or more, got {request.workers}",
        ),
        (request.chunk_size >= 1, f"{spell('chunk_size')} must be at least 1, got {request.chunk_size}"),
        (
            request.dtype in DTYPES,
            f"unknown {spell('dtype')} {request.dtype!r}: use one of {', '.join(DTYPES)}",
        ),
        (
            request.policy is None or request.policy in POLICIES,
            f"unknown {spell('policy')} {request.policy!r}: use {', '.join(POLICIES)}",
        ),
    ]
    for ok, message in checks:
        if not ok:
            raise UserValueError(message)
    if request.workers is not None:
        require_at_most(
            spell("workers"),
            request.workers,
            max_processes(),
            "processes",
            "at most 4 per usable core, and 64 anywhere",
        )
    resolve_precision(request.precision)
    check_device_name(request.device, spell("device"))
    DECODERS.pick(request.decode, spell("decode"), also=("auto",))
    check_weights(request.weights, request.random_init)
    choice = scheduler_choice(request)
    if choice is not None:  # a running scheduler answers now, before the store's folder is made
        check_scheduler(choice)


def scheduler_choice(request: ExtractRequest) -> SchedulerChoice | None:
    return parse_scheduler(request.scheduler) if request.scheduler else None


def default_store_path(
    cache_dir: Path | ObjectStorePath, dataset: str, spec: BackboneSpec, policy: str
) -> Path | ObjectStorePath:
    """CACHE_DIR/<dataset>/<alias>[-<policy>].zarr (a key under it, for a cache root on object
    storage); names that could leave the cache root are refused."""
    suffix = "" if policy == spec.default_policy else f"-{policy}"
    name = check_name("model name", f"{spec.alias}{suffix}")
    dataset = check_name("dataset name", dataset)
    if isinstance(cache_dir, ObjectStorePath):
        return ObjectStorePath(cache_dir.protocol, f"{cache_dir.key}/{dataset}/{name}.zarr")
    return Path(cache_dir) / dataset / f"{name}.zarr"


LOCAL_CACHE = Path("cache")  # where archives unpack and downloads land when --cache-dir is a bucket


def local_cache_dir(cache_dir: str | Path) -> Path:
    """Where a dataset's archive is unpacked (and a download lands): the cache root, or `./cache`
    when the root is on object storage (images are read from a disk, never a bucket)."""
    where = store_location(cache_dir, folder=True, flag="--cache-dir")
    return LOCAL_CACHE if is_remote(where) else Path(where)


def refuse_replacing_other_things(path: Path | ObjectStorePath) -> None:
    """--overwrite replaces a tosca store, never a folder or file that is something else."""
    if isinstance(path, ObjectStorePath):
        refuse_replacing_objects(path)
        return
    if not path.exists() and not path.is_symlink():
        return
    if path.is_dir() and not path.is_symlink() and (is_tosca_store(path) or not any(path.iterdir())):
        return
    raise UserError(
        f"refusing to replace {path}: it is not a tosca store (--overwrite only replaces stores); "
        "pass a new --store path"
    )


def store_path_of(request: ExtractRequest) -> Path | ObjectStorePath:
    """Where the request's store goes, after every check of the flags alone (nothing is read or
    written yet): the place must be a store's, and --overwrite must replace a store. A --store or
    --cache-dir on object storage gives a location there (written in place)."""
    check_request(request)
    spec = resolve_backbone(request.model)
    check_name("model name", spec.alias)  # recorded in the store; stage 2 makes folder names of it
    policy = request.policy or spec.default_policy
    cache_dir = store_location(request.cache_dir, folder=True, flag="--cache-dir")
    store_path = (
        store_location(request.store)
        if request.store
        else default_store_path(cache_dir, DATASETS.name_of(request.dataset), spec, policy)
    )
    if is_remote(store_path):
        require_store_key(store_path, "--store")
        if request.overwrite:
            refuse_replacing_other_things(store_path)
        return store_path
    if store_path.name in ("", ".", ".."):
        raise UserError(
            f"--store {str(request.store)!r} names no folder: give the store a name (e.g. --store cache/mine.zarr)"
        )
    places = [("--store", store_path.parent)] + ([] if is_remote(cache_dir) else [("--cache-dir", cache_dir)])
    for flag, place in places:
        inside = zarr_root(place)
        if inside is not None:
            raise UserError(f"{flag} {place} lies inside the zarr store {inside}: pass a place of its own")
    if request.overwrite:
        refuse_replacing_other_things(store_path)
    return store_path


def something_there(path: Path | ObjectStorePath) -> bool:
    """Whether a store (or a folder that may be none) is at `path`: on object storage, a store's
    top zarr.json, whatever it holds (opening it says what is wrong with it, as on a disk; a killed
    writer's leftovers have none and are no store: the writer clears them under the lock)."""
    return has_object(path, "zarr.json") if is_remote(path) else path.exists()


def stored_identity(path: Path | ObjectStorePath) -> dict[str, Any] | None:
    """An existing store's identity (None when there is no store at `path`)."""
    if not something_there(path):
        return None
    return FeatureStore.open(path).identity  # a folder that is not a store is refused, never replaced


@dataclass
class ExtractOutline:
    """What an extraction will make, before its backbone loads: the request, the backbone's spec,
    the store's place, the identity of the store already there (None: none, or --overwrite) and
    the dataset as listed (the plan takes them as they are)."""

    request: ExtractRequest
    spec: BackboneSpec
    store_path: Path | ObjectStorePath
    existing: dict[str, Any] | None
    dataset: DatasetSource

    @property
    def rows(self) -> dict[str, int]:
        return {split: len(self.dataset.splits[split]) for split in SPLITS}

    @property
    def chunk_size(self) -> int:
        return stored_chunk_size(self.request.chunk_size, max(self.rows.values()))

    def line(self) -> str:
        """`extract: effnet_lite0 on imagefolder (2 classes): train 8, test 4 rows in 1 + 1 chunks
        of 8 -> cache/imagefolder/effnet_lite0.zarr`."""
        rows, chunk = self.rows, self.chunk_size
        chunks = " + ".join(f"{-(-rows[split] // chunk):,}" for split in SPLITS)
        counts = ", ".join(f"{split} {rows[split]:,}" for split in SPLITS)
        return (
            f"extract: {self.spec.alias} on {self.dataset.name} ({len(self.dataset.class_names)} classes): "
            f"{counts} rows in {chunks} chunks of {chunk:,} -> {self.store_path}"
        )


def outline_extraction(request: ExtractRequest, store_path: Path | ObjectStorePath) -> ExtractOutline:
    """The outline of a request whose store goes to `store_path` (`store_path_of`): what is there
    already read (a folder that is not a store refused), the dataset listed (an archive unpacked),
    the store checked to lie outside its images."""
    spec = resolve_backbone(request.model)
    existing = None if request.overwrite else stored_identity(store_path)
    dataset = load_dataset(
        request.dataset, request.data_root, local_cache_dir(request.cache_dir), request.limit_per_class
    )
    for split, folder in dataset.folders.items():  # there, the store would be a class of the next run
        if not is_remote(store_path) and store_path.absolute().is_relative_to(Path(folder).absolute()):
            raise UserError(
                f"--store {store_path} lies inside the {split} images ({folder}): put it elsewhere"
            )
    return ExtractOutline(request, spec, store_path, existing, dataset)
