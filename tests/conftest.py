"""Shared fixtures: tiny generated image trees and paths to the real archives."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never wait on hub retries in tests

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("TOSCA_DATA", ROOT.parent / "shared" / "data"))
TINY_VIT = "vit_tiny_patch16_224"
TINY_CNN = "mobilenetv3_small_050"


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


@pytest.fixture
def image_tree(tmp_path: Path) -> Path:
    return make_image_tree(tmp_path / "images")


def shared_archive(name: str) -> Path:
    paths = {
        "eurosat": SHARED_DATA / "eurosat" / "EuroSAT-RGB.tar.gz",
        "cifar10": SHARED_DATA / "cifar10" / "cifar10-jpeg.tar.gz",
        "cifar100": SHARED_DATA / "cifar100" / "cifar100-jpeg.tar.gz",
    }
    path = paths[name]
    if not path.exists():
        pytest.skip(f"real data not found at {path} (set TOSCA_DATA)")
    return path
