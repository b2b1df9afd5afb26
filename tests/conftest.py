"""Fixtures every test folder shares: tiny generated inputs, the real archives' stores, and torch's
global settings restored after each test."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from support.images import make_image_tree, make_jpeg_tree
from support.real_data import real_store

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never wait on hub retries in tests


@pytest.fixture
def image_tree(tmp_path: Path) -> Path:
    return make_image_tree(tmp_path / "images")


@pytest.fixture
def jpeg_tree(tmp_path: Path) -> Path:
    return make_jpeg_tree(tmp_path / "jpegs")


@pytest.fixture(scope="session")
def eurosat_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return real_store(tmp_path_factory, "eurosat")


@pytest.fixture(scope="session")
def cifar10_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return real_store(tmp_path_factory, "cifar10")


@pytest.fixture(autouse=True)
def torch_globals_restored() -> Iterator[None]:
    """A test may change torch's process-wide settings (TF32, threads, denormals, determinism);
    the next test starts from the settings the session started with."""
    saved = _torch_globals()
    yield
    if _torch_globals() == saved:
        return
    torch.set_float32_matmul_precision(saved[2])
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[0], saved[1]
    torch.set_num_threads(saved[3])
    torch.use_deterministic_algorithms(saved[4])
    torch.set_flush_denormal(False)


def _torch_globals() -> tuple:
    return (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.get_float32_matmul_precision(),
        torch.get_num_threads(),
        torch.are_deterministic_algorithms_enabled(),
    )
