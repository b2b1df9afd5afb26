"""Find stores: every store under a cache root, and the one store a command means (--store, or
--model/--dataset, or the single store in the cache).

When several stores match, a complete one is preferred over ones still being extracted; a store
that cannot be read is passed over (`tosca cache ls` says why), not fatal.
"""

from __future__ import annotations

from pathlib import Path

from featcache.store.format import FeatureStore, is_tosca_store
from featcache.store.object_store import (
    ObjectStoreError,
    ObjectStorePath,
    is_remote,
    read_store_attrs,
    store_location,
    stores_under,
)
from tosca_foundation.errors import UserError
from tosca_foundation.files import read_json


def find_stores(cache_dir: str | Path) -> list[Path | ObjectStorePath]:
    """Every tosca store under `cache_dir`: folders named *.zarr with a schema version, and those
    whose zarr.json cannot be read as one (a damaged store is listed with why, not passed over)."""
    place = store_location(cache_dir, folder=True, flag="--cache-dir")
    if is_remote(place):
        return [found for found in stores_under(place) if _tosca_or_damaged(found)]  # type: ignore[arg-type, misc]
    root = Path(place)
    if not root.is_dir():
        return []
    return [
        meta.parent
        for meta in sorted(root.rglob("*.zarr/zarr.json"))
        if is_tosca_store(meta.parent) or _damaged_metadata(meta)
    ]


def _tosca_or_damaged(location: ObjectStorePath) -> bool:
    """On object storage: a zarr.json with a tosca schema version, or one that is no JSON object."""
    try:
        attrs = read_store_attrs(location)
    except ObjectStoreError:
        return True  # listed, with why it cannot be read (`list_stores` opens it), never dropped
    return attrs is None or "schema_version" in attrs


def _damaged_metadata(meta: Path) -> bool:
    """A regular zarr.json that cannot be read as a JSON object (another program's zarr store is
    one): not JSON, larger than metadata can be, or nested too deeply. Read bounded; a fifo or a
    device by that name is never opened for reading (it could block for ever)."""
    if meta.is_symlink() or not meta.is_file():
        return False
    try:
        read_json(meta, "store metadata", "")
    except UserError:
        return True
    return False


def resolve_store(
    store: Path | FeatureStore | None, model: str | None, dataset: str | None, cache_dir: Path
) -> FeatureStore:
    """The store a command names: `store` (a path, or one already opened from Python), else the one
    store under cache_dir matching model and dataset."""
    if isinstance(store, FeatureStore):
        return store
    if store is not None:
        return FeatureStore.open(store)
    matches: list[FeatureStore] = []
    unreadable = 0
    for path in find_stores(cache_dir):
        try:
            found = FeatureStore.open(path)
            ident = found.identity
            if model and ident["backbone"]["alias"] != model:
                continue
            if dataset and ident["dataset"]["name"] != dataset:
                continue
        except ObjectStoreError:
            raise  # object storage unreachable: never a store quietly passed over for another
        except (UserError, KeyError, TypeError):
            unreadable += 1
            continue
        matches.append(found)
    cache_dir = store_location(cache_dir, folder=True, flag="--cache-dir")  # type: ignore[assignment]
    wanted = " ".join(f"--{k} {v}" for k, v in (("model", model), ("dataset", dataset)) if v) or "any store"
    skipped = f" ({unreadable} unreadable store(s) passed over: see `tosca cache ls`)" if unreadable else ""
    if not matches:
        raise UserError(
            f"no store under {cache_dir} matches {wanted}{skipped}; run `tosca extract` first or pass --store"
        )
    complete = [m for m in matches if m.is_complete()]
    candidates = complete if complete else matches
    if len(candidates) > 1:
        listed = ", ".join(str(c.path) for c in candidates[:6])
        raise UserError(
            f"{len(candidates)} stores under {cache_dir} match {wanted}: {listed}; pass --store PATH"
        )
    return candidates[0]
