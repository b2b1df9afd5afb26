"""What a store's attrs say, in words: `tosca cache ls`, `cache info` and `cache verify` read a store
through here, so the attrs schema has one reader. A store's attrs are data and may lack a field
(edited, older): every field read here has a "?" for missing.

The meanings of the named choices a store records (precision, decoder) are `store.meanings`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from featcache.store.find import find_stores
from featcache.store.format import FeatureStore
from featcache.store.left_out import LeftOut
from featcache.store.meanings import DECODERS, PRECISIONS
from featcache.store.object_lock import object_holder
from featcache.store.object_store import is_remote, store_location
from featcache.store.verify import ChunkFault, fix_store, verify_notes, verify_store
from tosca_foundation.errors import UserError
from tosca_foundation.locks import holder
from tosca_foundation.text import image_name, printable
from tosca_foundation.units import human_bytes


def field_of(block: Any, *keys: str) -> Any:
    """attrs[k1][k2]... or '?'."""
    for key in keys:
        if not isinstance(block, dict) or key not in block:
            return "?"
        block = block[key]
    return block


def _writer(store: FeatureStore, given: Path) -> str | None:
    """Who is writing the store now, from its lock record (beside it, or its lock object)."""
    return object_holder(store.path) if is_remote(store.path) else holder(given)


def said_as(store: FeatureStore, given: Path) -> str:
    """A store as a line names it: as the user gave a local one, by its URL on object storage."""
    return str(store.path) if is_remote(store.path) else str(given)


def list_stores(cache_dir: Path) -> list[dict[str, Any]]:
    """One row per store under the cache root; a store that cannot be read has an `error`."""
    remote = is_remote(store_location(cache_dir, folder=True, flag="--cache-dir"))
    if not remote and cache_dir.exists() and not cache_dir.is_dir():
        raise UserError(f"--cache-dir {cache_dir} is a file, not a folder")
    if not remote and not cache_dir.exists():
        raise UserError(f"no folder {cache_dir}: pass --cache-dir with the folder your stores are in")
    rows = []
    for path in find_stores(cache_dir):
        try:  # a damaged store is a row saying why; the others are still listed
            rows.append(_row(path))
        except UserError as exc:
            rows.append({"store": str(path), "error": str(exc)})
    return rows


def _row(path: Path) -> dict[str, Any]:
    store = FeatureStore.open(path)
    ident = store.identity
    return {
        "store": str(path),
        "dataset": str(field_of(ident, "dataset", "name")),
        "backbone": str(field_of(ident, "backbone", "alias")),
        "weights": "imported"
        if isinstance(ident.get("imported"), dict)
        else str(field_of(ident, "backbone", "weights_source")),
        "policy": str(field_of(ident, "preprocessing", "policy")),
        "train": store.layout("train").n,
        "test": store.layout("test").n,
        "dim": store.dim,
        "views": store.views,
        "complete": store.is_complete(),
        "bytes": store.size_bytes(),
    }


@dataclass
class Description:
    """`cache info`: rows of (key, text, warn: shown highlighted), and everything as a JSON object."""

    rows: list[tuple[str, str, bool]]
    data: dict[str, Any]


def describe(path: Path) -> Description:
    """A store's metadata in words: backbone, weights, preprocessing, source, progress, what was left out."""
    store = FeatureStore.open(path)
    attrs = store.attrs
    progress = {s: f"{int(store.done(s).sum())}/{store.layout(s).n_chunks} chunks" for s in ("train", "test")}
    writer = _writer(store, path)
    data = {**attrs, "chunks_done": progress, "bytes": store.size_bytes(), "writer": writer}
    ident = attrs.get("identity", {})
    bb, ds, prep = (field_of(ident, k) for k in ("backbone", "dataset", "preprocessing"))
    random_init = field_of(bb, "random_init") is True
    weights = str(field_of(bb, "weights_source")) + (" (RANDOM INIT: not pretrained)" if random_init else "")
    samples = field_of(ds, "samples")
    precision = str(field_of(ident, "precision"))
    decoder = str(field_of(prep, "decoder"))
    if isinstance(field_of(ident, "imported"), dict):
        return Description(_imported_rows(path, store, attrs, progress, writer), data)
    rows: list[tuple[str, str, bool]] = [
        ("store", said_as(store, path), False),
        (
            "backbone",
            f"{field_of(bb, 'alias')} = {field_of(bb, 'timm_name')} (dim {field_of(bb, 'feature_dim')})",
            False,
        ),
        ("weights", weights, random_init),
        ("weights sha256", str(field_of(bb, "weights_sha256")), False),
        (
            "preprocessing",
            ", ".join(f"{k}={v}" for k, v in prep.items() if k != "decoder")
            if isinstance(prep, dict)
            else "?",
            False,
        ),
        ("decoder", f"{decoder}: {DECODERS[decoder]}" if decoder in DECODERS else decoder, False),
        ("dataset", f"{field_of(ds, 'name')} ({field_of(ds, 'num_classes')} classes)", False),
        ("data root", _source(ds, attrs), False),
        ("split rule", str(field_of(ds, "split_rule")), False),
        ("limit per class", str(field_of(ds, "limit_per_class")), False),
        (
            "samples",
            ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in samples.items())
            if isinstance(samples, dict)
            else "?",
            False,
        ),
        ("views / seed", f"{field_of(ident, 'views')} / {field_of(ident, 'seed')}", False),
        ("dtype", str(field_of(ident, "dtype")), False),
        (
            "precision",
            f"{precision}: {PRECISIONS.get(precision, 'as recorded')}"
            + ("" if precision == "fp32" else " (not the fp32 default)"),
            precision != "fp32",
        ),
        ("progress", ", ".join(f"{k} {v}" for k, v in progress.items()), False),
        ("checksums", "per chunk, checked by `tosca cache verify` and before stage 2 reads", False),
        ("size", human_bytes(store.size_bytes()), False),
        ("fingerprint", str(attrs.get("fingerprint")), False),
        ("created / updated", f"{attrs.get('created')} / {attrs.get('updated')}", False),
        ("versions", ", ".join(f"{k} {v}" for k, v in (attrs.get("versions") or {}).items()), False),
    ]
    if "left_out" in attrs:
        rows.append(("left out", LeftOut.from_attrs(attrs["left_out"]).described() or "nothing", False))
    if writer is not None:
        rows.append(("being written", f"by tosca extract, {writer}", False))
    if field_of(ident, "skip_bad_images") is True:
        skipped = [item for item in attrs.get("skipped_images") or [] if isinstance(item, dict)]
        rows.append(("skipped images", f"{len(skipped)} unreadable, left out (--skip-bad-images)", False))
        rows += [
            (
                " ",
                f"{image_name(str(item.get('split', '?')), str(item.get('id', '?')))}: {item.get('reason', '?')}",
                False,
            )
            for item in skipped
        ]
    return Description(rows, data)


