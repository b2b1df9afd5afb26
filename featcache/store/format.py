"""The feature store: one zarr v3 group per dataset x backbone x preprocessing policy.

Layout (design.md): `<split>/features [N, D]`, `train/views [V, N, D]`, `<split>/labels [N]`,
`<split>/ids [N]`, and the done record: `<split>/done [chunks]` (bool) with
`<split>/checksums [chunks]` (the sha256 of the chunk's values, "" when not done) and
`<split>/sources [chunks]` (the fingerprint of the files the chunk was computed from: ids, sizes,
modification times). Sample chunks are the unit of work: each is written whole by exactly one
writer in this order: its done flag cleared (when a retried writer finds it set), its values,
its checksum and source, its done flag. zarr
writes every file to a temporary name and renames it, so a killed writer leaves at worst a chunk
without its flag, which the next run recomputes, and `tosca cache verify` recomputes every done
chunk's checksum, so a chunk edited or damaged later is found.

Schema 1 is this layout whole, the first release's: a store without its checksums or sources
arrays was written before tosca's first release (or edited by hand) and is refused when opened,
in one line (no reader of an unreleased layout is kept); a higher schema asks for a newer tosca.

The arrays' chunk length is the requested chunk size, or the larger split's sample count when
that is smaller (a chunk is written whole, padding included: 20,000-row chunks for 60 images
would write 100 MB files of zeros); the identity keeps the requested size.

Import-light (zarr, numpy, stdlib only): stage 2 reads stores through this module.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import math
import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from featcache.store.object_store import (
    ObjectStorePath,
    is_remote,
    listing,
    open_zarr_group,
    read_object,
    read_store_attrs,
    store_location,
)
from tosca_foundation.errors import UserError
from tosca_foundation.files import check_depth, disk_errors, read_bytes, read_json
from tosca_foundation.fingerprints import fingerprint
from tosca_foundation.units import human_bytes

SCHEMA_VERSION = 1
SPLITS = ("train", "test")
DTYPES = ("float32", "float16")
CHECKSUM_PREFIX = "sha256:"
# A name that becomes a file or folder name (dataset, backbone alias): no separators, no "..".
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,199}$")


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def check_name(kind: str, value: Any) -> str:
    """A dataset name or backbone alias that is safe as one path component under the cache root."""
    text = str(value)
    if not _SAFE_NAME.match(text) or ".." in text:
        raise UserError(
            f"unsafe {kind} {text!r}: a {kind} becomes a folder or file name under the cache root, so it "
            "may hold only letters, digits and . _ + - (no '/', no '..', not absolute)"
        )
    return text


def ids_sha256(ids: Any, labels: Any) -> str:
    """Hash of a split's (sample id, label) pairs in order: recorded in the identity, rechecked by verify."""
    digest = hashlib.sha256()
    for sample_id, label in zip(list(ids), np.asarray(labels).tolist(), strict=True):
        digest.update(f"{sample_id}\x1f{label}\n".encode())
    return digest.hexdigest()


def chunk_checksum(features: np.ndarray, views: np.ndarray | None = None) -> str:
    """sha256 of a chunk's values as stored (dtype, shape, little-endian bytes), views included."""
    digest = hashlib.sha256()
    for block in (features, views):
        if block is None:
            continue
        array = np.ascontiguousarray(block.astype(block.dtype.newbyteorder("<"), copy=False))
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(memoryview(array).cast("B"))  # the bytes in place: no copy of a contiguous chunk
    return CHECKSUM_PREFIX + digest.hexdigest()


def _check_schema(path: Path, schema: Any) -> None:
    if schema is None:
        raise UserError(
            f"{path} is a zarr group but not a complete tosca store (no schema_version); re-extract it"
        )
    if not isinstance(schema, int) or isinstance(schema, bool):
        raise UserError(f"{path} has an unreadable store schema version {str(schema)[:40]!r}; re-extract it")
    if schema > SCHEMA_VERSION:
        raise UserError(
            f"{path} was written by a newer tosca (store schema {schema}; this tosca reads schema "
            f"{SCHEMA_VERSION}): upgrade tosca to read it"
        )
    if schema < SCHEMA_VERSION:
        raise UserError(
            f"{path} has the old store schema {schema} (this tosca reads schema {SCHEMA_VERSION}); "
            "re-extract it with --overwrite"
        )


# what stage 2 and `tosca cache` read from the identity: section -> key -> the type it must have
IDENTITY_FIELDS: dict[str, dict[str, type]] = {
    "dataset": {"name": str, "num_classes": int},
    "backbone": {"alias": str, "feature_dim": int},
}


