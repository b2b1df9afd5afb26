"""safetensors files read with their header checked before any tensor is.

A safetensors file is an 8-byte header length, a JSON header (each tensor's dtype, shape and byte
range; `__metadata__`), then the bytes. Loading one whole trusts all of it: a task file with an
extra 8 GiB tensor would be read into memory before any key is looked at. `read_safetensors`
reads the header alone first, bounded (its length capped, its JSON through the bounded parser),
checks that it describes the file exactly (every range inside the data, no gaps or overlaps,
sizes that match dtype and shape, the file's size), lets the caller check the names, dtypes and
shapes it expects, and only then reads the tensors, from the same open file.

Import-light: torch and safetensors are imported when tensors are read.
"""

from __future__ import annotations

import math
import os
import stat
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tosca_foundation.errors import UserError
from tosca_foundation.files import parse_json
from tosca_foundation.units import human_bytes

HEADER_LIMIT = 16 << 20  # bytes of JSON header: a few hundred tensors take tens of KiB
DTYPE_BYTES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}


class TensorFileError(UserError):
    """A safetensors file that is not whole, not one, or not what its reader expects."""


@dataclass(frozen=True)
class TensorInfo:
    dtype: str
    shape: tuple[int, ...]
    nbytes: int


@dataclass(frozen=True)
class Header:
    """What a safetensors header says: the tensors by name, and the metadata (text to text)."""

    tensors: dict[str, TensorInfo]
    metadata: dict[str, str]


def _parse_header(raw: bytes, data_bytes: int) -> Header:
    """The header, checked to describe `data_bytes` bytes of tensors exactly."""
    try:
        decoded = parse_json(raw.rstrip(b" "), "its header")
    except UserError as exc:
        raise TensorFileError(str(exc)) from None
    if not isinstance(decoded, dict):
        raise TensorFileError("its header is not a JSON object")
    metadata = decoded.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise TensorFileError("its metadata is not text to text")
    tensors, ranges = {}, []
    for name, entry in decoded.items():
        dtype = entry.get("dtype") if isinstance(entry, dict) else None
        shape = entry.get("shape") if isinstance(entry, dict) else None
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if (
            dtype not in DTYPE_BYTES
            or not isinstance(shape, list)
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
            or not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
        ):
            raise TensorFileError(f"its header describes {name[:60]!r} in a way safetensors does not")
        nbytes = math.prod(shape) * DTYPE_BYTES[dtype]
        start, end = offsets
        if not 0 <= start <= end <= data_bytes or end - start != nbytes:
            raise TensorFileError(
                f"its header puts {name[:60]!r} ({dtype} {shape}) at bytes {start}..{end} of {data_bytes}"
            )
        tensors[name] = TensorInfo(dtype, tuple(shape), nbytes)
        ranges.append((start, end))
    covered = 0
    for start, end in sorted(ranges):
        if start != covered:
            raise TensorFileError("its header leaves gaps between tensors or overlaps them")
        covered = end
    if covered != data_bytes:
        raise TensorFileError(
            f"its tensors take {covered} bytes but the file holds {data_bytes} after its header"
        )
    return Header(tensors, metadata)


def _open(path: Path) -> tuple[int, int]:
    """(descriptor, size) of a regular file, opened without blocking."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise TensorFileError("it is missing") from None
    except OSError as exc:
        raise TensorFileError(f"it cannot be read: {exc.strerror or type(exc).__name__}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise TensorFileError("it is not a regular file")
    return fd, info.st_size


def _header(fh: Any, size: int, header_limit: int) -> tuple[bytes, bytes, Header]:
    """(the length field, the raw header, the header checked) from a file at its start."""
    head = fh.read(8)
    if len(head) < 8:
        raise TensorFileError("it is not a safetensors file (shorter than a header)")
    (length,) = struct.unpack("<Q", head)
    if length > size - 8:
        raise TensorFileError(
            f"it is not a safetensors file (its first bytes claim a header of {human_bytes(length)} in a "
            f"file of {human_bytes(size)})"
        )
    if length > header_limit:
        raise TensorFileError(
            f"its header would take {human_bytes(length)}, more than the {human_bytes(header_limit)} one can"
        )
    raw = fh.read(length)
    if len(raw) != length:
        raise TensorFileError("it ends inside its header")
    return head, raw, _parse_header(raw, size - 8 - length)


def read_header(path: str | Path, header_limit: int = HEADER_LIMIT) -> Header:
    """A safetensors file's header alone, bounded and checked to describe the file exactly."""
    fd, size = _open(Path(path))
    try:
        with os.fdopen(os.dup(fd), "rb", buffering=0) as fh:
            return _header(fh, size, header_limit)[2]
    except OSError as exc:
        raise TensorFileError(f"it cannot be read: {exc.strerror or type(exc).__name__}") from None
    finally:
        os.close(fd)


def read_safetensors(
    path: str | Path, check: Callable[[Header], None] | None = None, header_limit: int = HEADER_LIMIT
) -> tuple[dict[str, Any], dict[str, str]]:
    """(tensors, metadata) of a safetensors file, read only after its header held up: bounded,
    describing the file exactly, and accepted by `check` (which raises for names, dtypes or shapes
    its reader does not expect). A file that is not whole, not safetensors, not a regular file or
    not what `check` wants raises TensorFileError, one line saying why, before any tensor is read."""
    fd, size = _open(Path(path))
    try:
        with os.fdopen(os.dup(fd), "rb", buffering=0) as fh:
            head, raw, header = _header(fh, size, header_limit)
            if check is not None:
                check(header)
            wanted = size - 8 - len(raw)
            data = fh.read(wanted + 1)
        if len(data) != wanted:
            raise TensorFileError("it changed while it was read")
    except OSError as exc:
        raise TensorFileError(f"it cannot be read: {exc.strerror or type(exc).__name__}") from None
    finally:
        os.close(fd)
    from safetensors import SafetensorError
    from safetensors.torch import load

    try:
        tensors = load(head + raw + data)
    except (SafetensorError, ValueError) as exc:
        raise TensorFileError(f"{type(exc).__name__}: {' '.join(str(exc).split())[:80]}") from None
    return tensors, header.metadata


def expect(
    header: Header,
    shapes: dict[str, tuple[int | None, ...]],
    dtypes: dict[str, str] | str,
) -> None:
    """Raise TensorFileError unless `header` holds exactly the tensors `shapes` names, each of the
    dtype `dtypes` gives it (one for all, or by name) and of that shape (None: any length there)."""
    found, wanted = set(header.tensors), set(shapes)
    if found != wanted:
        extra, missing = sorted(found - wanted), sorted(wanted - found)
        said = f"an unexpected tensor {extra[0][:60]!r}" if extra else f"no tensor {missing[0]!r}"
        raise TensorFileError(f"it holds {said}")
    for name, shape in shapes.items():
        info = header.tensors[name]
        dtype = dtypes if isinstance(dtypes, str) else dtypes[name]
        if info.dtype != dtype:
            raise TensorFileError(f"{name} holds {info.dtype} values, not {dtype}")
        if len(info.shape) != len(shape) or any(
            w is not None and w != f for w, f in zip(shape, info.shape, strict=True)
        ):
            shown = [("*" if w is None else w) for w in shape]
            raise TensorFileError(f"{name} has shape {list(info.shape)}, not {shown}")
