"""`tosca import`: arrays computed elsewhere become a store that every stage-2 command reads as it
reads an extracted one, written by the store's one writer (`FeatureStore.create` in a staging
folder renamed into place, then each chunk through `ChunkWriter` and `write_chunk`: checksums,
the finite check, done flags last), under the store's lock, resumable.

An imported store's identity is what it holds, not where it came from: the dataset (name, class
names, split rule, counts, ids), the encoder as the user names it, the modality, and the sha256 of
the features as stored. Its fingerprint is therefore the same for the same arrays read from any
format (an import -> export -> import round trip gives the store it started from, and a run or a
sweep on one resumes on the other), and different as soon as one value differs. Where the arrays
came from (each source file and its sha256, the formats, the columns) is its provenance, in the
attrs beside the identity: `tosca cache info` shows both. Nothing claims a backbone: the identity
says `imported` and names no timm model, so `tosca predict` refuses to embed new inputs with it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from featcache.arrays.checks import Checked, check_columns
from featcache.arrays.readers import Found, read_sources
from featcache.arrays.requests import ImportRequest
from featcache.outline import refuse_replacing_other_things, stored_identity
from featcache.pipeline.writer import ChunkWriter
from featcache.store.format import (
    DTYPES,
    SPLITS,
    FeatureStore,
    check_name,
    chunk_checksum,
    ids_sha256,
    is_tosca_store,
)
from featcache.store.object_lock import store_lock
from featcache.store.object_store import ObjectStorePath, is_remote, require_store_key, store_location
from featcache.store.staging import clear_leftovers, create_in_place
from tosca_foundation.errors import UserError, UserValueError
from tosca_foundation.fingerprints import identity_differences
from tosca_foundation.folders import zarr_root
from tosca_foundation.text import printable, text_argument
from tosca_foundation.version import __version__

MODALITY = re.compile(r"^[a-z][a-z0-9-]{0,39}$")
MAX_ENCODER = 200  # characters of the encoder's name


@dataclass(frozen=True)
class ImportOutline:
    """What the import will make, said before the store is touched."""

    store: Path | ObjectStorePath
    encoder: str
    modality: str
    name: str
    rows: dict[str, int]
    dim: int
    views: int
    classes: int
    split_rule: str

    def line(self) -> str:
        counts = ", ".join(f"{split} {self.rows[split]:,}" for split in SPLITS)
        views = f", {self.views} views" if self.views else ""
        return (
            f"import: {self.name} ({self.classes} classes, {self.modality}, encoder {printable(self.encoder)}): "
            f"{counts} rows of {self.dim} features{views}; split {self.split_rule} -> {self.store}"
        )


@dataclass(frozen=True)
class ImportSummary:
    store: Path | ObjectStorePath
    rows: dict[str, int]
    dim: int
    views: int
    classes: int
    chunks_written: int
    chunks_kept: int
    seconds: float
    fingerprint: str

    @property
    def already_done(self) -> bool:
        return self.chunks_written == 0


def check_request(request: ImportRequest) -> Path | ObjectStorePath:
    """Every flag alone, before a source is read: the store's place and each value's range."""
    spell = request.spell
    path = store_location(request.store, flag=spell("store"))
    if is_remote(path):
        require_store_key(path, spell("store"))
    elif path.name in ("", ".", ".."):
        raise UserError(f"{spell('store')} {str(request.store)!r} names no folder: give the store a name")
    inside = None if is_remote(path) else zarr_root(path.parent)
    if inside is not None:
        raise UserError(
            f"{spell('store')} {path} lies inside the zarr store {inside}: pass a place of its own"
        )
    if not is_remote(path) and path.is_dir() and any(path.iterdir()) and not is_tosca_store(path):
        raise UserError(
            f"{spell('store')} {printable(path)} is a folder that is not a tosca store: pass a new path"
        )
    if request.dtype not in DTYPES:
        raise UserValueError(f"unknown {spell('dtype')} {request.dtype!r}: use one of {', '.join(DTYPES)}")
    if request.chunk_size < 1:
        raise UserValueError(f"{spell('chunk_size')} must be at least 1, got {request.chunk_size}")
    if request.test_fraction is not None and not 0.0 < request.test_fraction < 1.0:
        raise UserValueError(
            f"{spell('test_fraction')} must be between 0 and 1 (both excluded), got {request.test_fraction:g}"
        )
    if request.split_seed < 0:
        raise UserValueError(f"{spell('split_seed')} must be 0 or more, got {request.split_seed}")
    if request.name is not None:
        check_name("dataset name", request.name)
    if request.encoder is not None:
        _check_encoder(request.encoder, spell("encoder"))
    if request.modality is not None:
        _check_modality(request.modality, spell("modality"))
    return path


def _check_encoder(encoder: Any, where: str) -> str:
    text = text_argument(str(encoder))
    if not text.strip() or len(text) > MAX_ENCODER or not text.isprintable():
        raise UserValueError(
            f"{where} {printable(text)!r} names no encoder: give its name in printable text of at most "
            f"{MAX_ENCODER} characters (e.g. all-MiniLM-L6-v2)"
        )
    return text


def _check_modality(modality: Any, where: str) -> str:
    text = str(modality)
    if not MODALITY.match(text):
        raise UserValueError(
            f"{where} {printable(text)!r} is no modality word: lower-case letters, digits and - (image, text, audio, ...)"
        )
    return text


def alias_of(encoder: str) -> str:
    """The encoder's name made safe as a folder name (what stage 2 names runs and columns by)."""
    slug = re.sub(r"[^A-Za-z0-9_.+-]+", "-", encoder).replace("..", ".").strip("-.+")[:100]
    return check_name("encoder alias", slug) if slug else "imported"