def _check_identity_names(path: Path, attrs: dict[str, Any]) -> None:
    """Names read from attrs end up in folder names (runs, baselines): refuse hand-made unsafe ones;
    and the fields every command reads must have their types (an edited store is refused in one
    line, not met with a traceback)."""
    identity = attrs.get("identity")
    if not isinstance(identity, dict):
        raise UserError(f"{path} has no identity in its attrs; re-extract it")
    for section, fields in IDENTITY_FIELDS.items():
        block = identity.get(section)
        for key, kind in fields.items():
            value = block.get(key) if isinstance(block, dict) else None
            if isinstance(value, bool) or not isinstance(value, kind):
                raise UserError(
                    f"store {path} records no valid {section}.{key} in its identity; was it edited by hand? "
                    "re-extract it"
                )
    names = identity["dataset"].get("class_names")
    if names is not None and (
        not isinstance(names, list)
        or len(names) != identity["dataset"]["num_classes"]
        or not all(isinstance(n, str) for n in names)
    ):
        raise UserError(f"store {path} records class names that do not fit its class count; re-extract it")
    for kind, section, key in (("dataset name", "dataset", "name"), ("backbone alias", "backbone", "alias")):
        block = identity.get(section)
        if isinstance(block, dict) and key in block:
            try:
                check_name(kind, block[key])
            except UserError as exc:
                raise UserError(f"store {path} records an {exc}; was it edited by hand?") from None


# the arrays every store of the first release has and the builds before it lacked (tosca 0.1's
# stores no sources, earlier ones no checksums either)
RELEASE_ARRAYS = ("checksums", "sources")


def _check_arrays(path: Path, group: zarr.Group, attrs: dict[str, Any]) -> None:
    """Every array the layout promises is there (a folder deleted by hand is refused, not a
    traceback; a store without `RELEASE_ARRAYS` is one of a build before the first release)."""
    views = attrs.get("identity", {}).get("views", 0)
    for split in SPLITS:
        names = ["features", "labels", "ids", "done"] + (["views"] if split == "train" and views else [])
        try:
            members = set(group[split].array_keys())
        except KeyError:
            members = set()
        missing = [name for name in names if name not in members]
        if missing:
            raise UserError(
                f"store {path} has no {split}/{missing[0]} (damaged or edited by hand); re-extract it"
            )
        older = [name for name in RELEASE_ARRAYS if name not in members]
        if older:
            raise UserError(
                f"store {path} has no {split}/{older[0]}: it was written before tosca's first release (or "
                "edited by hand); re-extract it with --overwrite"
            )
        names += list(RELEASE_ARRAYS)
        for name in names:  # opening reads each array's zarr.json; a chunk length must be one or more
            if min(group[split][name].chunks, default=1) < 1:
                raise UserError(
                    f"store {path}: {split}/{name} records chunks of no length (edited by hand); re-extract it"
                )


# ------------------------------------------------------------------ the tree on disk, checked first

_TREE_DEPTH = 8  # folders below a store's root: split / array / c / up to 3 chunk-key levels, and some
_ITEM_BYTES = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "float16": 2,
    "float32": 4,
    "float64": 8,
}
_STRING_BYTES = 8 << 10  # a stored string (a sample id is a relative path; PATH_MAX is 4 KiB)


@dataclass
class StoreTree:
    """What a store's folder holds, read without zarr and without reading a chunk: every zarr.json
    parsed (by its folder: "" the root, "train", "train/features"), and every chunk file's key and
    size (by its array)."""

    metas: dict[str, dict[str, Any]]
    chunks: dict[str, list[tuple[str, int]]]


def _read_meta(store: Path, file: str, rel: str) -> dict[str, Any]:
    what = "metadata" if rel == "" else "array metadata"
    try:
        data = read_bytes(file, "metadata")
    except UserError as exc:
        raise UserError(f"{store} has unreadable {what} ({exc}); re-extract it") from None
    return _parse_meta(store, data, rel)


def _parse_meta(store: Path | ObjectStorePath, data: bytes, rel: str) -> dict[str, Any]:
    """One zarr.json's object, its depth bounded; anything else is one line naming it."""
    what = "metadata" if rel == "" else "array metadata"
    try:
        text = data.decode()
        check_depth(text, f"{rel or '.'}/zarr.json")
        parsed = json.loads(text)
    except UserError as exc:
        raise UserError(f"{store} has unreadable {what} ({exc}); re-extract it") from None
    except UnicodeDecodeError:
        raise UserError(
            f"{store} has unreadable {what} (UnicodeDecodeError in {rel or '.'}/zarr.json); re-extract it"
        ) from None
    except json.JSONDecodeError as exc:
        raise UserError(
            f"{store} has unreadable {what} (JSONDecodeError: {rel or '.'}/zarr.json, {exc.msg} at line "
            f"{exc.lineno}); re-extract it"
        ) from None
    if not isinstance(parsed, dict):
        raise UserError(
            f"{store} has unreadable {what} ({rel or '.'}/zarr.json is no JSON object); re-extract it"
        )
    return parsed


