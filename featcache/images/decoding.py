"""Decoders: who turns a sample's file into pixels, and on which device (a registry).

- `pil`, the reference: PIL opens the file and converts it to RGB, PIL resizes and crops; in
  the DataLoader workers.
- `torch`: torchvision.io decodes 8-bit RGB and grey JPEGs into uint8 tensors; every other file
  (PNG, 16-bit, alpha, palette, CMYK or another format) goes through PIL and the same colour rules
  as `pil` (`featcache.sources.pixels`); torchvision's tensor ops resize and crop. On CPU that runs
  in the DataLoader workers like `pil` (and costs about half as much CPU per image); on CUDA the
  workers only read the files' bytes and the extraction process decodes whole batches with nvjpeg
  and resizes them on the GPU (`DeviceImages`), so the host's cores do not bound the throughput.

Why PNGs never reach torchvision: its `decode_png` (0.29) dies of a segmentation fault, taking the
process and its store lock with it, on any error libpng meets while reading the pixel rows (an
IDAT chunk whose CRC is broken, a damaged zlib stream, too little image data, a bad filter byte),
so one damaged PNG in a folder killed an extraction. Checking for all of them first costs most of
a decode (the zlib stream must be inflated); Pillow's decoder raises instead, gives the same
pixels (PNG is lossless) and costs about what torchvision's does, so the two decoders also agree on
which PNGs are unreadable. torchvision's JPEG decoder raises on every damaged JPEG tried
(`tests/featcache/pipeline/test_hostile_images.py`).

Both draw view crops and flips from the same seeded generator (featcache.images.transforms), so they
differ only in pixel interpolation. The decoder is part of the preprocessing identity
(`Preprocessing.decoder`), so a store never mixes them.
"""

from __future__ import annotations

import io
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torchvision.io import ImageReadMode, decode_jpeg

from featcache.images.decoder_names import DECODERS, Decoder
from featcache.images.transforms import Picture
from featcache.sources.datasets import SplitSamples
from featcache.sources.pixels import check_pixels, needs_rules, open_file, to_rgb8
from featcache.store.meanings import DECODERS as DESCRIPTIONS
from tosca_foundation.text import reason

# torchvision 0.29 deprecates its decoders in favour of TorchCodec; they still work, and the
# warning would otherwise repeat in every worker.
warnings.filterwarnings(
    "ignore",
    message="The image decoding and encoding capabilities of TorchVision",
    category=DeprecationWarning,
)

JPEG_MAGIC = b"\xff\xd8\xff"


def resolve_decoder(name: str, device: torch.device, existing: str | None = None) -> str:
    """`auto` keeps an existing store's decoder, else `torch` on CUDA and `pil` (the reference) on CPU."""
    if name == "auto":
        if existing is not None:
            return existing
        return "torch" if device.type == "cuda" else "pil"
    return DECODERS.pick(name, also=("auto",))


def open_picture(samples: SplitSamples, i: int, decoder: str, short_side: int | None = None) -> Picture:
    """Sample i decoded the way `decoder` does it, on the CPU (PIL image or uint8 [3, H, W]); refused
    from its header (`featcache.sources.pixels.check_pixels`) when over the pixel limit or, given
    `short_side`, too thin to resize to it."""
    return DECODERS[decoder].open(samples, i, short_side)


# ---------------------------------------------------------------- the torch decoder, on CPU


class DamagedJpeg(ValueError):
    """A JPEG that torchvision's decoder gave up on, in its words without its source location."""


# torchvision's errors start with where they were raised: "decode_jpeg, /__w/.../decode_jpeg.cpp:171, "
_WHERE = re.compile(r"^\w+, \S+:\d+, ")


def decode_jpeg_here(data: torch.Tensor) -> torch.Tensor:
    """uint8 [3, H, W] of an 8-bit JPEG's bytes, on the CPU; a damaged one raises `DamagedJpeg`
    saying what libjpeg found ("Image is incomplete or truncated")."""
    try:
        return decode_jpeg(data, mode=ImageReadMode.RGB)
    except RuntimeError as exc:
        raise DamagedJpeg(_WHERE.sub("", (str(exc).splitlines() or [""])[0])) from None


def read_bytes(path: Path) -> torch.Tensor:
    """A file's bytes as a 1-D uint8 tensor (what torchvision's decoders take); a regular file's only
    (`featcache.sources.pixels.open_file`), and not an empty one."""
    with open_file(path) as fh:
        raw = fh.read()
    if not raw:
        raise ValueError("empty file (0 bytes)")
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8)


def _is_jpeg(data: torch.Tensor) -> bool:
    return bytes(data[:3].tolist()) == JPEG_MAGIC