def _described(found: Found, request: ImportRequest, path: Path | ObjectStorePath) -> tuple[str, str, str]:
    """(encoder, modality, dataset name): the flags', else what the sources record."""
    spell = request.spell
    encoder = request.encoder if request.encoder is not None else found.meta.get("encoder")
    modality = request.modality if request.modality is not None else found.meta.get("modality")
    if encoder is None:
        raise UserError(
            f"say which encoder computed the features: {spell('encoder')} NAME (recorded, never run; the "
            "sources record none)"
        )
    if modality is None:
        raise UserError(
            f"say what the features describe: {spell('modality')} image, text, audio, ... (the sources record none)"
        )
    name = request.name if request.name is not None else found.meta.get("name", path.name.split(".")[0])
    return (
        _check_encoder(encoder, "the sources' encoder"),
        _check_modality(modality, "the sources' modality"),
        check_name("dataset name", name),
    )


def identity_of(checked: Checked, encoder: str, modality: str, name: str, dtype: str) -> dict[str, Any]:
    """What the store holds (its fingerprint's input): see the module's docstring."""
    stored = {split: _as_stored(checked, split, dtype) for split in SPLITS}
    return {
        "dataset": {
            "name": name,
            "num_classes": len(checked.class_names),
            "class_names": checked.class_names,
            "split_rule": checked.split_rule,
            "samples": {split: len(part.ids) for split, part in checked.parts.items()},
            "ids_sha256": {split: ids_sha256(part.ids, part.labels) for split, part in checked.parts.items()},
        },
        "backbone": {
            "alias": alias_of(encoder),
            "encoder": encoder,
            "feature_dim": checked.dim,
            "imported": True,
        },
        "modality": modality,
        "imported": {"features_sha256": {split: chunk_checksum(*blocks) for split, blocks in stored.items()}},
        "views": checked.views,
        "dtype": dtype,
    }


def _as_stored(checked: Checked, split: str, dtype: str) -> list[np.ndarray]:
    """The split's features (and views) as the writer stores them; a value beyond the dtype's range
    is refused here, before anything is written."""
    part = checked.parts[split]
    blocks = [part.features.astype(dtype, copy=False)]
    if part.views is not None:
        blocks.append(part.views.astype(dtype, copy=False))
    if not all(np.isfinite(block).all() for block in blocks):
        raise UserError(
            f"{split} values lie beyond what {dtype} holds (they would be stored as inf): use --dtype float32"
        )
    return blocks


def provenance_of(found: Found, request: ImportRequest) -> dict[str, Any]:
    """Where the arrays came from: the attrs beside the identity (`cache info` shows it)."""
    import zarr

    columns = {key: getattr(request, key) for key in ("features", "labels", "split", "ids", "views")}
    return {
        "provenance": {
            "imported": True,
            "files": found.files,
            "formats": found.formats,
            "columns": {key: value for key, value in columns.items() if value in found.columns},
            **(
                {"class_names_file": str(Path(request.class_names).absolute())} if request.class_names else {}
            ),
        },
        "versions": {"tosca": __version__, "numpy": np.__version__, "zarr": zarr.__version__},
    }


