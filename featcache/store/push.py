"""`tosca cache push STORE URL`: a whole local store copied to object storage, for a cluster whose
machines share no filesystem (docs/scale.md).

Only a store that every reader would accept is copied: complete, and every chunk's values checked
against its recorded checksum (`check_readable`), so what arrives is what extraction or import
wrote. The copy keeps a store's rule that its top zarr.json is written last: every other object
first, then zarr.json, so a reader sees no store at the URL until the whole of it is there (a
push killed midway leaves objects without a zarr.json: `FeatureStore.open` says it is no store,
and the same push finishes it). Each object is then listed and its size compared with its file's.

A store already at the URL is refused unless `overwrite`: then its zarr.json goes first (readers
stop seeing a store at once), then every other object. Object storage has no lock a writer could
take (S3's conditional writes are not offered by every server), so two pushes to one URL at once
are not prevented: push from one place.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from featcache.store.format import FeatureStore
from featcache.store.object_store import ObjectStorePath, is_remote, listing, object_errors, store_location
from featcache.store.verify import check_readable
from tosca_foundation.errors import UserError


@dataclass(frozen=True)
class Pushed:
    """What a push copied: the store's URL, its objects and bytes."""

    url: str
    objects: int
    bytes: int


def _local_files(root: Path) -> dict[str, Path]:
    """Every file of a local store by its path below the store, zarr.json files last of all (the
    top one at the very end)."""
    found = {}
    for here, _, files in os.walk(root):
        for name in files:
            path = Path(here) / name
            found[path.relative_to(root).as_posix()] = path
    return dict(
        sorted(found.items(), key=lambda kv: (kv[0] == "zarr.json", kv[0].endswith("zarr.json"), kv[0]))
    )


def push_store(
    store: str | Path,
    url: str,
    overwrite: bool = False,
    on_object: Callable[[int, int], None] | None = None,
) -> Pushed:
    """Copy the local store `store` to `url` (`on_object(done, total)` after each object)."""
    source = store_location(store)
    if is_remote(source):
        raise UserError(f"tosca cache push copies a local store; {source} is already on object storage")
    target = store_location(url)
    if not isinstance(target, ObjectStorePath):
        raise UserError(
            f"tosca cache push copies to object storage: {url} is a local path (copy folders with cp)"
        )
    local = FeatureStore.open(source)
    local.require_complete()  # a store still being extracted is never copied as a store
    check_readable(local)  # every chunk as every reader checks it: nothing damaged is copied
    fs = target.filesystem()
    there = listing(target)
    if there and not overwrite:
        named = "a store" if "zarr.json" in there else f"{len(there)} object(s)"
        raise UserError(f"{target} already holds {named}: pass --overwrite to replace it")
    with object_errors(target, "replacing what was there"):
        if "zarr.json" in there:  # readers stop seeing a store first
            fs.rm_file(f"{target.key}/zarr.json")
        for rel in there:
            if rel != "zarr.json":
                fs.rm_file(f"{target.key}/{rel}")
    files = _local_files(Path(local.path))
    total = 0
    with object_errors(target, "copying the store"):
        for i, (rel, path) in enumerate(files.items(), 1):
            fs.put_file(str(path), f"{target.key}/{rel}")
            total += path.stat().st_size
            if on_object is not None:
                on_object(i, len(files))
    arrived = listing(target)
    for rel, path in files.items():
        if arrived.get(rel) != path.stat().st_size:
            raise UserError(
                f"{target}: {rel} did not arrive whole ({arrived.get(rel, 'no')} bytes of "
                f"{path.stat().st_size}); push it again"
            )
    return Pushed(target.url, len(files), total)
