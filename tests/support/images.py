"""Tiny generated image trees, and the small timm models that extract them in well under a second."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

TINY_VIT = "vit_tiny_patch16_224"
TINY_CNN = "mobilenetv3_small_050"
FAST_CNN = "test_efficientnet"  # timm's own test model: 160 px, 0.1 M parameters; for many short runs


def make_image_tree(root: Path, classes: int = 3, train: int = 4, test: int = 2, seed: int = 0) -> Path:
    """train/<class>/*.png and test/<class>/*.png with random pixels and varied sizes."""
    rng = np.random.default_rng(seed)
    for split, n in (("train", train), ("test", test)):
        for c in range(classes):
            folder = root / split / f"class_{c}"
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                h, w = int(rng.integers(40, 90)), int(rng.integers(40, 90))
                pixels = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"img_{i:03d}.png")
    return root


def make_jpeg_tree(root: Path, classes: int = 2, per_class: int = 3, seed: int = 0) -> Path:
    """Smooth photo-like JPEGs (gradients + a blob), varied sizes, one grayscale file."""
    rng = np.random.default_rng(seed)
    for split in ("train", "test"):
        for c in range(classes):
            folder = root / split / f"class_{c}"
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                h, w = int(rng.integers(48, 120)), int(rng.integers(48, 120))
                yy, xx = np.mgrid[0:h, 0:w]
                base = np.stack([xx / w, yy / h, ((xx - w / 2) ** 2 + (yy - h / 2) ** 2) / (h * w)], -1)
                pixels = (255 * np.clip(base * rng.uniform(0.5, 1.0, 3), 0, 1)).astype(np.uint8)
                img = Image.fromarray(pixels)
                if i == 0 and c == 0:
                    img = img.convert("L")
                img.save(folder / f"img_{i:03d}.jpg", quality=90)
    return root
