"""Which format a source is, told by its suffix and checked against its first bytes, before a
reader touches it: a file that is not what its suffix says, a fifo, a device or a folder where a
file is named is one line, never a reader's traceback (or a read that waits for ever)."""

from __future__ import annotations

from pathlib import Path

from tosca_foundation.errors import UserError
from tosca_foundation.files import read_head
from tosca_foundation.text import printable

# suffix -> format; a folder is a `datasets` folder saved with save_to_disk
SUFFIXES = {
    ".npz": "npz",
    ".npy": "npy",
    ".safetensors": "safetensors",
    ".parquet": "parquet",
    ".arrow": "arrow",
    ".feather": "arrow",
    ".ipc": "arrow",
    ".h5": "hdf5",
    ".hdf5": "hdf5",
}
DATASETS_MARKERS = ("state.json", "dataset_dict.json")
_HEAD = 16
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"  # at the file's start (h5py writes no user block)


def _head(path: Path) -> tuple[bytes, int]:
    """The first bytes of a regular file and its size; anything else is one line."""
    return read_head(path, "source", _HEAD, "name a file or a `datasets` folder")


def _tail(path: Path, size: int) -> bytes:
    with open(path, "rb") as handle:
        handle.seek(max(0, size - 4))
        return handle.read(4)


def source_format(path: Path) -> str:
    """The format of one source (npz, npy, safetensors, parquet, arrow, hdf5, datasets), its bytes
    checked against its suffix."""
    shown = printable(path)
    if path.is_dir():
        if not any((path / marker).is_file() for marker in DATASETS_MARKERS):
            raise UserError(
                f"source {shown} is a folder but not a `datasets` folder saved with save_to_disk (no "
                f"{' or '.join(DATASETS_MARKERS)} in it)"
            )
        return "datasets"
    kind = SUFFIXES.get(path.suffix.lower())
    if kind is None:
        if not path.exists() and not path.is_symlink():
            raise UserError(f"source {shown} is missing")
        raise UserError(
            f"source {shown} has the suffix {path.suffix or '(none)'!r}: tosca reads "
            f"{', '.join(SUFFIXES)} files and `datasets` folders"
        )
    head, size = _head(path)
    if not _looks_like(kind, head, size, path):
        raise UserError(
            f"source {shown} is not a {path.suffix} file (its first bytes are not a {kind} file's)"
        )
    return kind


def _looks_like(kind: str, head: bytes, size: int, path: Path) -> bool:
    if kind == "npz":
        return head[:4] in (b"PK\x03\x04", b"PK\x05\x06")
    if kind == "npy":
        return head[:6] == b"\x93NUMPY"
    if kind == "safetensors":
        header = int.from_bytes(head[:8], "little") if len(head) >= 8 else 0
        return len(head) >= 9 and 2 <= header <= size - 8 and head[8:9] == b"{"
    if kind == "hdf5":
        return head[:8] == HDF5_SIGNATURE
    if kind == "parquet":
        return size >= 12 and head[:4] == b"PAR1" and _tail(path, size) == b"PAR1"
    return head[:6] == b"ARROW1" or head[:4] == b"\xff\xff\xff\xff"  # arrow: file or stream format
