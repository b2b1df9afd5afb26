"""The feature store: one zarr v3 group per dataset x backbone x preprocessing policy.

Layout (design.md): `<split>/features [N, D]`, `train/views [V, N, D]`, `<split>/labels [N]`,
`<split>/ids [N]`, `<split>/done [chunks]`. Sample chunks are the unit of work: each is
written whole by exactly one writer and then flagged done, so a killed run leaves at worst a
chunk without its flag, which the next run recomputes.

Import-light (zarr, numpy only): stage 2 reads stores through this module.
"""

from __future__ import annotations

import hashlib
import json
import shutil
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
            raise UserError(f"not a feature store: {path} (no zarr.json); see `tosca cache ls`")
        group = zarr.open_group(str(path), mode=mode)
        schema = group.attrs.get("schema_version")
        if schema is None:
            raise UserError(
                f"{path} is a zarr group but not a complete tosca store (no schema_version); re-extract it"
            )
        if schema != SCHEMA_VERSION:
            raise UserError(f"{path} has store schema {schema}, this tosca reads schema {SCHEMA_VERSION}")
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
        self.group.attrs["updated"] = now_iso()

    # ------------------------------------------------------------ chunks

    def done(self, split: str) -> np.ndarray:
        return np.asarray(self.group[f"{split}/done"][:], dtype=bool)

    def pending_chunks(self, split: str) -> list[int]:
        return [int(c) for c in np.flatnonzero(~self.done(split))]

    def is_complete(self) -> bool:
        return all(self.done(split).all() for split in SPLITS)

    def write_chunk(
        self, split: str, chunk: int, features: np.ndarray, views: np.ndarray | None = None
    ) -> None:
        """Write one whole sample chunk (features and all its views), then flag it done."""
        sl = self.layout(split).chunk_slice(chunk)
        expected = (sl.stop - sl.start, self.dim)
        if features.shape != expected:
            raise ValueError(f"chunk {chunk} of {split}: features {features.shape}, expected {expected}")
        self.group[f"{split}/features"][sl] = features
        if split == "train" and self.views:
            if views is None or views.shape != (self.views, *expected):
                raise ValueError(f"chunk {chunk}: views {None if views is None else views.shape}")
            self.group["train/views"][:, sl] = views
        self.group[f"{split}/done"][chunk] = True

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
        arrays = [store.group[f"{split}/features"]]
        if split == "train" and store.views:
            arrays.append(store.group["train/views"])
        done = store.done(split)
        for array in arrays:
            for chunk in np.flatnonzero(done):
                sl = layout.chunk_slice(int(chunk))
                block = np.asarray(array[..., sl, :])
                if not np.isfinite(block).all():
                    problems.append(f"{array.path}: NaN or inf in chunk {int(chunk)}")
                    break
    return problems


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
