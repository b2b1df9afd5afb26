"""Preprocessing policies and the seeded augmented views.

`pilot` is the paper's (method.md §1): no mean/std normalisation, Resize(256, bicubic) +
CenterCrop(224) for clean features, RandomResizedCrop(224, scale 0.05-1) + flip for views.
`timm` follows the model's own data config (size, crop_pct, interpolation, mean/std) and
draws views with the same crop/flip recipe at the model's size, normalised the model's way.

A view's randomness comes only from a generator seeded by (seed, split, sample id, view
index), never from torch's global RNG, so batch size, worker count, order and resumption
cannot change which crop a sample gets.

Both transforms take a PIL image (the `pil` decoder) or a uint8 [3, H, W] tensor on any device
(the `torch` decoder): the crop boxes and flips are drawn by the same code from the same
generator, so the two decoders differ only in how pixels are interpolated. On CPU,
torchvision's uint8 antialiased resize reproduces PIL's bit for bit on the real archives.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as F
from torchvision.transforms.v2 import functional as F2

from featcache.sources.pixels import check_resized
from featcache.store.meanings import POLICIES
from tosca_foundation.errors import UserError

# A decoded image: PIL (the `pil` decoder) or uint8 [3, H, W] / [B, 3, H, W] (the `torch` decoder).
Picture = Image.Image | torch.Tensor


def picture_size(img: Picture) -> tuple[int, int]:
    """(height, width) of a PIL image or an image tensor."""
    if isinstance(img, torch.Tensor):
        return int(img.shape[-2]), int(img.shape[-1])
    return img.height, img.width


@dataclass(frozen=True)
class Preprocessing:
    """Every number that decides the pixels the backbone sees; recorded in the store."""

    policy: str
    input_size: int
    resize_size: int
    interpolation: str
    mean: tuple[float, float, float] | None
    std: tuple[float, float, float] | None
    view_interpolation: str = "bilinear"
    view_scale: tuple[float, float] = (0.05, 1.0)
    view_ratio: tuple[float, float] = (3 / 4, 4 / 3)
    view_flip_p: float = 0.5
    decoder: str = "pil"  # featcache.images.decoding: who decodes and resizes; part of the store identity

    def attrs(self) -> dict[str, Any]:
        return asdict(self)

    def _finish(self, img: Picture) -> torch.Tensor:
        if isinstance(img, torch.Tensor):
            tensor = img.to(torch.float32).div(255)  # what to_tensor does to a uint8 image
        else:
            tensor = F.to_tensor(img)
        if self.mean is not None and self.std is not None:
            tensor = F.normalize(tensor, list(self.mean), list(self.std))
        return tensor

    def clean(self, img: Picture) -> torch.Tensor:
        """The deterministic evaluation transform (test features and prototypes).

        A tensor may hold a batch [B, 3, H, W] of equally sized images: one resize call for all.
        An image that the resize would make too large (`featcache.sources.pixels.check_resized`;
        the decoders check it from the file's header first) is refused; a view's resize makes an
        `input_size` square whatever the image.
        """
        height, width = picture_size(img)
        check_resized(width, height, self.resize_size)
        interpolation = InterpolationMode(self.interpolation)
        crop = [self.input_size, self.input_size]
        if isinstance(img, torch.Tensor):
            img = F2.resize(img, [self.resize_size], interpolation=interpolation, antialias=True)
            return self._finish(F2.center_crop(img, crop))
        img = F.resize(img, self.resize_size, interpolation=interpolation)
        return self._finish(F.center_crop(img, crop))

    def clean_batch(self, images: list[torch.Tensor]) -> torch.Tensor:
        """`clean` of many uint8 image tensors, one resize per distinct input size; [B, 3, S, S]."""
        out: list[torch.Tensor | None] = [None] * len(images)
        by_size: dict[tuple[int, int], list[int]] = {}
        for i, img in enumerate(images):
            by_size.setdefault(picture_size(img), []).append(i)
        for rows in by_size.values():
            done = self.clean(torch.stack([images[i] for i in rows]))
            for row, i in enumerate(rows):
                out[i] = done[row]
        return torch.stack(out)  # type: ignore[arg-type]

    def view(self, img: Picture, rng: np.random.Generator) -> torch.Tensor:
        """One augmented training view, all randomness drawn from `rng` (same draws for both decoders)."""
        height, width = picture_size(img)
        top, left, h, w = random_resized_crop_box(height, width, self.view_scale, self.view_ratio, rng)
        size = [self.input_size, self.input_size]
        interpolation = InterpolationMode(self.view_interpolation)
        flip = rng.random() < self.view_flip_p
        if isinstance(img, torch.Tensor):
            img = F2.resized_crop(img, top, left, h, w, size, interpolation=interpolation, antialias=True)
            return self._finish(F2.horizontal_flip(img) if flip else img)
        img = F.resized_crop(img, top, left, h, w, size, interpolation=interpolation)
        return self._finish(F.hflip(img) if flip else img)


def random_resized_crop_box(
    height: int,
    width: int,
    scale: tuple[float, float],
    ratio: tuple[float, float],
    rng: np.random.Generator,
) -> tuple[int, int, int, int]:
    """torchvision's RandomResizedCrop box rule (10 tries, then a centred fallback), on `rng`."""
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target_area = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
        w = round(math.sqrt(target_area * aspect))
        h = round(math.sqrt(target_area / aspect))
        if 0 < w <= width and 0 < h <= height:
            top = int(rng.integers(0, height - h + 1))
            left = int(rng.integers(0, width - w + 1))
            return top, left, h, w
    in_ratio = width / height
    if in_ratio < min(ratio):
        w, h = width, round(width / min(ratio))
    elif in_ratio > max(ratio):
        h, w = height, round(height * max(ratio))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def view_rng(seed: int, split: str, sample_id: str, view_index: int) -> np.random.Generator:
    """The generator for view k of one sample: a pure function of its identity."""
    key = f"{seed}\x1f{split}\x1f{sample_id}\x1f{view_index}".encode()
    return np.random.default_rng(int.from_bytes(hashlib.sha256(key).digest()[:8], "little"))


def make_preprocessing(policy: str, data_config: dict[str, Any], decoder: str = "pil") -> Preprocessing:
    """Resolve a policy name against the model's timm data config (`decoder`: see featcache.images.decoding)."""
    if policy == "pilot":
        return Preprocessing("pilot", 224, 256, "bicubic", None, None, decoder=decoder)
    if policy == "timm":
        size = int(data_config.get("input_size", (3, 224, 224))[-1])
        crop_mode = data_config.get("crop_mode", "center")
        if crop_mode != "center":
            raise UserError(f"timm crop_mode {crop_mode!r} is not supported; use --policy pilot")
        crop_pct = float(data_config.get("crop_pct", 0.875))
        return Preprocessing(
            "timm",
            size,
            math.floor(size / crop_pct),
            str(data_config.get("interpolation", "bicubic")),
            tuple(float(v) for v in data_config.get("mean", (0.485, 0.456, 0.406))),
            tuple(float(v) for v in data_config.get("std", (0.229, 0.224, 0.225))),
            view_interpolation=str(data_config.get("interpolation", "bicubic")),
            decoder=decoder,
        )
    raise UserError(f"unknown policy {policy!r}: use one of {', '.join(POLICIES)}")