def read_tree(path: Path) -> StoreTree:
    """Walk a store's folder: refuse, in one line, a symbolic link (one planted in a shared cache
    would have zarr read or write elsewhere), a fifo, a device or a socket (reading one blocks or
    never ends), a tree deeper than a store's, and metadata that is too large, too deeply nested or
    not JSON. Nothing here reads a chunk."""
    tree = StoreTree({}, {})

    def visit(folder: str, rel: str, depth: int) -> None:
        if depth > _TREE_DEPTH:
            raise UserError(f"store {path} has folders nested deeper than a store's ({rel}); re-extract it")
        try:
            with os.scandir(folder) as listing:
                entries = list(listing)
        except OSError as exc:
            raise UserError(
                f"cannot read store {path} ({exc.strerror or type(exc).__name__} in {rel or '.'})"
            ) from None
        for entry in entries:
            inner = f"{rel}/{entry.name}" if rel else entry.name
            if entry.is_symlink():
                raise UserError(
                    f"store {path} holds a symbolic link ({inner}): tosca follows no link inside a store (in "
                    "a shared cache one can be planted to have it read or write elsewhere); re-extract the store"
                )
            if entry.is_dir(follow_symlinks=False):
                visit(entry.path, inner, depth + 1)
            elif not entry.is_file(follow_symlinks=False):
                raise UserError(
                    f"store {path} holds {inner}, which is not a regular file (a fifo, a device or a socket: "
                    "reading it could wait for ever); re-extract the store"
                )
            elif entry.name == "zarr.json":
                tree.metas[rel] = _read_meta(path, entry.path, rel)
            elif "/c/" in f"/{inner}":
                if entry.name.endswith(".partial"):
                    continue  # a writer's temporary: renamed into place when whole, never read as a chunk
                try:
                    size = entry.stat(follow_symlinks=False).st_size
                except FileNotFoundError:
                    continue  # renamed or removed since the listing (another worker writing the store)
                array, _, key = f"/{inner}".partition("/c/")
                tree.chunks.setdefault(array.lstrip("/"), []).append((key, size))

    visit(str(path), "", 0)
    return tree


def _ints(value: Any) -> tuple[int, ...] | None:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
    ):
        return None
    return tuple(value)


def _array_layout(path: Path, tree: StoreTree, name: str) -> tuple[tuple[int, ...], tuple[int, ...], Any]:
    """(shape, chunk shape, data type) of an array from its zarr.json, as tosca writes them (a regular
    chunk grid, default chunk keys with "/"); anything else is one line."""
    meta = tree.metas.get(name, {})
    grid = meta.get("chunk_grid")
    config = grid.get("configuration") if isinstance(grid, dict) else None
    shape = _ints(meta.get("shape"))
    chunks = _ints(config.get("chunk_shape")) if isinstance(config, dict) else None
    encoding = meta.get("chunk_key_encoding")
    separator = (
        (encoding.get("configuration") or {}).get("separator", "/") if isinstance(encoding, dict) else None
    )
    if (
        shape is None
        or chunks is None
        or len(shape) != len(chunks)
        or grid.get("name") != "regular"
        or not isinstance(encoding, dict)
        or encoding.get("name") != "default"
        or separator != "/"
    ):
        raise UserError(
            f"store {path}: {name} records no regular chunk grid with tosca's chunk keys (edited by hand); re-extract it"
        )
    return shape, chunks, meta.get("data_type")


