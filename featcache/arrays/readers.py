"""One reader per format: each turns a source into named columns (numpy arrays, one row per
sample, or [N, V, D] for views) and what the file says of itself (`tosca` metadata: class names,
encoder, modality, name, as `tosca export` writes them). What the columns hold is checked in
`featcache.arrays.checks`, once, whatever the format."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from featcache.arrays.sources import source_format
from tosca_foundation.errors import UserError
from tosca_foundation.fingerprints import file_sha256
from tosca_foundation.limits import available_memory
from tosca_foundation.text import printable, reason
from tosca_foundation.units import human_bytes

META_KEY = "tosca"  # the key of the JSON object `tosca export` writes beside the columns
SPLIT_FOLDERS = ("train", "test")  # a DatasetDict's splits that become the store's


@dataclass
class Found:
    """Every column the sources hold (name -> array, and which source it came from), what they say
    of themselves, and each source file's sha256 (the store's provenance)."""

    columns: dict[str, np.ndarray] = field(default_factory=dict)
    where: dict[str, str] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    files: list[dict[str, str]] = field(default_factory=list)
    formats: list[str] = field(default_factory=list)

    def add(self, name: str, values: np.ndarray, source: Path) -> None:
        if name in self.columns:
            raise UserError(
                f"column {name!r} is in both {printable(self.where[name])} and {printable(source)}: "
                "give each column once"
            )
        self.columns[name] = values
        self.where[name] = str(source)

    def said(self, meta: Any, source: Path) -> None:
        if not isinstance(meta, dict):
            raise UserError(
                f"source {printable(source)} holds {META_KEY!r} metadata that is not a JSON object"
            )
        self.meta.update(meta)


def _meta_json(text: str | bytes, source: Path) -> Any:
    try:
        return json.loads(text)
    except (ValueError, UnicodeDecodeError):
        raise UserError(f"source {printable(source)} holds {META_KEY!r} metadata that is not JSON") from None


def read_sources(sources: tuple[Path, ...]) -> Found:
    """Every column of every source, each source's format checked first."""
    if not sources:
        raise UserError("no source given: name the files (or the `datasets` folder) holding the arrays")
    found = Found()
    for source in sources:
        kind = source_format(source)
        try:
            READERS[kind](source, found)
        except UserError:
            raise
        except (
            ValueError,
            OSError,
            KeyError,
            TypeError,
            EOFError,
        ) as exc:  # a damaged file of the right kind
            raise UserError(f"cannot read source {printable(source)} as {kind} ({reason(exc)})") from None
        found.formats.append(kind)
        found.files += _digests(source)
    return found


def _digests(source: Path) -> list[dict[str, str]]:
    files = sorted(p for p in source.rglob("*") if p.is_file()) if source.is_dir() else [source]
    return [{"file": str(p.absolute()), "sha256": file_sha256(p)} for p in files]


def _read_npz(source: Path, found: Found) -> None:
    with np.load(source, allow_pickle=False) as archive:
        for name in archive.files:
            values = archive[name]
            if name == META_KEY:
                found.said(_meta_json(str(values), source), source)
            elif name == "class_names":
                found.meta["class_names"] = [str(v) for v in np.atleast_1d(values).tolist()]
            else:
                found.add(name, values, source)


def _read_npy(source: Path, found: Found) -> None:
    found.add(source.stem, np.load(source, allow_pickle=False), source)


def _read_safetensors(source: Path, found: Found) -> None:
    from safetensors import safe_open

    with safe_open(str(source), framework="numpy") as handle:
        meta = handle.metadata() or {}
        if META_KEY in meta:
            found.said(_meta_json(meta[META_KEY], source), source)
        for name in handle.keys():  # noqa: SIM118 (safe_open has no __iter__)
            found.add(name, handle.get_tensor(name), source)


def _table_columns(table: Any, source: Path, found: Found) -> None:
    """Arrow columns to arrays: lists of numbers become [N, D] (lists of lists [N, V, D])."""
    import pyarrow as pa
    import pyarrow.compute  # pa.compute, used by arrow_column

    for name in table.column_names:
        found.add(name, arrow_column(table.column(name).combine_chunks(), name, source, pa), source)
    meta = (table.schema.metadata or {}).get(META_KEY.encode())
    if meta is not None:
        found.said(_meta_json(meta, source), source)