def _imported_rows(
    path: Path, store: FeatureStore, attrs: dict[str, Any], progress: dict[str, str], writer: str | None
) -> list[tuple[str, str, bool]]:
    """`cache info` of a store made by `tosca import`: the encoder as its user named it (never run
    here), the modality, and where the arrays came from (each file and its sha256)."""
    ident = attrs.get("identity", {})
    bb, ds = field_of(ident, "backbone"), field_of(ident, "dataset")
    samples = field_of(ds, "samples")
    provenance = attrs.get("provenance") if isinstance(attrs.get("provenance"), dict) else {}
    files = [f for f in provenance.get("files") or [] if isinstance(f, dict)]
    rows: list[tuple[str, str, bool]] = [
        ("store", said_as(store, path), False),
        (
            "encoder",
            f"{printable(field_of(bb, 'encoder'))} (dim {field_of(bb, 'feature_dim')}; imported: computed "
            "outside tosca, never run here)",
            False,
        ),
        ("modality", printable(field_of(ident, "modality")), False),
        ("imported from", ", ".join(map(str, provenance.get("formats") or ["?"])), False),
        *[
            (" ", f"{printable(f.get('file', '?'))} (sha256 {str(f.get('sha256', '?'))[:12]})", False)
            for f in files
        ],
        ("dataset", f"{printable(field_of(ds, 'name'))} ({field_of(ds, 'num_classes')} classes)", False),
        ("split rule", printable(field_of(ds, "split_rule")), False),
        (
            "samples",
            ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in samples.items())
            if isinstance(samples, dict)
            else "?",
            False,
        ),
        ("views", str(field_of(ident, "views")), False),
        ("dtype", str(field_of(ident, "dtype")), False),
        ("progress", ", ".join(f"{k} {v}" for k, v in progress.items()), False),
        ("checksums", "per chunk, checked by `tosca cache verify` and before stage 2 reads", False),
        ("size", human_bytes(store.size_bytes()), False),
        ("fingerprint", f"{attrs.get('fingerprint')} (of what the store holds, not of its files)", False),
        ("created / updated", f"{attrs.get('created')} / {attrs.get('updated')}", False),
        ("versions", ", ".join(f"{k} {v}" for k, v in (attrs.get("versions") or {}).items()), False),
    ]
    if writer is not None:
        rows.append(("being written", f"by tosca import, {writer}", False))
    return rows


def _source(dataset: Any, attrs: dict[str, Any]) -> str:
    """Where the images came from, and how the store can tell whether they changed."""
    root = field_of(dataset, "data_root")
    if root == "?":
        return f"{attrs.get('dataset_source')} (not recorded in the identity: the store was not made by `tosca extract`)"
    if field_of(dataset, "source_sha256") not in ("?", None):
        return f"{root} (archive sha256 {str(dataset['source_sha256'])[:12]})"
    return f"{root} (files fingerprint {str(field_of(dataset, 'files_sha256'))[:12]}: names, sizes, modification times)"


@dataclass
class VerifyReport:
    """`cache verify`: what --fix unflagged, every problem (none: the store is fit for use), notes."""

    fixed: list[ChunkFault] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    store: str = ""  # as it was opened: a local path, or its URL on object storage


def verify(
    path: Path, fix: bool = False, on_chunk: Callable[[str, int, int], None] | None = None
) -> VerifyReport:
    """Every check of `tosca cache verify`; with `fix`, the failing chunks unflagged first;
    `on_chunk` hears of each chunk checked."""
    FeatureStore.open(path)  # one line for a folder that is no store, before the lock is taken
    report = VerifyReport()
    if fix:
        report.fixed = fix_store(path)
    store = FeatureStore.open(path)
    report.store = said_as(store, path)
    report.problems = verify_store(store, on_chunk)
    report.notes = verify_notes(store)
    writer = _writer(store, path)
    if writer is not None and any("chunks not done" in p for p in report.problems):
        report.notes.append(f"an extraction is writing it now ({writer})")
    return report
