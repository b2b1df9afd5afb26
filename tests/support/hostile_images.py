"""Damaged and crafted image files, built in a few milliseconds: the PNGs whose damage libpng finds
while reading the pixel rows (which killed torchvision's `decode_png` with SIGSEGV), headers that
lie, truncations at several offsets, damaged JPEG entropy data and markers (issue 47, point 2)."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
from PIL import Image

SIDE = 48
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def pixels(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (SIDE, SIDE, 3), dtype=np.uint8)


def encoded(kind: str, seed: int = 0, **options: object) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels(seed)).save(buffer, kind, **options)
    return buffer.getvalue()


def png_chunk(kind: bytes, body: bytes) -> bytes:
    """One PNG chunk with its CRC right."""
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def crafted_png(width: int, height: int, rows: bytes) -> bytes:
    """An 8-bit RGB PNG whose chunks all have the right CRC, holding `rows` (filter bytes
    included) as its zlib stream, whatever IHDR says."""
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        PNG_SIGNATURE
        + png_chunk(b"IHDR", header)
        + png_chunk(b"IDAT", zlib.compress(rows))
        + png_chunk(b"IEND", b"")
    )


def _chunk_at(data: bytes, kind: bytes) -> tuple[int, int]:
    """(offset, body length) of the first chunk of that kind."""
    at = data.index(kind) - 4
    return at, struct.unpack(">I", data[at : at + 4])[0]


def _flipped(data: bytes, at: int) -> bytes:
    out = bytearray(data)
    out[at] ^= 0xFF
    return bytes(out)


def _crc_broken(data: bytes, kind: bytes) -> bytes:
    at, length = _chunk_at(data, kind)
    return _flipped(data, at + 8 + length)


def _idat_damaged(crc_right: bool) -> bytes:
    png = encoded("PNG")
    at, length = _chunk_at(png, b"IDAT")
    body = _flipped(png[at + 8 : at + 8 + length], length // 2)
    if not crc_right:
        return png[: at + 8] + body + png[at + 8 + length :]
    return png[:at] + png_chunk(b"IDAT", body) + png[at + 12 + length :]


def _rows(filter_byte: int = 0) -> bytes:
    """SIDE rows of black RGB pixels, each after its filter byte."""
    return b"".join(bytes([filter_byte]) + bytes(SIDE * 3) for _ in range(SIDE))


def _jpeg_garbled(progressive: bool) -> bytes:
    """Random bytes written over the entropy-coded data after the first scan's header."""
    jpeg = bytearray(encoded("JPEG", progressive=progressive, quality=90))
    start = jpeg.index(b"\xff\xda") + 20
    rng = np.random.default_rng(1)
    for at in rng.integers(start, len(jpeg) - 2, 50):
        jpeg[int(at)] = int(rng.integers(0, 256))
    return bytes(jpeg)


def _jpeg_marker_changed(marker: bytes, offset: int, new: bytes) -> bytes:
    jpeg = bytearray(encoded("JPEG"))
    at = jpeg.index(marker) + offset
    jpeg[at : at + len(new)] = new
    return bytes(jpeg)


def _gif() -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels()).save(buffer, "GIF")
    return buffer.getvalue()


def hostile_files() -> dict[str, tuple[str, bytes]]:
    """name -> (file name, bytes). The names of `READABLE` decode (both decoders, the same pixels as
    the intact file where there is one); every other one is unreadable."""
    png, jpeg = encoded("PNG"), encoded("JPEG")
    cases = {
        # libpng finds these while reading rows: torchvision's decode_png died of SIGSEGV
        "PNG, IDAT damaged (its CRC broken)": ("idat.png", _idat_damaged(crc_right=False)),
        "PNG, zlib stream damaged, CRC right": ("zlib.png", _idat_damaged(crc_right=True)),
        "PNG, too little image data": ("short.png", crafted_png(SIDE, SIDE, _rows()[:1000])),
        "PNG, bad filter byte": ("filter.png", crafted_png(SIDE, SIDE, _rows(filter_byte=9))),
        "PNG, 9000 x 9000 header, 48 rows": ("bomb.png", crafted_png(9000, 9000, _rows())),
        # found from the header or while reading chunks
        "PNG, IHDR CRC broken": ("ihdr.png", _crc_broken(png, b"IHDR")),
        "PNG, 100000 x 100000 header": ("huge.png", crafted_png(100_000, 100_000, _rows())),
        "PNG, 0 pixels wide": ("zero-width.png", crafted_png(0, SIDE, _rows())),
        "PNG, signature only": ("signature.png", png[:8]),
        "PNG, cut inside IHDR": ("cut-ihdr.png", png[:20]),
        "PNG, cut inside IDAT": ("cut-idat.png", png[: len(png) // 2]),
        "JPEG, cut in half": ("half.jpg", jpeg[: len(jpeg) // 2]),
        "JPEG, cut after the header": ("header-only.jpg", jpeg[: jpeg.index(b"\xff\xda") + 14]),
        "JPEG, progressive, entropy data garbled": ("garbled.jpg", _jpeg_garbled(progressive=True)),
        "JPEG, Huffman table damaged": ("dht.jpg", _jpeg_marker_changed(b"\xff\xc4", 5, b"\xff" * 16)),
        "JPEG, 65535 x 65535 header": ("sof.jpg", _jpeg_marker_changed(b"\xff\xc0", 5, b"\xff" * 4)),
        "JPEG, 7 components": ("components.jpg", _jpeg_marker_changed(b"\xff\xc0", 9, b"\x07")),
        "JPEG, no scan": ("no-scan.jpg", jpeg[: jpeg.index(b"\xff\xda")] + b"\xff\xd9"),
        "text named .jpg": ("notes.jpg", b"these are notes, not a JPEG\n"),
        "zero bytes": ("empty.png", b""),
        # readable, as Pillow (the reference) reads them
        "PNG, IDAT CRC broken, data intact": ("idat-crc.png", _crc_broken(png, b"IDAT")),
        "PNG, IEND CRC broken": ("iend-crc.png", _crc_broken(png, b"IEND")),
        "PNG, no IEND": ("no-iend.png", png[: _chunk_at(png, b"IEND")[0]]),
        "JPEG, baseline, entropy data garbled": ("noisy.jpg", _jpeg_garbled(progressive=False)),
        "GIF named .png": ("gif.png", _gif()),
    }
    return cases


READABLE = (
    "PNG, IDAT CRC broken, data intact",
    "PNG, IEND CRC broken",
    "PNG, no IEND",
    "JPEG, baseline, entropy data garbled",
    "GIF named .png",
)
# The ones that killed the process under `--decode torch` before (issue 47, point 2).
KILLED_TORCHVISION = (
    "PNG, IDAT damaged (its CRC broken)",
    "PNG, zlib stream damaged, CRC right",
    "PNG, too little image data",
    "PNG, bad filter byte",
    "PNG, 9000 x 9000 header, 48 rows",
)