def _from_pil(img: Image.Image) -> torch.Tensor:
    """uint8 [3, H, W] of an image through the colour rules (numpy's transposing copy: half what
    torch's `permute().contiguous()` takes on uint8, and every PNG goes through here)."""
    return torch.from_numpy(np.ascontiguousarray(np.asarray(to_rgb8(img), dtype=np.uint8).transpose(2, 0, 1)))


def _array_pixels(samples: SplitSamples, i: int) -> torch.Tensor:
    assert samples.arrays is not None
    return torch.from_numpy(np.ascontiguousarray(samples.arrays[i])).permute(2, 0, 1).contiguous()


def _plain_jpeg(data: torch.Tensor, short_side: int | None) -> tuple[bool, Image.Image]:
    """(whether torchvision may decode these bytes: an 8-bit RGB or grey JPEG, the lazily opened
    image); refuses an image over the shared limits from its header, before anything is decoded.
    Never a PNG: see the module docstring."""
    raw = data.numpy().tobytes()
    img = Image.open(io.BytesIO(raw))
    check_pixels(*img.size, short_side)
    return _is_jpeg(data) and not needs_rules(img, raw[:32]), img


def open_tensor(samples: SplitSamples, i: int, short_side: int | None = None) -> torch.Tensor:
    """uint8 [3, H, W]: 8-bit RGB or grey JPEGs through torchvision.io, every other file through
    PIL and the colour rules of `featcache.sources.pixels`."""
    if samples.arrays is not None:
        return _array_pixels(samples, i)
    assert samples.root is not None
    data = read_bytes(samples.root / samples.ids[i])
    jpeg, img = _plain_jpeg(data, short_side)
    with img:
        return decode_jpeg_here(data) if jpeg else _from_pil(img)


PIL = Decoder(
    "pil",
    DESCRIPTIONS["pil"],
    lambda samples, i, short_side: samples.open_image(i, short_side),
    decodes_on_device=False,
)
TORCH = Decoder("torch", DESCRIPTIONS["torch"], open_tensor, decodes_on_device=True)


# ---------------------------------------------------------------- the torch decoder, batches on a device


@dataclass
class Encoded:
    """What a worker hands to the device stage: JPEG bytes (decoded there) or ready uint8 pixels."""

    kind: str  # "jpeg" | "pixels"
    data: torch.Tensor

    def pin_memory(self) -> Encoded:
        return Encoded(self.kind, self.data.pin_memory())


def read_encoded(samples: SplitSamples, i: int, short_side: int | None = None) -> Encoded:
    """8-bit RGB or grey JPEG files travel as bytes; anything else is decoded here, on the
    worker's CPU, by the same rules as `open_tensor` (the same checks of the header first)."""
    if samples.arrays is None:
        assert samples.root is not None
        data = read_bytes(samples.root / samples.ids[i])
        jpeg, img = _plain_jpeg(data, short_side)
        with img:
            return Encoded("jpeg", data) if jpeg else Encoded("pixels", _from_pil(img))
    return Encoded("pixels", open_tensor(samples, i))


class DecodeError(Exception):
    def __init__(self, position: int, reason: str):
        super().__init__(reason)
        self.position, self.reason = position, reason


def _decode_jpeg_alone(data: torch.Tensor, device: torch.device, position: int) -> torch.Tensor:
    """One JPEG on `device`; one that nvjpeg rejects is decoded on the CPU instead (the same file
    always takes the same road, so a store stays reproducible)."""
    try:
        return decode_jpeg(data, mode=ImageReadMode.RGB, device=device)
    except RuntimeError:
        pass
    try:
        return decode_jpeg_here(data).to(device)
    except DamagedJpeg as exc:
        raise DecodeError(position, reason(exc)) from exc


def decode_on_device(items: list[Encoded], device: torch.device) -> list[torch.Tensor]:
    """uint8 [3, H, W] tensors on `device`: all JPEGs in one batched call (nvjpeg on CUDA)."""
    out: list[torch.Tensor | None] = [None] * len(items)
    jpegs = [j for j, item in enumerate(items) if item.kind == "jpeg"]
    if jpegs:
        try:
            decoded = decode_jpeg([items[j].data for j in jpegs], mode=ImageReadMode.RGB, device=device)
        except RuntimeError:  # no partial results: find the culprit one by one
            decoded = [_decode_jpeg_alone(items[j].data, device, j) for j in jpegs]
        for j, image in zip(jpegs, decoded, strict=True):
            out[j] = image
    for j, item in enumerate(items):
        if item.kind == "pixels":
            out[j] = item.data.to(device, non_blocking=True)
    return out  # type: ignore[return-value]
