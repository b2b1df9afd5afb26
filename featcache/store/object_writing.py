"""A store made, replaced and copied on object storage, keeping a local store's rules there.

Object storage renames nothing, so a store cannot be laid out aside and take its name at once (as
`featcache.store.staging` does on a disk). What stands for that rename is the order of writes: a
store's top zarr.json is the last object written when it is made (every reader says "no store"
until it is there), and the first deleted when it is replaced (readers stop seeing a store at
once). A new store is laid out in a local temporary folder (its arrays' metadata, ids, labels:
no feature chunk yet) and copied up in that order; its chunks are then written in place, each one
object put whole, and marked done after its values and checksum (`FeatureStore.write_chunk`).

What a killed writer leaves is recognised as tosca's and cleared by the next one under the lock
(objects of a store's splits with no zarr.json on top); anything else under the key is someone
else's and never deleted.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from featcache.store.format import remains_on_object_storage
from featcache.store.object_store import ObjectStorePath, listing, object_errors, read_store_attrs
from tosca_foundation.errors import UserError

_BATCH = 64  # chunk objects sent at once (fsspec sends a batch's files concurrently)


def local_files(root: Path) -> dict[str, Path]:
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


def replaceable(target: ObjectStorePath, there: dict[str, int]) -> bool:
    """What a writer may delete under `target`: a tosca store, or what a killed writer of one left
    (objects of its splits, no zarr.json on top). Anything else under the key (other stores under
    a prefix, files of another tool) is never deleted."""
    if "zarr.json" in there:
        attrs = read_store_attrs(target)
        return attrs is not None and "schema_version" in attrs
    return remains_on_object_storage(there)


def refuse_replacing_objects(
    target: ObjectStorePath, advice: str = "pass a new --store URL"
) -> dict[str, int]:
    """What is under `target` (its listing), refused in one line when it is not a store tosca may
    replace."""
    there = listing(target)
    if there and not replaceable(target, there):
        sample = sorted(there)[0]
        raise UserError(
            f"refusing to replace {target}: it holds {len(there)} object(s) that are no tosca store "
            f"(such as {sample}); {advice}"
        )
    return there


def remove_objects(target: ObjectStorePath, there: dict[str, int]) -> None:
    """Delete a store (or a killed writer's leftovers): its zarr.json first, so readers stop seeing
    a store at once, then every other object."""
    fs = target.filesystem()
    with object_errors(target, "deleting what was there"):
        if "zarr.json" in there:
            fs.rm_file(f"{target.key}/zarr.json")
        rest = [f"{target.key}/{rel}" for rel in there if rel != "zarr.json"]
        if rest:
            fs.rm(rest)  # in batches, as the object store deletes them


def clear_object_leftovers(target: ObjectStorePath) -> None:
    """What a writer killed while making or replacing the store at `target` left (objects without a
    zarr.json on top); anything else there that is no store is refused in one line."""
    fs = target.filesystem()
    with object_errors(target, "looking at the store's key"):
        if fs.isfile(target.key):  # an object named as the store itself: S3 keeps it beside a prefix
            raise UserError(
                f"{target} is an object of its own, not a store: pass a new --store URL (tosca never "
                "deletes what it did not make)"
            )
    there = listing(target)
    if not there or "zarr.json" in there:
        return
    if not replaceable(target, there):
        raise UserError(
            f"{target} holds {len(there)} object(s) that are no tosca store (such as {sorted(there)[0]}) "
            "and would be in the way of the store: pass a new --store URL (tosca never deletes what "
            "it did not make)"
        )
    remove_objects(target, there)


def upload_tree(
    root: Path, target: ObjectStorePath, on_object: Callable[[int, int], None] | None = None
) -> tuple[int, int]:
    """Copy a local store folder to `target`, zarr.json files after everything else and the top one
    last; then list what arrived and compare each size with its file's. (objects, bytes)."""
    fs = target.filesystem()
    files = local_files(root)
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
                f"{path.stat().st_size}); write it again with --overwrite"
            )
    return len(files), total


def create_on_object_storage(target: ObjectStorePath, lay_out: Callable[[Path], object]) -> None:
    """`lay_out(folder)` makes the new store's arrays and attrs in a local temporary folder; what
    is at `target` (a store, checked replaceable by the caller) is deleted, zarr.json first; then
    the new store is copied up, its zarr.json last. The caller holds the store's lock."""
    with tempfile.TemporaryDirectory(prefix="tosca-store-") as folder:
        staging = Path(folder) / target.name
        lay_out(staging)
        there = refuse_replacing_objects(target)
        if there:
            remove_objects(target, there)
        upload_tree(staging, target)
