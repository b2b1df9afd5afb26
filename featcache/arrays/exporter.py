"""`tosca export`: a store, read as stage 2 reads it (complete, every chunk against its checksum),
written as one file (or folder) a notebook or another library reads in one call:

- `.npz` (`np.load`): `features` [N, D], `labels` [N], `split` [N] ("train"/"test"), `ids` [N],
  `class_names` [K], `views` [N, V, D] when the store has views (a test row's are zeros: a store
  keeps none), and `tosca`, a JSON text (name, encoder, modality, class names, the store's
  fingerprint);
- Parquet (`pandas.read_parquet`, `pyarrow.parquet.read_table`): one row per sample, columns `ids`,
  `split`, `labels`, `features` (a list of D floats), `views` (V lists of D; null for a test row),
  the JSON under the schema's metadata key `tosca`;
- a `datasets` folder (`datasets.load_from_disk`, with the optional extra `datasets`): the Parquet
  columns as a Dataset, `labels` a ClassLabel of the class names, the JSON in its description.

Rows are train then test, each in the store's order; `tosca import` reads each back into the same
store (same fingerprint)."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from featcache.arrays.readers import META_KEY
from featcache.arrays.requests import ExportRequest
from featcache.arrays.sources import DATASETS_MARKERS
from featcache.store.format import SPLITS, FeatureStore
from featcache.store.verify import check_readable, read_split
from tosca_foundation.atomic import writing
from tosca_foundation.errors import UserError, UserValueError
from tosca_foundation.files import disk_errors
from tosca_foundation.folders import zarr_root
from tosca_foundation.text import printable

FORMATS = {".npz": "npz", ".parquet": "parquet"}
EXPORT_FORMAT = 1  # of the `tosca` metadata an export carries


@dataclass(frozen=True)
class Exported:
    """One store's rows as exported: every column, and the metadata written beside them."""

    columns: dict[str, np.ndarray]
    meta: dict[str, Any]


@dataclass(frozen=True)
class ExportSummary:
    to: Path
    format: str
    rows: int
    dim: int
    views: int


def format_of(request: ExportRequest) -> str:
    """The format asked for, or the one --to's suffix names; checked before the store is read."""
    spell = request.spell
    if request.format is not None:
        if request.format not in ("npz", "parquet", "datasets"):
            raise UserValueError(
                f"unknown {spell('format')} {request.format!r}: use npz, parquet or datasets"
            )
        return request.format
    kind = FORMATS.get(Path(request.to).suffix.lower())
    if kind is None:
        raise UserValueError(
            f"{spell('to')} {printable(request.to)} has no .npz or .parquet suffix: name one, or pass "
            f"{spell('format')} (datasets writes a folder)"
        )
    return kind


def _check_target(request: ExportRequest, kind: str) -> Path:
    to, spell = Path(request.to), request.spell
    if to.name in ("", ".", ".."):
        raise UserError(f"{spell('to')} {str(request.to)!r} names no file or folder")
    if zarr_root(to.parent) is not None or zarr_root(to) is not None:
        raise UserError(f"{spell('to')} {printable(to)} lies inside a zarr store: pass a place of its own")
    if not to.absolute().parent.is_dir():
        raise UserError(
            f"{spell('to')} {printable(to)}: its folder {printable(to.absolute().parent)} is not there"
        )
    if to.is_symlink():
        raise UserError(
            f"{spell('to')} {printable(to)} is a symbolic link: tosca writes through no link, name the file itself"
        )
    if to.exists() and not request.overwrite:
        raise UserError(
            f"{spell('to')} {printable(to)} is there already: pass {spell('overwrite')} to replace it"
        )
    if to.exists() and (to.is_dir() != (kind == "datasets")):
        raise UserError(
            f"{spell('to')} {printable(to)} is a {'folder' if to.is_dir() else 'file'}: not what {kind} writes"
        )
    if kind == "datasets":
        if to.is_dir() and not any((to / marker).is_file() for marker in DATASETS_MARKERS):
            raise UserError(
                f"{spell('to')} {printable(to)} is a folder but no `datasets` folder: tosca replaces only one"
            )
        _require_datasets()
    return to


def _require_datasets() -> Any:
    try:
        import datasets
    except ImportError:
        raise UserError(
            "--format datasets needs the optional extra: pip install 'tosca[datasets]' (or write .npz or .parquet)"
        ) from None
    return datasets