def _is_list(kind: Any, pa: Any) -> bool:
    return bool(pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind))


def arrow_column(column: Any, name: str, source: Path, pa: Any) -> np.ndarray:
    """One Arrow column as an array: rows of equal length lists stacked, nested lists twice."""
    if not _is_list(column.type, pa):
        if column.null_count:
            raise UserError(
                f"column {name!r} of {printable(source)} has {column.null_count} empty (null) rows"
            )
        if pa.types.is_dictionary(column.type):
            column = column.cast(column.type.value_type)
        return np.asarray(column.to_numpy(zero_copy_only=False))
    if column.null_count:
        return _with_nulls(column, name, source, pa)
    lengths = np.asarray(pa.compute.list_value_length(column))
    if lengths.size and (lengths != lengths[0]).any():
        raise UserError(
            f"column {name!r} of {printable(source)} has rows of different lengths ({int(lengths.min())} "
            f"to {int(lengths.max())}): each row must hold the same number of values"
        )
    inner = arrow_column(pa.compute.list_flatten(column), name, source, pa)
    return inner.reshape(len(column), int(lengths[0]) if lengths.size else 0, *inner.shape[1:])


def _with_nulls(column: Any, name: str, source: Path, pa: Any) -> np.ndarray:
    """A list column with null rows (views of test rows, as `tosca export` writes them): the nulls
    become NaN rows of the others' shape, which only rows whose values are read may not hold."""
    valid = np.asarray(column.is_valid())
    present = arrow_column(column.filter(pa.array(valid)), name, source, pa)
    out = np.full(
        (len(column), *present.shape[1:]),
        np.nan,
        dtype=present.dtype if present.dtype.kind == "f" else np.float64,
    )
    out[valid] = present
    return out


def _read_parquet(source: Path, found: Found) -> None:
    import pyarrow.parquet as pq

    _table_columns(pq.read_table(source), source, found)


def _read_arrow(source: Path, found: Found) -> None:
    _table_columns(_arrow_table(source), source, found)


def _arrow_table(source: Path) -> Any:
    import pyarrow as pa

    try:
        with pa.memory_map(str(source)) as handle:
            return pa.ipc.open_file(handle).read_all()
    except pa.ArrowInvalid:
        with pa.memory_map(str(source)) as handle:
            return pa.ipc.open_stream(handle).read_all()


def _read_datasets(source: Path, found: Found) -> None:
    """A `datasets` folder saved with save_to_disk: one Dataset (state.json: its arrow files), or a
    DatasetDict (dataset_dict.json) whose train and test become the split column."""
    from tosca_foundation.files import read_json

    if (source / "dataset_dict.json").is_file():
        splits = read_json(source / "dataset_dict.json", "datasets index", "").get("splits")
        if not isinstance(splits, list) or not set(SPLIT_FOLDERS) <= set(splits):
            raise UserError(
                f"source {printable(source)} is a DatasetDict of splits {splits}: tosca needs its train and test"
            )
        parts = [_dataset_table(source / split) for split in SPLIT_FOLDERS]
        import pyarrow as pa

        tables = [t for t, _ in parts]
        if "split" in tables[0].column_names:
            raise UserError(
                f"source {printable(source)} has train and test folders and a split column: give one"
            )
        table = pa.concat_tables(
            [
                t.append_column("split", pa.array([s] * len(t)))
                for t, s in zip(tables, SPLIT_FOLDERS, strict=True)
            ]
        )
        info = parts[0][1]
    else:
        table, info = _dataset_table(source)
    _table_columns(table, source, found)
    names = _class_label_names(info)
    if names is not None and "class_names" not in found.meta:
        found.meta["class_names"] = names
    description = info.get("description") if isinstance(info, dict) else None
    if isinstance(description, str) and description.startswith("{"):
        meta = _meta_json(description, source)
        if isinstance(meta, dict) and isinstance(meta.get(META_KEY), dict):
            found.said(meta[META_KEY], source)


