"""Preprocessing policies and the seeded augmented views.

`pilot` is the paper's (method.md §1): no mean/std normalisation, Resize(256, bicubic) +
CenterCrop(224) for clean features, RandomResizedCrop(224, scale 0.05-1) + flip for views.
`timm` follows the model's own data config (size, crop_pct, interpolation, mean/std) and
draws views with the same crop/flip recipe at the model's size, normalised the model's way.

A view's randomness comes only from a generator seeded by (seed, split, sample id, view
index), never from torch's global RNG, so batch size, worker count, order and resumption
cannot change which crop a sample gets.
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

from featcache.errors import UserError

POLICIES = ("pilot", "timm")


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

    def attrs(self) -> dict[str, Any]:
        return asdict(self)

    def _finish(self, img: Image.Image) -> torch.Tensor:
        tensor = F.to_tensor(img)
        if self.mean is not None and self.std is not None:
            tensor = F.normalize(tensor, list(self.mean), list(self.std))
        return tensor

    def clean(self, img: Image.Image) -> torch.Tensor:
        """The deterministic evaluation transform (test features and prototypes)."""
        img = F.resize(img, self.resize_size, interpolation=InterpolationMode(self.interpolation))
        return self._finish(F.center_crop(img, [self.input_size, self.input_size]))

    def view(self, img: Image.Image, rng: np.random.Generator) -> torch.Tensor:
        """One augmented training view, all randomness drawn from `rng`."""
        top, left, height, width = random_resized_crop_box(
            img.height, img.width, self.view_scale, self.view_ratio, rng
        )
        img = F.resized_crop(
            img,
            top,
            left,
            height,
            width,
            [self.input_size, self.input_size],
            interpolation=InterpolationMode(self.view_interpolation),
        )
        if rng.random() < self.view_flip_p:
            img = F.hflip(img)
        return self._finish(img)


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


def make_preprocessing(policy: str, data_config: dict[str, Any]) -> Preprocessing:
    """Resolve a policy name against the model's timm data config."""
    if policy == "pilot":
        return Preprocessing("pilot", 224, 256, "bicubic", None, None)
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
        )
    raise UserError(f"unknown policy {policy!r}: use one of {', '.join(POLICIES)}")