def exported(store: FeatureStore) -> Exported:
    """The store's rows, checked as stage 2 checks them, as columns and metadata."""
    check_readable(store)
    ident = store.identity
    features, views, labels, ids, split = [], None, [], [], []
    for part in SPLITS:
        values, part_views = read_split(store, part)
        features.append(values)
        labels.append(store.labels(part))
        ids += [str(i) for i in store.ids(part)]
        split += [part] * len(values)
        if part_views is not None:
            views = np.swapaxes(part_views, 0, 1)  # [n_train, V, D]
    columns: dict[str, np.ndarray] = {
        "ids": np.asarray(ids, dtype=str),
        "split": np.asarray(split, dtype=str),
        "labels": np.concatenate(labels).astype(np.int64),
        "features": np.concatenate(features),
    }
    if views is not None:
        test_rows = len(columns["ids"]) - len(views)
        columns["views"] = np.concatenate([views, np.zeros((test_rows, *views.shape[1:]), views.dtype)])
    dataset, backbone = ident["dataset"], ident["backbone"]
    names = dataset.get("class_names") or [str(i) for i in range(int(dataset["num_classes"]))]
    meta = {
        "format": EXPORT_FORMAT,
        "name": dataset["name"],
        "encoder": backbone.get("encoder", backbone["alias"]),
        "modality": ident.get("modality", "image"),
        "class_names": list(names),
        "split_rule": str(dataset.get("split_rule", "as the store's train and test")),
        "store_fingerprint": store.fingerprint,
    }
    return Exported(columns, meta)


def export_store(request: ExportRequest) -> ExportSummary:
    """`tosca export`: the flags checked, the store read and checked, then one file (or folder)
    written beside its place and renamed into it."""
    kind = format_of(request)
    to = _check_target(request, kind)
    store = FeatureStore.open(request.store)
    data = exported(store)
    with disk_errors(to, f"writing the {kind} export"):
        WRITERS[kind](data, to)
    return ExportSummary(to, kind, len(data.columns["ids"]), store.dim, store.views)


def _write_npz(data: Exported, to: Path) -> None:
    arrays = {**data.columns, "class_names": np.asarray(data.meta["class_names"], dtype=str)}
    arrays[META_KEY] = np.asarray(json.dumps(data.meta))
    with writing(to, "wb") as handle:
        np.savez(handle, **arrays)


def arrow_table(data: Exported) -> Any:
    """The columns as an Arrow table, one row per sample; views null for a test row."""
    import pyarrow as pa

    columns = data.columns
    table = {
        "ids": pa.array(columns["ids"].tolist(), pa.string()),
        "split": pa.array(columns["split"].tolist(), pa.string()),
        "labels": pa.array(columns["labels"]),
        "features": _lists(columns["features"], pa),
    }
    if "views" in columns:
        train = columns["split"] == "train"
        nested = _lists(columns["views"].reshape(-1, columns["views"].shape[-1]), pa)
        offsets = pa.array(np.arange(0, len(nested) + 1, columns["views"].shape[1], dtype=np.int32))
        views = pa.ListArray.from_arrays(offsets, nested, mask=pa.array(~train))
        table["views"] = views
    return pa.table(table, metadata={META_KEY: json.dumps(data.meta)})


def _lists(values: np.ndarray, pa: Any) -> Any:
    """[N, D] as N lists of D values (a fixed-size list column)."""
    flat = pa.array(np.ascontiguousarray(values).reshape(-1))
    return pa.FixedSizeListArray.from_arrays(flat, values.shape[1])


def _write_parquet(data: Exported, to: Path) -> None:
    import pyarrow.parquet as pq

    with writing(to, "wb") as handle:
        pq.write_table(arrow_table(data), handle)


def _write_datasets(data: Exported, to: Path) -> None:
    """Through `datasets` itself (its save_to_disk), so the folder is exactly its own."""
    datasets = _require_datasets()
    table = arrow_table(data)
    features = datasets.Features.from_arrow_schema(table.schema)
    features["labels"] = datasets.ClassLabel(names=data.meta["class_names"])
    info = datasets.DatasetInfo(description=json.dumps({META_KEY: data.meta}), features=features)
    dataset = datasets.Dataset(table.cast(features.arrow_schema), info=info)
    staging = to.with_name(to.name + ".writing")
    if staging.exists():
        shutil.rmtree(staging)
    dataset.save_to_disk(str(staging))
    if to.exists():
        shutil.rmtree(to)
    staging.rename(to)


WRITERS = {"npz": _write_npz, "parquet": _write_parquet, "datasets": _write_datasets}
