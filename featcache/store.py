"""The feature store: one zarr v3 group per dataset x backbone x preprocessing policy.

Layout (design.md): `<split>/features [N, D]`, `train/views [V, N, D]`, `<split>/labels [N]`,
`<split>/ids [N]`, and the done record: `<split>/done [chunks]` (bool) with
`<split>/checksums [chunks]` (the sha256 of the chunk's values, "" when not done). Sample chunks
are the unit of work: each is written whole by exactly one writer in this order: its done flag
cleared (when a retried writer finds it set), its values, its checksum, its done flag. zarr
writes every file to a temporary name and renames it, so a killed writer leaves at worst a chunk
without its flag, which the next run recomputes, and `tosca cache verify` recomputes every done
chunk's checksum, so a chunk edited or damaged later is found.

The checksums array came after schema 1 stores existed: it changes nothing else about how a store
is read, so the schema stays 1 and older tosca versions still read new stores. Stores without it
are read and resumed as before and verified without checksums (a note says so); `--overwrite`
rebuilds one with them.

Import-light (zarr, numpy, stdlib only): stage 2 reads stores through this module.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from featcache.errors import UserError

SCHEMA_VERSION = 1
SPLITS = ("train", "test")
DTYPES = ("float32", "float16")
CHECKSUM_PREFIX = "sha256:"
# A name that becomes a file or folder name (dataset, backbone alias): no separators, no "..".
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,199}$")
_FULL = (errno.ENOSPC, errno.EDQUOT)
_READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def fingerprint(identity: dict[str, Any]) -> str:
    """Hash of everything that decides the stored numbers (not timestamps or paths)."""
    return hashlib.sha256(canonical_json(identity).encode()).hexdigest()


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _short(value: Any) -> str:
    text = str(value)
    return text[:40] + "..." if len(text) > 43 else text


def identity_differences(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    """Human-readable list of the identity fields that differ, e.g. 'views: 0 -> 4'."""
    diffs = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            diffs += identity_differences(a, b, f"{prefix}{key}.")
        elif canonical_json(a) != canonical_json(b):
            diffs.append(f"{prefix}{key}: {_short(a)} -> {_short(b)}")
    return diffs


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
        array = np.ascontiguousarray(block)
        array = array.astype(array.dtype.newbyteorder("<"), copy=False)
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(array.tobytes())
    return CHECKSUM_PREFIX + digest.hexdigest()


@contextlib.contextmanager
def disk_errors(path: Path, doing: str, after: str = "") -> Iterator[None]:
    """A full or read-only disk is the user's to fix: one line, not a traceback."""
    try:
        yield
    except OSError as exc:
        if exc.errno in _FULL:
            raise UserError(
                f"disk full ({exc.strerror}) while {doing} in {path}{after}; free some space, then run "
                "the same command again to resume"
            ) from None
        if exc.errno in _READ_ONLY:
            raise UserError(f"cannot write {path} ({exc.strerror}) while {doing}") from None
        raise


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


def _check_identity_names(path: Path, attrs: dict[str, Any]) -> None:
    """Names read from attrs end up in folder names (runs, baselines): refuse hand-made unsafe ones."""
    identity = attrs.get("identity")
    if not isinstance(identity, dict):
        raise UserError(f"{path} has no identity in its attrs; re-extract it")
    for kind, section, key in (("dataset name", "dataset", "name"), ("backbone alias", "backbone", "alias")):
        block = identity.get(section)
        if isinstance(block, dict) and key in block:
            try:
                check_name(kind, block[key])
            except UserError as exc:
                raise UserError(f"store {path} records an {exc}; was it edited by hand?") from None


def _check_arrays(path: Path, group: zarr.Group, attrs: dict[str, Any]) -> None:
    """Every array the layout promises is there (a folder deleted by hand is refused, not a traceback)."""
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


@dataclass(frozen=True)
class ChunkFault:
    """A done chunk whose stored values do not hold up."""

    split: str
    chunk: int
    reason: str

    def __str__(self) -> str:
        return f"{self.split} chunk {self.chunk}: {self.reason}"


@dataclass(frozen=True)
class SplitLayout:
    n: int
    chunk_size: int

    @property
    def n_chunks(self) -> int:
        return (self.n + self.chunk_size - 1) // self.chunk_size

    def chunk_slice(self, chunk: int) -> slice:
        return slice(chunk * self.chunk_size, min((chunk + 1) * self.chunk_size, self.n))


