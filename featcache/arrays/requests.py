"""What a user can ask of `tosca import` and `tosca export`: their flags as values (plain data; the
command line builds its options from these fields, `featcache.arrays.importer` and `.exporter`
check and run them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tosca_foundation.names import Spell, as_flag
from tosca_foundation.options import option


@dataclass(frozen=True)
class ImportRequest:
    """Everything a user can ask of `tosca import`."""

    sources: tuple[Path, ...] = option(
        help="Files holding the arrays (.npz, .npy, .safetensors, .parquet, .arrow/.feather, .h5) or a "
        "`datasets` folder saved with save_to_disk; .npy files are named by their stem (features.npy).",
        argument=True,
    )
    store: Path = option(
        help="The store to write (a new folder, or this import's own to resume; or a URL on object "
        "storage, s3://bucket/name.zarr).",
        output=True,
    )
    encoder: str | None = option(
        None,
        "The encoder that computed the features, in your words (e.g. all-MiniLM-L6-v2); recorded, "
        "never run (default: what the file records).",
    )
    modality: str | None = option(
        None, "What the features describe: image, text, audio, ... (default: the file's)."
    )
    name: str | None = option(
        None, "The dataset's name (letters, digits, . _ + -; default: the file's, else the store's)."
    )
    features: str = option("features", "Column or array holding the features [N, D].")
    labels: str = option("labels", "Column or array holding each row's class index [N].")
    split: str = option("split", "Column or array saying each row's split: train/test (or 0/1); optional.")
    ids: str = option("ids", "Column or array naming each row (optional; default: its row number).")
    views: str = option("views", "Column or array of augmented views [N, V, D] (optional).")
    class_names: Path | None = option(
        None, "Text file with one class name per line (default: the file's class names, else the indices)."
    )
    test_fraction: float | None = option(
        None, "Without a split column: this share of each class goes to test (seeded, stratified)."
    )
    split_seed: int = option(0, "Seed of --test-fraction's split.")
    dtype: str = option("float32", "float32 or float16 (halves the store).")
    chunk_size: int = option(512, "Rows per store chunk.")
    overwrite: bool = option(False, "Replace an existing store made from other arrays.", ("--overwrite",))
    spell: Spell = field(default=as_flag, compare=False, repr=False)


@dataclass(frozen=True)
class ExportRequest:
    """Everything a user can ask of `tosca export`."""

    store: Path = option(help="The store to export.", argument=True)
    to: Path = option(help="Where to write: a .npz or .parquet file, or a folder (--format datasets).")
    format: str | None = option(None, "npz, parquet or datasets (default: by the suffix of --to).")
    overwrite: bool = option(False, "Replace a file or folder that --to names.", ("--overwrite",))
    spell: Spell = field(default=as_flag, compare=False, repr=False)
