"""What a user can ask of stage 1: `ExtractRequest`, the flags of `tosca extract` as values.

Plain data, import-light (the command line builds its options from these fields, and a command
that only describes a store must not load torch); `featcache.extract` checks and runs it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tosca_foundation.names import Spell, as_flag
from tosca_foundation.options import option

DEFAULT_PRECISION = "fp32"


@dataclass(frozen=True)
class ExtractRequest:
    """Everything a user can ask of `tosca extract` (its flags, as values)."""

    model: str = option(
        help="Backbone alias (vit_b16, effnet_lite0, ...) or a timm name.", names=("--model", "-m")
    )
    dataset: str = option(
        help="Dataset (eurosat, cifar10, cifar100, imagefolder, ...).", names=("--dataset", "-d")
    )
    data_root: Path | None = option(None, "Folder or archive (.zip, .tar, .tar.gz) with the images.")
    cache_dir: Path = option(
        Path("cache"),
        "Root under which stores are created and found (a folder, or s3://bucket/prefix).",
        output=True,
    )
    store: Path | None = option(
        None,
        "Store path or URL (default: CACHE_DIR/<dataset>/<model>[-<policy>].zarr).",
        output=True,
    )
    weights: Path | None = option(None, "Local checkpoint: .safetensors or a torch state dict.")
    random_init: bool = option(
        False, "Untrained weights, always the same (torch seed 0).", ("--random-init",)
    )
    policy: str | None = option(None, "Preprocessing: pilot (the paper's) or timm (default per model).")
    views: int = option(0, "Augmented views cached per training image (one per epoch).")
    seed: int = option(0, "Seed of the augmented views.")
    dtype: str = option("float32", "float32 or float16 (halves the store).")
    batch_size: int | None = option(None, "Images per forward pass (default: 12 on CPU, 128 on CUDA).")
    workers: int | None = option(None, "Image-decoding processes (default: cores - 1; 0: in-process).")
    device: str = option("auto", "auto (CUDA when present), cpu, cuda or cuda:N.")
    precision: str = option(
        DEFAULT_PRECISION, "fp32 (the default on every device; TF32 off) or bf16 (autocast)."
    )
    decode: str = option(
        "auto", "pil (the reference) or torch (nvjpeg on CUDA); auto: the store's, else by device."
    )
    chunk_size: int = option(512, "Samples per store chunk (the unit of resume and of distribution).")
    limit_per_class: int | None = option(None, "Keep the first N images per class in each split.")
    overwrite: bool = option(False, "Replace an existing store made differently.", ("--overwrite",))
    scheduler: str | None = option(
        None, "Dask: local:N, local-cuda (needs dask-cuda), a scheduler address or file."
    )
    skip_bad_images: bool = option(
        False, "Leave unreadable images out (listed by cache info).", ("--skip-bad-images",)
    )
    # how a refusal names a field: the command line's flag (--val-fraction); the Python API's keyword
    # (val_fraction); not part of what is asked, so two requests asking the same compare equal
    spell: Spell = field(default=as_flag, compare=False, repr=False)