def check_layout(path: Path, tree: StoreTree, attrs: dict[str, Any]) -> None:
    """Every array's shape, chunks and data type fit the others' and the attrs, and every chunk file is
    no larger than its array's chunks can be; checked before anything loops over chunks, so a `done`
    array that claims 10^8 entries or a chunk longer than the layout is one line, not minutes of
    reading fill values (and every later loop is bounded by the files on disk: the ids of each split
    have one chunk file per chunk, written when the store was made)."""
    identity = attrs.get("identity", {})
    layouts = {
        name: _array_layout(path, tree, name)
        for name, meta in tree.metas.items()
        if name.count("/") == 1 and meta.get("node_type") == "array"
    }

    def refuse(name: str, why: str) -> UserError:
        return UserError(f"store {path}: {name} {why} (damaged or edited by hand); re-extract it")

    if any(f"{split}/features" not in layouts for split in SPLITS):
        return  # no features array: named by _check_arrays
    rows = {split: layouts[f"{split}/features"][0] for split in SPLITS}
    for split, shape in rows.items():
        if len(shape) != 2:
            raise refuse(f"{split}/features", f"has shape {list(shape)}, not [rows, dim]")
    n = {split: shape[0] for split, shape in rows.items()}
    dim = rows["train"][1]
    chunk = layouts["train/features"][1][0]
    recorded = identity.get("chunk_size") if isinstance(identity, dict) else None
    if not (chunk <= max(1, *n.values()) or chunk == recorded):
        raise refuse(
            "train/features",
            f"records chunks of {chunk} rows, longer than any split ({max(n.values())} rows)",
        )
    dtype = layouts["train/features"][2]
    expected: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[Any, ...]]] = {}
    for split in SPLITS:
        k = -(-n[split] // chunk)
        expected[f"{split}/features"] = ((n[split], dim), (chunk, dim), DTYPES)
        expected[f"{split}/labels"] = ((n[split],), (chunk,), ("int64",))
        expected[f"{split}/ids"] = ((n[split],), (chunk,), ("string",))
        expected[f"{split}/done"] = ((k,), (1,), ("bool",))
        for name in ("checksums", "sources"):
            expected[f"{split}/{name}"] = ((k,), (1,), ("string",))
    if "train/views" in layouts:
        views = layouts["train/views"][0][:1]
        expected["train/views"] = ((*views, n["train"], dim), (1, chunk, dim), (dtype,))
    for name, (shape, chunks, types) in expected.items():
        if name not in layouts:
            continue  # a missing array is named by _check_arrays
        found_shape, found_chunks, found_type = layouts[name]
        if found_type not in types:
            raise refuse(name, f"holds {found_type} values, not {' or '.join(map(str, types))}")
        if (found_shape, found_chunks) != (shape, chunks):
            raise refuse(
                name,
                f"records shape {list(found_shape)} in chunks {list(found_chunks)}, where the store's layout has "
                f"shape {list(shape)} in chunks {list(chunks)}",
            )
    for split in SPLITS:
        keys = [key for key, _ in tree.chunks.get(f"{split}/ids", []) if key.isdigit()]
        if n[split] and len(keys) != -(-n[split] // chunk):
            raise refuse(
                f"{split}/ids",
                f"has {len(keys)} chunk files for its {-(-n[split] // chunk)} chunks of sample ids",
            )
    for name, (_, chunks, types) in layouts.items():
        item = _ITEM_BYTES.get(types if isinstance(types, str) else "", _STRING_BYTES)
        most = 2 * math.prod(chunks) * item + (64 << 10)  # compression never doubles a chunk
        for key, size in tree.chunks.get(name, []):
            if size > most:
                mend = f"delete it, then `tosca cache verify {path} --fix` and the same `tosca extract` recompute it"
                raise UserError(
                    f"store {path}: {name}/c/{key} is {human_bytes(size)}, more than a chunk of {name} can be "
                    f"({human_bytes(most)}): damaged or planted; {mend}"
                )


@dataclass(frozen=True)
class StoreShape:
    """The sizes stage 2 plans with: feature dim, rows per split, views, classes."""

    dim: int
    train: int
    test: int
    views: int
    classes: int

    @property
    def float32_bytes(self) -> int:
        """The features held whole as stage 2 holds them: float32, whatever the store's dtype."""
        return (self.train * (1 + self.views) + self.test) * self.dim * 4


def stored_chunk_size(requested: int, largest_split: int) -> int:
    """The arrays' chunk length: the requested size, never longer than the larger split."""
    return max(1, min(requested, largest_split))


@dataclass(frozen=True)
class SplitLayout:
    n: int
    chunk_size: int

    @property
    def n_chunks(self) -> int:
        return (self.n + self.chunk_size - 1) // self.chunk_size

    def chunk_slice(self, chunk: int) -> slice:
        return slice(chunk * self.chunk_size, min((chunk + 1) * self.chunk_size, self.n))


def made_up_identity(
    name: str,
    alias: str,
    classes: int,
    labels: dict[str, np.ndarray],
    dim: int,
    views: int = 0,
    seed: int | None = None,
) -> dict[str, Any]:
    """The identity of a store of made-up features (a test's, a benchmark's, a cost probe's): a
    dataset `name` of `classes` classes and the labels' split sizes, a backbone `alias` of `dim`
    features, no real images or weights behind either (`FeatureStore.create` takes it)."""
    identity: dict[str, Any] = {
        "dataset": {
            "name": name,
            "num_classes": classes,
            "samples": {split: len(y) for split, y in labels.items()},
        },
        "backbone": {"alias": alias, "feature_dim": dim},
        "views": views,
    }
    if seed is not None:
        identity["seed"] = seed
    return identity


class FeatureStore:
    """Open store: typed access to arrays, flags and the identity attrs."""

    def __init__(
        self, path: Path | ObjectStorePath, group: zarr.Group, objects: dict[str, int] | None = None
    ):
        self.path = path if is_remote(path) else Path(path)
        self.group = group
        self.objects = objects  # on object storage: every object's path below the store and size
        self.attrs_checked = False  # set by featcache.store.verify.check_readable once it has passed
        self._nodes: dict[str, Any] = {}
        self._members: dict[str, set[str]] = {}

    def whole(self, path: str) -> Any:
        """All of a small array (labels, ids, done flags, checksums, sources): a chunk file that no
        longer decodes (bytes flipped in a compressed chunk) is one line naming it, not zarr's error."""
        try:
            return self.node(path)[:]
        except (RuntimeError, ValueError, TypeError, OSError) as exc:
            raise UserError(
                f"store {self.path}: {path} cannot be read ({type(exc).__name__}: {' '.join(str(exc).split())[:60]}); "
                "it was damaged: re-extract the store (`tosca extract ... --overwrite`)"
            ) from None

    def node(self, path: str) -> zarr.Array:
        """The array at `<split>/<name>`, opened once per store object (an open reads its metadata)."""
        if path not in self._nodes:
            self._nodes[path] = self.group[path]
        return self._nodes[path]

    def has(self, split: str, name: str) -> bool:
        """Whether the split holds an array of that name."""
        if split not in self._members:
            self._members[split] = set(self.group[split].array_keys())
        return name in self._members[split]

    # ------------------------------------------------------------ opening and creating

    @classmethod
    def open(cls, path: str | Path, mode: str = "r") -> FeatureStore:
        """Open a store for reading (or "r+" for its one writer), after every check that needs no
        chunk read: every entry of the store's tree is a regular file or folder (no link, no fifo),
        every zarr.json is bounded in size and nesting and parses, every chunk file is no larger
        than its array's chunks can be, and every array's shape, chunks and data type fit the
        others' and the attrs (`check_layout`). A loop over chunks comes only after these."""
        location = store_location(path)
        if is_remote(location):
            return cls._open_on_object_storage(location, mode)
        path = Path(location)
        if not os.path.lexists(path / "zarr.json"):
            absolute = path.absolute()  # `.` has no name to put a sibling beside
            if absolute.with_name(absolute.name + ".creating").exists():
                raise UserError(
                    f"not a feature store yet: {path} (its creation was interrupted); "
                    "run the same `tosca extract` again"
                )
            raise UserError(f"not a feature store: {path} (no zarr.json); see `tosca cache ls`")
        tree = read_tree(path)
        try:  # by its absolute path: the store read is the one opened, whatever chdir comes later
            group = zarr.open_group(str(path.absolute()), mode=mode)
            attrs = dict(group.attrs)
        except (ValueError, TypeError, KeyError, json.JSONDecodeError) as exc:
            raise UserError(f"{path} has unreadable metadata ({type(exc).__name__}); re-extract it") from None
        _check_opened(path, tree, group, attrs)
        return cls(path.absolute(), group)

    @classmethod
    def _open_on_object_storage(cls, location: ObjectStorePath, mode: str) -> FeatureStore:
        """A store on object storage, after the checks a local one passes: its listing stands for
        the walk of its folder (`object_tree`). "r+": for its one writer, under the store's lock."""
        objects = listing(location)
        if "zarr.json" not in objects:
            if remains_on_object_storage(objects):
                raise UserError(
                    f"not a feature store yet: {location} (its creation or copy was interrupted); run "
                    "the same `tosca extract`, `tosca import` or `tosca cache push --overwrite` again"
                )
            raise UserError(f"not a feature store: {location} (no zarr.json there); see `tosca cache ls`")
        tree = object_tree(location, objects)
        group = open_zarr_group(location, objects, writable=mode != "r")
        try:
            attrs = dict(group.attrs)
        except (ValueError, TypeError, KeyError, json.JSONDecodeError) as exc:
            raise UserError(
                f"{location} has unreadable metadata ({type(exc).__name__}); re-extract it"
            ) from None
        _check_opened(location, tree, group, attrs)
        return cls(location, group, objects)

    def chunk_present(self, split: str, array: str, key: tuple[int, ...]) -> bool:
        """Whether one chunk of `<split>/<array>` was written (its file, or its object as listed
        when the store was opened)."""
        rel = self.chunk_name(split, array, key)
        if self.objects is not None:
            return rel in self.objects
        return (Path(self.path) / rel).is_file()

    def chunk_name(self, split: str, array: str, key: tuple[int, ...]) -> str:
        """One chunk's path below the store, as a message names it."""
        return f"{split}/{array}/{self.node(f'{split}/{array}').metadata.chunk_key_encoding.encode_chunk_key(key)}"

    @classmethod
    def create(
        cls,
        path: str | Path,
        identity: dict[str, Any],
        meta: dict[str, Any],
        ids: dict[str, list[str]],
        labels: dict[str, np.ndarray],
        dim: int,
        views: int,
        chunk_size: int,
        dtype: str,
    ) -> FeatureStore:
        """Lay out every array, write ids and labels, then the attrs last (their presence = created)."""
        path = Path(path)
        if dtype not in DTYPES:
            raise UserError(f"unknown dtype {dtype!r}: use one of {', '.join(DTYPES)}")
        if path.exists():
            remove_store_tree(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        group = zarr.open_group(str(path), mode="w")
        chunk_size = stored_chunk_size(chunk_size, max(len(ids[split]) for split in SPLITS))
        for split in SPLITS:
            n = len(ids[split])
            layout = SplitLayout(n, chunk_size)
            sub = group.create_group(split)
            sub.create_array(
                "features", shape=(n, dim), chunks=(chunk_size, dim), dtype=dtype, compressors=None
            )
            if split == "train" and views > 0:
                sub.create_array(
                    "views", shape=(views, n, dim), chunks=(1, chunk_size, dim), dtype=dtype, compressors=None
                )
            sub.create_array("labels", shape=(n,), chunks=(chunk_size,), dtype="int64")[:] = labels[split]
            sub.create_array("ids", shape=(n,), chunks=(chunk_size,), dtype=str)[:] = np.asarray(
                ids[split], dtype=str
            )
            sub.create_array("done", shape=(layout.n_chunks,), chunks=(1,), dtype=bool, fill_value=False)
            sub.create_array("checksums", shape=(layout.n_chunks,), chunks=(1,), dtype=str)
            sub.create_array("sources", shape=(layout.n_chunks,), chunks=(1,), dtype=str)
        group.attrs.update(
            {
                **meta,
                "identity": identity,
                "fingerprint": fingerprint(identity),
                "created": now_iso(),
                "updated": now_iso(),
                "schema_version": SCHEMA_VERSION,
            }
        )
        return cls(path, group)

    # ------------------------------------------------------------ attributes

    @property
    def attrs(self) -> dict[str, Any]:
        return copy.deepcopy(dict(self.group.attrs))  # never the attrs' own dicts

    @property
    def identity(self) -> dict[str, Any]:
        return copy.deepcopy(dict(self.group.attrs["identity"]))  # never the attrs' own dicts

    @property
    def fingerprint(self) -> str:
        return str(self.group.attrs["fingerprint"])

    @property
    def dim(self) -> int:
        return int(self.node("train/features").shape[1])

    @property
    def views(self) -> int:
        return int(self.node("train/views").shape[0]) if self.has("train", "views") else 0

    @property
    def chunk_size(self) -> int:
        return int(self.node("train/features").chunks[0])

    @property
    def shape(self) -> StoreShape:
        classes = self.identity.get("dataset", {}).get("num_classes")
        labels_max = int(self.labels("train").max()) + 1 if self.layout("train").n else 0
        return StoreShape(
            self.dim,
            self.layout("train").n,
            self.layout("test").n,
            self.views,
            int(classes) if isinstance(classes, int) else labels_max,
        )

    def layout(self, split: str) -> SplitLayout:
        return SplitLayout(int(self.node(f"{split}/features").shape[0]), self.chunk_size)

    def replace_identity(self, identity: dict[str, Any]) -> None:
        """A new identity and its fingerprint (a resumed extraction whose pending chunks' files
        changed: the store is about to describe those files)."""
        with disk_errors(self.path, "updating the store's attrs"):
            self.group.attrs.update(
                {"identity": identity, "fingerprint": fingerprint(identity), "updated": now_iso()}
            )

    def touch(self) -> None:
        with disk_errors(self.path, "updating the store's attrs"):
            self.group.attrs["updated"] = now_iso()

    # ------------------------------------------------------------ chunks

    def done(self, split: str) -> np.ndarray:
        return np.asarray(self.whole(f"{split}/done"), dtype=bool)

    def checksums(self, split: str) -> np.ndarray:
        """The recorded checksum of every chunk ("" where none)."""
        return np.asarray(self.whole(f"{split}/checksums"), dtype=object)

    def pending_chunks(self, split: str) -> list[int]:
        return [int(c) for c in np.flatnonzero(~self.done(split))]

    def is_complete(self) -> bool:
        return all(self.done(split).all() for split in SPLITS)

    def prepare_for_writing(self) -> None:
        """Called by the one writer (under the store's lock) before it computes chunks.

        Removes the temporary files (`*.partial`) that zarr leaves when a writer is killed between
        writing one and renaming it into place (object storage puts each object whole: none there).
        """
        if self.objects is not None:
            return
        for leftover in self.path.rglob("*.partial"):
            with contextlib.suppress(OSError):
                leftover.unlink()

    def sources(self, split: str) -> np.ndarray:
        """The fingerprint of the files each chunk was computed from ("" where none)."""
        return np.asarray(self.whole(f"{split}/sources"), dtype=object)

    def write_chunk(
        self,
        split: str,
        chunk: int,
        features: np.ndarray,
        views: np.ndarray | None = None,
        source: str | None = None,
    ) -> None:
        """Write one whole sample chunk (features and all its views) and its done record: its
        checksum and, where given, the fingerprint of the files it was computed from.

        Refuses (UserError) values that are not finite: a chunk holding NaN or inf is never marked
        done. A chunk found done (a retried Dask task after its first writer died) is unflagged
        first, so a half-rewritten chunk is never trusted.
        """
        sl = self.layout(split).chunk_slice(chunk)
        expected = (sl.stop - sl.start, self.dim)
        dtype = self.node(f"{split}/features").dtype
        features = np.asarray(features, dtype=dtype)
        if features.shape != expected:
            raise ValueError(f"chunk {chunk} of {split}: features {features.shape}, expected {expected}")
        if split == "train" and self.views:
            if views is None or views.shape != (self.views, *expected):
                raise ValueError(f"chunk {chunk}: views {None if views is None else views.shape}")
            views = np.asarray(views, dtype=dtype)
        else:
            views = None
        self._refuse_non_finite(split, chunk, features, views)
        checksum = chunk_checksum(features, views)
        after = f" ({split} chunk {chunk} not marked done; the chunks done before it are kept)"
        with disk_errors(self.path, f"writing {split} chunk {chunk}", after):
            if bool(self.node(f"{split}/done")[chunk]):
                self.node(f"{split}/done")[chunk] = False
            self.node(f"{split}/features")[sl] = features
            if views is not None:
                self.node("train/views")[:, sl] = views
            self.node(f"{split}/checksums")[chunk] = checksum
            if source is not None:
                self.node(f"{split}/sources")[chunk] = source
            self.node(f"{split}/done")[chunk] = True

    def _refuse_non_finite(
        self, split: str, chunk: int, features: np.ndarray, views: np.ndarray | None
    ) -> None:
        bad_clean = ~np.isfinite(features).all(axis=1)
        bad_views = ~np.isfinite(views).all(axis=2) if views is not None else None  # [V, n]
        if not bad_clean.any() and (bad_views is None or not bad_views.any()):
            return
        start = self.layout(split).chunk_slice(chunk).start
        ids = self.node(f"{split}/ids")
        named = [f"{ids[start + int(i)]} (clean)" for i in np.flatnonzero(bad_clean)]
        if bad_views is not None:
            for k, i in zip(*np.nonzero(bad_views), strict=True):
                named.append(f"{ids[start + int(i)]} (view {int(k)})")
        shown = ", ".join(named[:5]) + (f" and {len(named) - 5} more" if len(named) > 5 else "")
        raise UserError(
            f"the backbone gave NaN or inf features for {len(named)} image(s) of {split} chunk {chunk}: "
            f"{shown}; the chunk is not marked done (check the weights and --precision)"
        )

    def mark_undone(self, split: str, chunks: list[int]) -> None:
        """Clear the done record of these chunks, so the next extraction recomputes them."""
        with disk_errors(self.path, "clearing done flags"):
            for chunk in chunks:
                self.node(f"{split}/done")[chunk] = False
                self.node(f"{split}/checksums")[chunk] = ""

    # ------------------------------------------------------------ reading

    def labels(self, split: str) -> np.ndarray:
        return np.asarray(self.whole(f"{split}/labels"), dtype=np.int64)

    def ids(self, split: str) -> np.ndarray:
        return np.asarray(self.whole(f"{split}/ids"))

    def features(self, split: str, index: np.ndarray | None = None) -> np.ndarray:
        array = self.node(f"{split}/features")
        return np.asarray(array[:] if index is None else array.get_orthogonal_selection((index, slice(None))))

    def view(self, k: int, index: np.ndarray | None = None) -> np.ndarray:
        array = self.node("train/views")
        if index is None:
            return np.asarray(array[k])
        return np.asarray(array.get_orthogonal_selection((k, index, slice(None))))

    def size_bytes(self) -> int:
        if self.objects is not None:  # listed again: a writer may have put objects since the open
            return (
                sum(listing(self.path).values()) if not self.group.read_only else sum(self.objects.values())
            )
        return sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file())

    def require_complete(self) -> None:
        for split in SPLITS:
            missing = int((~self.done(split)).sum())
            if missing:
                total = self.layout(split).n_chunks
                made, by = (
                    ("imported", "import") if self.identity.get("imported") else ("extracted", "extract")
                )
                raise UserError(
                    f"store {self.path} is not fully {made}: {missing}/{total} {split} chunks missing; "
                    f"re-run the same `tosca {by}` to finish it"
                )


def object_tree(location: ObjectStorePath, objects: dict[str, int]) -> StoreTree:
    """What `read_tree` finds in a folder, from an object store's listing: every zarr.json read
    (bounded, as a local one) and every chunk object's key and size. Object storage holds no link,
    fifo or device; a key nested deeper than a store's is refused as a folder is."""
    tree = StoreTree({}, {})
    for rel, size in sorted(objects.items()):
        if rel.count("/") > _TREE_DEPTH:
            raise UserError(f"store {location} has keys nested deeper than a store's ({rel}); re-extract it")
        folder, _, name = rel.rpartition("/")
        if name == "zarr.json":
            data = read_object(location, rel, size, "metadata")
            tree.metas[folder] = _parse_meta(location, data, folder)
        elif "/c/" in f"/{rel}" and not name.endswith(".partial"):  # a writer's temporary, as on disk
            array, _, key = f"/{rel}".partition("/c/")
            tree.chunks.setdefault(array.lstrip("/"), []).append((key, size))
    return tree


def _check_opened(
    path: Path | ObjectStorePath, tree: StoreTree, group: zarr.Group, attrs: dict[str, Any]
) -> None:
    """The checks of an opened store's attrs and arrays, wherever it lies."""
    _check_schema(path, attrs.get("schema_version"))
    _check_identity_names(path, attrs)
    try:  # each array's own zarr.json: edited or damaged ones fail in zarr in many ways
        _check_arrays(path, group, attrs)
    except (
        ValueError,
        TypeError,
        KeyError,
        AttributeError,
        ZeroDivisionError,
        json.JSONDecodeError,
    ) as exc:
        raise UserError(
            f"{path} has unreadable array metadata ({type(exc).__name__}: {' '.join(str(exc).split())[:80]}); "
            "re-extract it"
        ) from None
    check_layout(path, tree, attrs)


def remove_store_tree(path: Path) -> None:
    """Delete a store folder (or what is left of one) so that, killed at any moment, what remains
    still has its top zarr.json or is empty: each folder's other files first, its zarr.json last,
    the top one at the very end. A rerun then knows the remains for tosca's and finishes the job."""
    path = Path(path)
    for here, dirs, files in os.walk(path, topdown=False):
        links = [d for d in dirs if os.path.islink(os.path.join(here, d))]  # never walked into
        for name in [*links, *sorted(files, key=lambda n: n == "zarr.json")]:  # zarr.json last
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(here, name))
        with contextlib.suppress(FileNotFoundError, OSError):
            os.rmdir(here)


def looks_like_store_remains(folder: Path) -> bool:
    """A folder a killed writer left while creating or deleting a store: a zarr.json at its top or
    anywhere in it (a deletion by an older tosca took files in directory order), or nothing at all."""
    folder = Path(folder)
    if folder.is_symlink() or not folder.is_dir():
        return False
    if (folder / "zarr.json").is_file() or not any(folder.iterdir()):
        return True
    return next(folder.rglob("zarr.json"), None) is not None


def remains_on_object_storage(objects: dict[str, int]) -> bool:
    """Objects a killed writer left while making a store on object storage (a creation or a push
    cut short before the top zarr.json): some, each under one of the store's splits."""
    return bool(objects) and all(rel.split("/", 1)[0] in SPLITS for rel in objects)


def store_attributes(path: str | Path | ObjectStorePath) -> dict[str, Any] | None:
    """The attributes of a store's top zarr.json, wherever it lies (None where there is none, or
    it is no JSON object), read bounded: never a fifo or a device, nothing huge or nested too
    deeply. Object storage that cannot be reached is one line (`ObjectStoreError`)."""
    location = store_location(path)
    if is_remote(location):
        return read_store_attrs(location)  # type: ignore[arg-type]
    try:
        attrs = read_json(Path(location) / "zarr.json", "store metadata", "").get("attributes")
    except UserError:
        return None
    return attrs if isinstance(attrs, dict) else None


def is_tosca_store(path: str | Path) -> bool:
    """A folder whose zarr.json carries a tosca schema version (whatever its version or state)."""
    attrs = store_attributes(path)
    return attrs is not None and "schema_version" in attrs