def _dataset_table(folder: Path) -> tuple[Any, dict[str, Any]]:
    import pyarrow as pa

    from tosca_foundation.files import read_json

    state = read_json(folder / "state.json", "datasets state", "save the dataset with save_to_disk")
    files = state.get("_data_files")
    if not isinstance(files, list) or not files:
        raise UserError(f"{printable(folder)}/state.json lists no data files")
    tables = []
    for entry in files:
        name = entry.get("filename") if isinstance(entry, dict) else None
        if not isinstance(name, str) or "/" in name or name.startswith("."):
            raise UserError(
                f"{printable(folder)}/state.json names a data file {printable(name)!r} outside its folder"
            )
        path = folder / name
        if source_format(path) != "arrow":
            raise UserError(f"{printable(path)} is not an arrow file")
        tables.append(_arrow_table(path))
    info_file = folder / "dataset_info.json"
    info = read_json(info_file, "datasets info", "") if info_file.is_file() else {}
    return pa.concat_tables(tables), info


def _class_label_names(info: dict[str, Any]) -> list[str] | None:
    """The names of the one ClassLabel feature of a `datasets` folder (its label column's classes)."""
    features = info.get("features") if isinstance(info, dict) else None
    if not isinstance(features, dict):
        return None
    labels = [f for f in features.values() if isinstance(f, dict) and f.get("_type") == "ClassLabel"]
    if len(labels) != 1 or not isinstance(labels[0].get("names"), list):
        return None
    return [str(n) for n in labels[0]["names"]]


def _read_hdf5(source: Path, found: Found) -> None:
    """An HDF5 file (h5py, the `hdf5` extra): every dataset a column named by its path in the file
    (`features`, or `feats/train` inside a group), strings decoded as UTF-8; the root's `tosca`
    attribute (JSON) says what the file is, a `class_names` dataset names the classes. What lies
    outside the file is refused, never followed: an external or soft link, a virtual dataset, a
    dataset stored in external files (any of these could read another file, a fifo, a device)."""
    try:
        import h5py
    except ImportError:
        raise UserError("reading HDF5 needs h5py: pip install 'tosca[hdf5]'") from None

    with h5py.File(source, "r") as handle:
        meta = handle.attrs.get(META_KEY)
        if meta is not None:
            found.said(_meta_json(meta if isinstance(meta, (str, bytes)) else str(meta), source), source)
        for name, link in _hdf5_links(handle, h5py):
            if not isinstance(link, h5py.HardLink):
                kind = "an external link" if isinstance(link, h5py.ExternalLink) else "a soft link"
                raise UserError(
                    f"source {printable(source)} holds {kind} at {name!r}: tosca reads what is inside the file only"
                )
            item = handle[name]
            if not isinstance(item, h5py.Dataset):
                continue
            if item.is_virtual or item.external:
                raise UserError(
                    f"source {printable(source)} stores {name!r} outside the file (a virtual or external "
                    "dataset): tosca reads what is inside the file only"
                )
            _fits(name, item.size * item.dtype.itemsize, source)  # a declared, unwritten array costs no disk
            values = item.asstr()[()] if h5py.check_string_dtype(item.dtype) else item[()]
            if name == "class_names":
                found.meta["class_names"] = [str(v) for v in np.atleast_1d(values).tolist()]
            else:
                found.add(name, np.asarray(values), source)


def _fits(name: str, size: int, source: Path) -> None:
    """One line where an array would not fit in the memory available now (an HDF5 dataset can
    declare terabytes in a file of kilobytes: its chunks are never written)."""
    if size > available_memory():
        raise UserError(
            f"source {printable(source)}: {name!r} holds {human_bytes(size)}, more than the "
            f"{human_bytes(available_memory())} of memory available (tosca import reads each array whole)"
        )


def _hdf5_links(handle: Any, h5py: Any) -> list[tuple[str, Any]]:
    """Every link in the file by its path, without following any (a group reached by a hard link
    only; a file whose groups link in a circle visits each once)."""
    out: list[tuple[str, Any]] = []
    seen: set[Any] = set()
    todo = [("", handle)]
    while todo:
        prefix, group = todo.pop()
        if group.id in seen:
            continue
        seen.add(group.id)
        for key in group:
            link = group.get(key, getlink=True)
            name = f"{prefix}{key}"
            out.append((name, link))
            if isinstance(link, h5py.HardLink) and isinstance(group[key], h5py.Group):
                todo.append((name + "/", group[key]))
    return sorted(out, key=lambda pair: pair[0])


READERS = {
    "npz": _read_npz,
    "npy": _read_npy,
    "safetensors": _read_safetensors,
    "parquet": _read_parquet,
    "arrow": _read_arrow,
    "datasets": _read_datasets,
    "hdf5": _read_hdf5,
}
