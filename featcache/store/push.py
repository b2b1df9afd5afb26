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
URL's last part ends in .zarr, as `cache ls` and --cache-dir find stores. The store's lock on
object storage (`featcache.store.object_lock`) is held at the URL meanwhile: a second push, an
extraction or an import writing there is refused, naming this one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from featcache.store.format import FeatureStore
from featcache.store.object_lock import object_lock
from featcache.store.object_store import (
    ObjectStorePath,
    is_remote,
    listing,
    require_store_key,
    store_location,
)
from featcache.store.object_writing import remove_objects, replaceable, upload_tree
from featcache.store.verify import check_readable
from tosca_foundation.errors import UserError
from tosca_foundation.locks import folder_lock


@dataclass(frozen=True)
class Pushed:
    """What a push copied: the store's URL, its objects and bytes."""

    url: str
    objects: int
    bytes: int


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
    require_store_key(target, "URL")
    local = FeatureStore.open(source)
    with folder_lock(local.path, "store", "wait for it to finish, then push"):
        local.require_complete()  # a store still being extracted is never copied as a store
        check_readable(local)  # every chunk as every reader checks it: nothing damaged is copied
        with object_lock(target, "store", "push to another URL"):
            return _copy(local, target, overwrite, on_object)


def _copy(
    local: FeatureStore,
    target: ObjectStorePath,
    overwrite: bool,
    on_object: Callable[[int, int], None] | None,
) -> Pushed:
    there = listing(target)
    if there and not overwrite:
        named = "a store" if "zarr.json" in there else f"{len(there)} object(s) but no store"
        raise UserError(f"{target} already holds {named}: pass --overwrite to replace it")
    if there and not replaceable(target, there):
        sample = sorted(there)[0]
        raise UserError(
            f"{target} holds {len(there)} object(s) that are no tosca store (such as {sample}): a push "
            "replaces a store, never a prefix of other things; push to a key of its own"
        )
    if there:
        remove_objects(target, there)
    objects, size = upload_tree(Path(local.path), target, on_object)
    return Pushed(target.url, objects, size)