class FeatureStore:
    """Open store: typed access to arrays, flags and the identity attrs."""

    def __init__(self, path: Path, group: zarr.Group):
        self.path = Path(path)
        self.group = group

    # ------------------------------------------------------------ opening and creating

    @classmethod
    def open(cls, path: str | Path, mode: str = "r") -> FeatureStore:
        path = Path(path)
        if not (path / "zarr.json").is_file():
            if path.with_name(path.name + ".creating").exists():
                raise UserError(
                    f"not a feature store yet: {path} (its creation was interrupted); "
                    "run the same `tosca extract` again"
                )
            raise UserError(f"not a feature store: {path} (no zarr.json); see `tosca cache ls`")
        try:
            group = zarr.open_group(str(path), mode=mode)
            attrs = dict(group.attrs)
        except (ValueError, TypeError, KeyError, json.JSONDecodeError) as exc:
            raise UserError(f"{path} has unreadable metadata ({type(exc).__name__}); re-extract it") from None
        _check_schema(path, attrs.get("schema_version"))
        _check_identity_names(path, attrs)
        _check_arrays(path, group, attrs)
        return cls(path, group)

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
            shutil.rmtree(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        group = zarr.open_group(str(path), mode="w")
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
        return dict(self.group.attrs)

    @property
    def identity(self) -> dict[str, Any]:
        return dict(self.group.attrs["identity"])

    @property
    def fingerprint(self) -> str:
        return str(self.group.attrs["fingerprint"])

    @property
    def dim(self) -> int:
        return int(self.group["train/features"].shape[1])

    @property
    def views(self) -> int:
        return int(self.group["train/views"].shape[0]) if "views" in self.group["train"] else 0

    @property
    def chunk_size(self) -> int:
        return int(self.group["train/features"].chunks[0])

    def layout(self, split: str) -> SplitLayout:
        return SplitLayout(int(self.group[f"{split}/features"].shape[0]), self.chunk_size)

    def touch(self) -> None:
        with disk_errors(self.path, "updating the store's attrs"):
            self.group.attrs["updated"] = now_iso()

    # ------------------------------------------------------------ chunks

    def done(self, split: str) -> np.ndarray:
        return np.asarray(self.group[f"{split}/done"][:], dtype=bool)

    def has_checksums(self) -> bool:
        return all("checksums" in self.group[split] for split in SPLITS)

    def checksums(self, split: str) -> np.ndarray | None:
        """The recorded checksum of every chunk ("" where none), or None for a store made before them."""
        if "checksums" not in self.group[split]:
            return None
        return np.asarray(self.group[f"{split}/checksums"][:], dtype=object)

    def pending_chunks(self, split: str) -> list[int]:
        return [int(c) for c in np.flatnonzero(~self.done(split))]

    def is_complete(self) -> bool:
        return all(self.done(split).all() for split in SPLITS)

    def prepare_for_writing(self) -> None:
        """Called by the one writer (under the store's lock) before it computes chunks.

        Removes the temporary files (`*.partial`) that zarr leaves when a writer is killed between
        writing one and renaming it into place. A store made before checksums stays without them
        (adding them now would bless values nobody checked when they were written).
        """
        for leftover in self.path.rglob("*.partial"):
            with contextlib.suppress(OSError):
                leftover.unlink()

    def write_chunk(
        self, split: str, chunk: int, features: np.ndarray, views: np.ndarray | None = None
    ) -> None:
        """Write one whole sample chunk (features and all its views) and its done record.

        Refuses (UserError) values that are not finite: a chunk holding NaN or inf is never marked
        done. A chunk found done (a retried Dask task after its first writer died) is unflagged
        first, so a half-rewritten chunk is never trusted.
        """
        sl = self.layout(split).chunk_slice(chunk)
        expected = (sl.stop - sl.start, self.dim)
        dtype = self.group[f"{split}/features"].dtype
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
            if bool(self.group[f"{split}/done"][chunk]):
                self.group[f"{split}/done"][chunk] = False
            self.group[f"{split}/features"][sl] = features
            if views is not None:
                self.group["train/views"][:, sl] = views
            if "checksums" in self.group[split]:
                self.group[f"{split}/checksums"][chunk] = checksum
            self.group[f"{split}/done"][chunk] = True

    def _refuse_non_finite(
        self, split: str, chunk: int, features: np.ndarray, views: np.ndarray | None
    ) -> None:
        bad_clean = ~np.isfinite(features).all(axis=1)
        bad_views = ~np.isfinite(views).all(axis=2) if views is not None else None  # [V, n]
        if not bad_clean.any() and (bad_views is None or not bad_views.any()):
            return
        start = self.layout(split).chunk_slice(chunk).start
        ids = self.group[f"{split}/ids"]
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
                self.group[f"{split}/done"][chunk] = False
                if "checksums" in self.group[split]:
                    self.group[f"{split}/checksums"][chunk] = ""

    # ------------------------------------------------------------ reading

    def labels(self, split: str) -> np.ndarray:
        return np.asarray(self.group[f"{split}/labels"][:], dtype=np.int64)

    def ids(self, split: str) -> np.ndarray:
        return np.asarray(self.group[f"{split}/ids"][:])

    def features(self, split: str, index: np.ndarray | None = None) -> np.ndarray:
        array = self.group[f"{split}/features"]
        return np.asarray(array[:] if index is None else array.get_orthogonal_selection((index, slice(None))))

    def view(self, k: int, index: np.ndarray | None = None) -> np.ndarray:
        array = self.group["train/views"]
        if index is None:
            return np.asarray(array[k])
        return np.asarray(array.get_orthogonal_selection((k, index, slice(None))))

    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file())

    def require_complete(self) -> None:
        for split in SPLITS:
            missing = int((~self.done(split)).sum())
            if missing:
                total = self.layout(split).n_chunks
                raise UserError(
                    f"store {self.path} is not fully extracted: {missing}/{total} {split} chunks missing; "
                    "re-run the same `tosca extract` to finish it"
                )