def plan_import(request: ImportRequest) -> tuple[ImportOutline, Checked, dict[str, Any], dict[str, Any]]:
    """Read and check everything (one line for any mistake, nothing written): the outline, the
    checked columns, the identity and the provenance."""
    path = check_request(request)
    found = read_sources(tuple(Path(s) for s in request.sources))
    checked = check_columns(found, request)
    encoder, modality, name = _described(found, request, path)
    identity = identity_of(checked, encoder, modality, name, request.dtype)
    rows = {split: len(part.ids) for split, part in checked.parts.items()}
    outline = ImportOutline(
        path,
        encoder,
        modality,
        name,
        rows,
        checked.dim,
        checked.views,
        len(checked.class_names),
        checked.split_rule,
    )
    return outline, checked, identity, provenance_of(found, request)


def import_arrays(
    request: ImportRequest, on_outlined: Callable[[ImportOutline], None] | None = None
) -> ImportSummary:
    """`tosca import`: plan (nothing written), tell `on_outlined`, then under the store's lock make
    the store (or find this import's own, half-written one) and write its pending chunks."""
    start = time.perf_counter()
    outline, checked, identity, meta = plan_import(request)
    if not request.overwrite:  # one line before the outline; checked again under the lock
        _refuse_other_arrays(outline.store, identity, request)
    if on_outlined is not None:
        on_outlined(outline)
    with store_lock(outline.store):
        store = _open_or_create(outline.store, identity, meta, checked, request)
        pending = {split: store.pending_chunks(split) for split in SPLITS}
        for split in SPLITS:
            _write_chunks(store, split, pending[split], checked)
        store.touch()
    written = sum(len(chunks) for chunks in pending.values())
    total = sum(store.layout(split).n_chunks for split in SPLITS)
    return ImportSummary(
        store.path,
        outline.rows,
        checked.dim,
        checked.views,
        len(checked.class_names),
        written,
        total - written,
        time.perf_counter() - start,
        store.fingerprint,
    )


def _open_or_create(
    path: Path | ObjectStorePath,
    identity: dict[str, Any],
    meta: dict[str, Any],
    checked: Checked,
    request: ImportRequest,
) -> FeatureStore:
    """This import's store: the one there when it holds the same arrays (a rerun resumes it), else a
    new one (with --overwrite in place of another); the caller holds the lock."""
    clear_leftovers(path)
    if not request.overwrite and _refuse_other_arrays(path, identity, request):
        store = FeatureStore.open(path, mode="r+")
        store.prepare_for_writing()
        return store
    refuse_replacing_other_things(path)
    create_in_place(
        path,
        lambda staging: FeatureStore.create(
            staging,
            identity,
            meta,
            ids={split: part.ids for split, part in checked.parts.items()},
            labels={split: part.labels for split, part in checked.parts.items()},
            dim=checked.dim,
            views=checked.views,
            chunk_size=request.chunk_size,
            dtype=request.dtype,
        ),
    )
    return FeatureStore.open(path, mode="r+")


def _refuse_other_arrays(
    path: Path | ObjectStorePath, identity: dict[str, Any], request: ImportRequest
) -> bool:
    """Whether a store is at `path` (it holds these arrays: a rerun finishes or finds it whole); one
    holding others is refused in one line naming what differs."""
    existing = stored_identity(path)
    if existing is None:
        return False
    diffs = identity_differences(existing, identity)
    if diffs:
        shown = "; ".join(diffs[:3]) + (f"; and {len(diffs) - 3} more" if len(diffs) > 3 else "")
        raise UserError(
            f"store {path} holds other features ({shown}); pass {request.spell('overwrite')} to replace "
            f"it or {request.spell('store')} PATH for a new one"
        )
    return True


def _write_chunks(store: FeatureStore, split: str, chunks: list[int], checked: Checked) -> None:
    """Each pending chunk whole, through the pipeline's writer (as `tosca extract` writes one)."""
    part = checked.parts[split]
    writer = ChunkWriter(store, split, str(store.node(f"{split}/features").dtype))
    for chunk in chunks:
        rows = store.layout(split).chunk_slice(chunk)
        views = None if part.views is None or split != "train" else np.swapaxes(part.views[:, rows], 0, 1)
        writer.add(list(range(rows.start, rows.stop)), part.features[rows], views)
