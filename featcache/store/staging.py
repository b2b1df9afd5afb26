"""A new store appears whole or not at all: it is laid out in `<store>.creating` and renamed into
place, and a store it replaces is renamed aside first (`<store>.replaced`) and deleted after. Both
`tosca extract` and `tosca import` create their stores through here (one way a store comes to be);
the caller holds the store's lock. On object storage, which renames nothing, the order of writes
stands for the rename (`featcache.store.object_writing`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from featcache.store.format import looks_like_store_remains, remove_store_tree
from featcache.store.object_store import ObjectStorePath
from featcache.store.object_writing import clear_object_leftovers, create_on_object_storage
from tosca_foundation.errors import UserError
from tosca_foundation.files import disk_errors


def remove_leftover(folder: Path) -> None:
    """A half-made or set-aside store of a killed writer goes; anything else by that name is someone
    else's and stops the writer (a zarr group's zarr.json is written before anything in it, and
    `remove_store_tree` deletes it last)."""
    if not folder.exists() and not folder.is_symlink():
        return
    if not looks_like_store_remains(folder):
        raise UserError(
            f"{folder} is in the way of the store's creation and is not a store tosca left behind; "
            "move it away (tosca never deletes what it did not make)"
        )
    remove_store_tree(folder)


def staging_places(path: Path) -> tuple[Path, Path]:
    """Where a store is laid out before it takes its name, and where the one it replaces waits."""
    return path.with_name(path.name + ".creating"), path.with_name(path.name + ".replaced")


def clear_leftovers(path: Path | ObjectStorePath) -> None:
    """What a writer killed while creating or replacing the store at `path` left beside it (on
    object storage: under its key, with no zarr.json on top)."""
    if isinstance(path, ObjectStorePath):
        clear_object_leftovers(path)
        return
    for leftover in staging_places(path):
        remove_leftover(leftover)


def create_in_place(path: Path | ObjectStorePath, lay_out: Callable[[Path], object]) -> None:
    """`lay_out(staging)` makes the new store's arrays and attrs in the staging folder; then it takes
    `path`'s place (a store there before is renamed aside, then deleted)."""
    if isinstance(path, ObjectStorePath):
        create_on_object_storage(path, lay_out)
        return
    staging, replaced = staging_places(path)
    try:
        with disk_errors(staging, "creating the store"):
            lay_out(staging)
    except BaseException:
        remove_store_tree(staging)
        raise
    if path.exists():
        path.rename(replaced)
    staging.rename(path)  # a store appears whole or not at all
    remove_store_tree(replaced)
