"""`tosca cache push STORE URL`: a whole local store copied to object storage, for a cluster whose
machines share no filesystem (docs/scale.md).

Only a store that every reader would accept is copied: complete, and every chunk's values checked
against its recorded checksum (`check_readable`), so what arrives is what extraction or import
wrote. The copy keeps a store's rule that its top zarr.json is written last: every other object
first, then zarr.json, so a reader sees no store at the URL until the whole of it is there (a
push killed midway leaves objects without a zarr.json: `FeatureStore.open` says it is no store,
and the same push with --overwrite finishes it). Each object is then listed and its size
compared with its file's. The local store's lock is held meanwhile.

A store already at the URL is refused unless `overwrite`: then its zarr.json goes first (readers
stop seeing a store at once), then every other object. `overwrite` replaces a tosca store or a
killed push's leftovers only, never a prefix holding anything else (other stores under it); the
URL's last part ends in .zarr, as `cache ls` and --cache-dir find stores. Object storage has no lock a writer could
take (S3's conditional writes are not offered by every server), so two pushes to one URL at once
are not prevented: push from one place.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from featcache.store.format import SPLITS, FeatureStore
from featcache.store.object_store import (
    ObjectStorePath,
    is_remote,
    listing,
    object_errors,
    read_store_attrs,
    store_location,
)
from featcache.store.verify import check_readable
from tosca_foundation.errors import UserError
from tosca_foundation.locks import folder_lock

_BATCH = 64  # chunk objects sent at once (fsspec sends a batch's files concurrently)


@dataclass(frozen=True)
class Pushed:
    """What a push copied: the store's URL, its objects and bytes."""

    url: str
    objects: int
    bytes: int


def _local_files(root: Path) -> dict[str, Path]:
    """Every file of a local store by its path below the store (a killed writer's `*.partial`
    temporaries left out, as every reader leaves them), zarr.json files last of all, the top one at
    the very end."""
    found = {}
    for here, _, files in os.walk(root):
        for name in files:
            if not name.endswith(".partial"):
                path = Path(here) / name
                found[path.relative_to(root).as_posix()] = path
    return dict(
        sorted(found.items(), key=lambda kv: (kv[0] == "zarr.json", kv[0].endswith("zarr.json"), kv[0]))
    )


def _replaceable(target: ObjectStorePath, there: dict[str, int]) -> bool:
    """What --overwrite may delete: a tosca store, or what a killed push of one left (objects of
    its splits, no zarr.json on top). Anything else under the key (other stores under a prefix,
    files of another tool) is never deleted by a push."""
    if "zarr.json" in there:
        attrs = read_store_attrs(target)
        return attrs is not None and "schema_version" in attrs
    return all(rel.split("/", 1)[0] in SPLITS for rel in there)


def push_store(
    store: str | Path,
    url: str,
    overwrite: bool = False,
    on_object: Callable[[int, int], None] | None = None,
) -> Pushed:
    """Copy the local store `store` to `url` (`on_object(done, total)` as objects arrive), holding
    the local store's lock meanwhile (no extraction or `cache verify --fix` changes it mid-copy)."""
    source = store_location(store, flag="STORE")
    if is_remote(source):
        raise UserError(f"tosca cache push copies a local store; {source} is already on object storage")
    target = store_location(url, flag="URL")
    if not isinstance(target, ObjectStorePath):
        raise UserError(
            f"tosca cache push copies to object storage: {url} is a local path (copy folders with cp)"
        )
    if not target.name.endswith(".zarr"):
        raise UserError(
            f"URL {target}: a store's key ends in .zarr (`cache ls` and --cache-dir find stores by it): "
            f"{target}.zarr?"
        )
    local = FeatureStore.open(source)
    with folder_lock(local.path, "store", "wait for it to finish, then push"):
        local.require_complete()  # a store still being extracted is never copied as a store
        check_readable(local)  # every chunk as every reader checks it: nothing damaged is copied
        return _copy(local, target, overwrite, on_object)


def _copy(
    local: FeatureStore,
    target: ObjectStorePath,
    overwrite: bool,
    on_object: Callable[[int, int], None] | None,
) -> Pushed:
    fs = target.filesystem()
    there = listing(target)
    if there and not overwrite:
        named = "a store" if "zarr.json" in there else f"{len(there)} object(s) but no store"
        raise UserError(f"{target} already holds {named}: pass --overwrite to replace it")
    if there and not _replaceable(target, there):
        sample = sorted(there)[0]
        raise UserError(
            f"{target} holds {len(there)} object(s) that are no tosca store (such as {sample}): a push "
            "replaces a store, never a prefix of other things; push to a key of its own"
        )
    with object_errors(target, "replacing what was there"):
        if "zarr.json" in there:  # readers stop seeing a store first
            fs.rm_file(f"{target.key}/zarr.json")
        rest = [f"{target.key}/{rel}" for rel in there if rel != "zarr.json"]
        if rest:
            fs.rm(rest)  # in batches, as the object store deletes them
    files = _local_files(Path(local.path))
    chunks = [rel for rel in files if not rel.endswith("zarr.json")]
    total = sum(path.stat().st_size for path in files.values())
    done = 0
    with object_errors(target, "copying the store"):
        for start in range(0, len(chunks), _BATCH):  # the chunks, a batch of objects at a time
            batch = chunks[start : start + _BATCH]
            fs.put([str(files[rel]) for rel in batch], [f"{target.key}/{rel}" for rel in batch])
            done += len(batch)
            if on_object is not None:
                on_object(done, len(files))
        for rel in files:  # then the metadata, one by one, the store's own zarr.json last
            if rel.endswith("zarr.json"):
                fs.put_file(str(files[rel]), f"{target.key}/{rel}")
                done += 1
                if on_object is not None:
                    on_object(done, len(files))
    arrived = listing(target)
    for rel, path in files.items():
        if arrived.get(rel) != path.stat().st_size:
            raise UserError(
                f"{target}: {rel} did not arrive whole ({arrived.get(rel, 'no')} bytes of "
                f"{path.stat().st_size}); push it again with --overwrite"
            )
    return Pushed(target.url, len(files), total)
