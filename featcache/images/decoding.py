"""Decoders: who turns a sample's file into pixels, and on which device (a registry).

- `pil`, the reference: PIL opens the file and converts it to RGB, PIL resizes and crops; in
  the DataLoader workers.
- `torch`: torchvision.io decodes 8-bit RGB and grey JPEG and PNG into uint8 tensors (every
  other file, 16-bit, alpha, palette, CMYK or another format, through PIL and the same colour
  rules as `pil`: `featcache.sources.pixels`), torchvision's tensor ops resize and crop. On CPU that runs in the DataLoader workers
  like `pil` (and costs about half as much CPU per image); on CUDA the workers only read the
  files' bytes and the extraction process decodes whole batches with nvjpeg and resizes them on
  the GPU (`DeviceImages`), so the host's cores do not bound the throughput.

Both draw view crops and flips from the same seeded generator (featcache.images.transforms), so they
differ only in pixel interpolation. The decoder is part of the preprocessing identity
(`Preprocessing.decoder`), so a store never mixes them.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torchvision.io import ImageReadMode, decode_image, decode_jpeg

from featcache.images.decoder_names import DECODERS, Decoder
from featcache.images.transforms import Picture
from featcache.sources.datasets import SplitSamples
from featcache.sources.pixels import check_pixels, needs_rules, open_file, to_rgb8
from featcache.store.meanings import DECODERS as DESCRIPTIONS

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


def read_bytes(path: Path) -> torch.Tensor:
    """A file's bytes as a 1-D uint8 tensor (what torchvision's decoders take); a regular file's only
    (`featcache.sources.pixels.open_file`)."""
    with open_file(path) as fh:
        return torch.frombuffer(bytearray(fh.read()), dtype=torch.uint8)


def _is_jpeg(data: torch.Tensor) -> bool:
    return bytes(data[:3].tolist()) == JPEG_MAGIC


def _from_pil(img: Image.Image) -> torch.Tensor:
    return torch.from_numpy(np.array(to_rgb8(img), dtype=np.uint8)).permute(2, 0, 1).contiguous()


def _array_pixels(samples: SplitSamples, i: int) -> torch.Tensor:
    assert samples.arrays is not None
    return torch.from_numpy(np.ascontiguousarray(samples.arrays[i])).permute(2, 0, 1).contiguous()


def _plain(data: torch.Tensor, short_side: int | None) -> tuple[bool, Image.Image]:
    """(whether torchvision may decode these bytes as they are, the lazily opened image); refuses an
    image over the shared limits from its header, before anything is decoded."""
    raw = data.numpy().tobytes()
    img = Image.open(io.BytesIO(raw))
    check_pixels(*img.size, short_side)
    return not needs_rules(img, raw[:32]), img


def open_tensor(samples: SplitSamples, i: int, short_side: int | None = None) -> torch.Tensor:
    """uint8 [3, H, W]: 8-bit RGB or grey JPEG and PNG through torchvision.io, every other file
    through PIL and the colour rules of `featcache.sources.pixels`."""
    if samples.arrays is not None:
        return _array_pixels(samples, i)
    assert samples.root is not None
    data = read_bytes(samples.root / samples.ids[i])
    plain, img = _plain(data, short_side)
    with img:
        if plain:
            return decode_image(data, mode=ImageReadMode.RGB)
        return _from_pil(img)


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
        plain, img = _plain(data, short_side)
        with img:
            if plain and _is_jpeg(data):
                return Encoded("jpeg", data)
            if plain:
                return Encoded("pixels", decode_image(data, mode=ImageReadMode.RGB))
            return Encoded("pixels", _from_pil(img))
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
        return decode_image(data, mode=ImageReadMode.RGB).to(device)
    except RuntimeError as exc:
        raise DecodeError(position, f"{type(exc).__name__}: {str(exc).splitlines()[0]}") from exc


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