def chunk_faults(store: FeatureStore) -> list[ChunkFault]:
    """Every done chunk whose values do not match its recorded checksum, cannot be read, or are not finite.

    A store made before checksums has none to compare: only readability and finiteness are checked.
    """
    faults: list[ChunkFault] = []
    for split in SPLITS:
        layout = store.layout(split)
        sums = store.checksums(split)
        arrays = [store.group[f"{split}/features"]]
        if split == "train" and store.views:
            arrays.append(store.group["train/views"])
        for chunk in np.flatnonzero(store.done(split)).tolist():
            sl = layout.chunk_slice(chunk)
            try:
                blocks = [np.asarray(array[..., sl, :]) for array in arrays]
            except Exception as exc:  # any decode failure of a damaged chunk file is the finding
                faults.append(ChunkFault(split, chunk, f"cannot be read ({type(exc).__name__})"))
                continue
            if not all(np.isfinite(block).all() for block in blocks):
                faults.append(ChunkFault(split, chunk, "NaN or inf in a chunk marked done"))
                continue
            if sums is None:
                continue
            recorded = str(sums[chunk])
            if not recorded:
                faults.append(ChunkFault(split, chunk, "marked done but no checksum recorded"))
            elif recorded != chunk_checksum(*blocks):
                faults.append(
                    ChunkFault(split, chunk, "values do not match the checksum recorded when it was written")
                )
    return faults


def verify_store(store: FeatureStore) -> list[str]:
    """Every reason the store is not fit for use; an empty list means it is."""
    problems: list[str] = []
    ident = store.identity
    if store.fingerprint != fingerprint(ident):
        problems.append("fingerprint does not match the identity attrs")
    dim = ident.get("backbone", {}).get("feature_dim")
    if dim is not None and dim != store.dim:
        problems.append(f"feature dim {store.dim} != backbone feature_dim {dim}")
    if ident.get("views", 0) != store.views:
        problems.append(f"views array has {store.views} views, attrs say {ident.get('views')}")
    for split in SPLITS:
        layout = store.layout(split)
        expected_n = ident.get("dataset", {}).get("samples", {}).get(split)
        if expected_n is not None and expected_n != layout.n:
            problems.append(f"{split}: {layout.n} rows, attrs say {expected_n}")
        for name in ("labels", "ids"):
            if store.group[f"{split}/{name}"].shape[0] != layout.n:
                problems.append(
                    f"{split}/{name} has {store.group[f'{split}/{name}'].shape[0]} rows, expected {layout.n}"
                )
        missing = np.flatnonzero(~store.done(split))
        if missing.size:
            problems.append(
                f"{split}: {missing.size}/{layout.n_chunks} chunks not done (first: {missing[:5].tolist()})"
            )
        n_classes = ident.get("dataset", {}).get("num_classes")
        labels = store.labels(split)
        if n_classes is not None and labels.size and (labels.min() < 0 or labels.max() >= n_classes):
            problems.append(f"{split}: labels outside 0..{n_classes - 1}")
        recorded_ids = ident.get("dataset", {}).get("ids_sha256", {}).get(split)
        if recorded_ids is not None and recorded_ids != ids_sha256(store.ids(split), labels):
            problems.append(f"{split}: ids or labels differ from the ones recorded in the identity")
    problems += [str(fault) for fault in chunk_faults(store)]
    return problems


def verify_notes(store: FeatureStore) -> list[str]:
    """What verify could not check, without failing the store for it."""
    notes = []
    if not store.has_checksums():
        notes.append(
            "no chunk checksums recorded (made before tosca kept them): values checked for NaN/inf only; "
            "`tosca extract ... --overwrite` rebuilds it with checksums"
        )
    skipped = store.attrs.get("skipped_images") or []
    if skipped:
        notes.append(f"{len(skipped)} unreadable image(s) were left out on purpose (see `tosca cache info`)")
    return notes


def find_stores(cache_dir: str | Path) -> list[Path]:
    """Every tosca store under `cache_dir` (folders named *.zarr with a schema version)."""
    root = Path(cache_dir)
    if not root.is_dir():
        return []
    found = []
    for meta in sorted(root.rglob("*.zarr/zarr.json")):
        try:
            attrs = json.loads(meta.read_text()).get("attributes", {})
        except (OSError, json.JSONDecodeError):
            continue
        if "schema_version" in attrs:
            found.append(meta.parent)
    return found
