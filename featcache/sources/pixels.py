"""Any image Pillow opens -> the 8-bit RGB a viewer shows, the same way under both decoders.

Rules (`to_rgb8`), by Pillow mode:
- RGB: as it is. L and 1 (black and white): grey on all three channels.
- I;16 (16-bit PNG and TIFF) and I (32-bit integer, read as 16-bit data): value / 257, rounded,
  clipped to 0..255; F (32-bit float): values in [0, 1], times 255, rounded, clipped.
- Transparency (LA, RGBA, PA, and P or L with a transparent colour): composited over white, as a
  viewer shows it on a white page.
- P without transparency, CMYK, YCbCr, LAB, HSV: Pillow's conversion to RGB.

The `pil` decoder applies these to every file; the `torch` decoder hands torchvision only the
files whose pixels need none of them (8-bit RGB or grey JPEG and PNG, no palette, no alpha, no
transparent colour) and sends every other file through these same rules, so the two differ only
in JPEG decoding and resizing, never in how a mode is read (Pillow's own `convert("RGB")` turns a
16-bit image white, and torchvision scaled it instead).

EXIF orientation is not applied, by either decoder: a photo a camera stored sideways is read
sideways, as torchvision's ImageFolder and timm's loaders read it (the features then match theirs).

One pixel limit for both decoders (`MAX_PIXELS`, checked from the file's header before it is
decoded): Pillow refuses images over twice its own limit while torchvision decodes anything. And
one limit on what resizing makes of an image (`MAX_RESIZED_PIXELS`): the evaluation transform
scales the short side to a fixed length, so a thin image (3 x 20,000 pixels, 478 bytes as a PNG)
would grow to 256 x 1,706,667 pixels, gigabytes, and 1 x 60,000,000 past what the resize can
count. Both are checked from the header (`check_pixels` with the short side the preprocessing
resizes to), and the resize limit again by the preprocessing itself before it resizes.
"""

from __future__ import annotations

import io
import os
import stat
from typing import BinaryIO

import numpy as np
from PIL import Image

MAX_PIXELS = 89_478_485  # Pillow's own warning threshold: a 0.25 GiB RGB image
# Every image tosca opens is checked against MAX_PIXELS from its header first (`check_pixels`), by
# both decoders; Pillow's own check (a warning above its limit, an error above twice it) would
# otherwise answer for the `pil` decoder alone, in its own words.
Image.MAX_IMAGE_PIXELS = None
SIXTEEN_BIT = ("I;16", "I;16L", "I;16B", "I;16N", "I")
WITH_ALPHA = ("LA", "La", "PA", "RGBA", "RGBa")


MAX_RESIZED_PIXELS = 1 << 24  # 16,777,216 (48 MiB of RGB): a 256-pixel short side, 1:256 at most


class ImageTooLarge(ValueError):
    """An image over the pixel limit shared by both decoders, or one that would resize over it."""


class NotAnImageFile(ValueError):
    """What is at an image's path is not a regular file any more."""


def check_pixels(width: int, height: int, short_side: int | None = None) -> None:
    """Refuse an image over MAX_PIXELS, or (given the short side it will be resized to) one that
    would resize over MAX_RESIZED_PIXELS (`check_resized`)."""
    if width * height > MAX_PIXELS:
        raise ImageTooLarge(
            f"{width} x {height} = {width * height:,} pixels, over the limit of {MAX_PIXELS:,} pixels "
            "that both decoders share"
        )
    if short_side is not None:
        check_resized(width, height, short_side)


def resized(width: int, height: int, short_side: int) -> tuple[int, int]:
    """(width, height) after scaling the short side to `short_side`, as torchvision computes it."""
    if width <= height:
        return short_side, int(short_side * height / width)
    return int(short_side * width / height), short_side


def check_resized(width: int, height: int, short_side: int) -> None:
    """Refuse an image that scaling its short side to `short_side` would make larger than
    MAX_RESIZED_PIXELS (a very thin one), before anything is resized."""
    new_width, new_height = resized(width, height, short_side)
    if new_width * new_height > MAX_RESIZED_PIXELS:
        ratio = max(width, height) / max(1, min(width, height))
        raise ImageTooLarge(
            f"{width:,} x {height:,} pixels, {ratio:,.0f} times longer than wide: scaling its short side to "
            f"{short_side} would make {new_width:,} x {new_height:,} = {new_width * new_height:,} pixels, over "
            f"the limit of {MAX_RESIZED_PIXELS:,} that both decoders share"
        )


def open_file(path: str | os.PathLike[str]) -> BinaryIO:
    """An image file opened for reading, refused (`NotAnImageFile`) when it is not a regular file:
    one listed as a file and replaced since by a fifo would block the reader for ever, a device
    would read for ever."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotAnImageFile("not a regular file (a fifo or a device; replaced since it was listed?)")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def open_checked(data: bytes, short_side: int | None = None) -> Image.Image:
    """An image's bytes, its size checked from the header (`check_pixels`), as 8-bit RGB (`to_rgb8`)."""
    img = Image.open(io.BytesIO(data))
    check_pixels(*img.size, short_side)
    return to_rgb8(img)


def _grey(values: np.ndarray) -> Image.Image:
    return Image.fromarray(np.clip(np.rint(values), 0, 255).astype(np.uint8)).convert("RGB")


def _over_white(rgba: Image.Image) -> Image.Image:
    pixels = np.asarray(rgba, dtype=np.float32)
    alpha = pixels[..., 3:] / 255.0
    return Image.fromarray(np.rint(pixels[..., :3] * alpha + 255.0 * (1.0 - alpha)).astype(np.uint8))


def to_rgb8(img: Image.Image) -> Image.Image:
    """The 8-bit RGB image a viewer shows for `img` (see the module docstring)."""
    mode = img.mode
    if mode == "RGB":
        return img.copy() if img.readonly else img
    if mode in SIXTEEN_BIT:
        return _grey(np.asarray(img, dtype=np.float64) / 257.0)
    if mode == "F":
        return _grey(np.asarray(img, dtype=np.float64) * 255.0)
    if mode in WITH_ALPHA or (mode in ("P", "L", "RGB") and "transparency" in img.info):
        return _over_white(img.convert("RGBA"))
    return img.convert("RGB")


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def needs_rules(img: Image.Image, head: bytes) -> bool:
    """Whether a file's pixels need `to_rgb8` beyond plain 8-bit decoding, from its header alone
    (`img` opened lazily, `head` its first bytes): anything but 8-bit RGB or grey JPEG and PNG
    without palette, alpha or a transparent colour."""
    if img.format not in ("JPEG", "PNG") or img.mode not in ("RGB", "L") or "transparency" in img.info:
        return True
    if img.format == "PNG":  # IHDR: bit depth at byte 24, colour type at 25 (0 grey, 2 RGB)
        return not (head.startswith(PNG_MAGIC) and len(head) > 25 and head[24] == 8 and head[25] in (0, 2))
    return False
