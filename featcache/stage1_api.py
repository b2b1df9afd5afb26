"""Stage 1 from Python: open a store and read its arrays, extract one, and register backbones and
datasets that live outside the package. Re-exported as `featcache.open_store`, ... (loaded on first
use, so `import featcache` stays light).

The examples run as doctests on tiny data (tests/test_api.py): `STORE` is a small store on disk,
`IMAGES` a folder of train/<class>/ and test/<class>/ images, `TMP` an empty folder.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

from featcache.backbones import BackboneSpec
from featcache.backbones import register_backbone as _register_backbone
from featcache.sources.datasets import DatasetSource
from featcache.store import FeatureStore, check_readable
from tosca_foundation.arguments import as_path, check_types, shown
from tosca_foundation.dataset_names import Split
from tosca_foundation.dataset_names import register_dataset as _register_dataset
from tosca_foundation.devices import check_device_name
from tosca_foundation.errors import UserError, UserTypeError, UserValueError
from tosca_foundation.folders import check_outputs
from tosca_foundation.names import as_keyword, check_keywords

__all__ = [
    "BackboneSpec",
    "DatasetSource",
    "FeatureStore",
    "Split",
    "UserError",
    "UserTypeError",
    "UserValueError",
    "embed",
    "extract",
    "open_store",
    "register_backbone",
    "register_dataset",
]


def open_store(path: str | Path) -> FeatureStore:
    """A feature store, checked (complete, every chunk against its checksum) before it is handed
    out. Its arrays are plain numpy: `features(split)` [n, d] float32, `labels(split)` [n] int64,
    `ids(split)` the samples' names.

    >>> store = open_store(STORE)
    >>> store.features("train").shape, store.labels("train").dtype.name
    ((96, 32), 'int64')
    >>> store.shape.classes, store.dim
    (6, 32)
    """
    store = FeatureStore.open(as_path("open_store", "path", path))
    check_readable(store, values=True)
    return store


def extract(
    model: str,
    dataset: str,
    data_root: str | Path | None = None,
    *,
    store: str | Path | None = None,
    cache_dir: str | Path = "cache",
    **options: Any,
) -> Path:
    """`tosca extract` from Python: run a frozen backbone once over a dataset and store its
    features; resumable, and nothing to do when the store is complete. `options` are the other
    flags of `tosca extract` (random_init, views, device, precision, decode, limit_per_class, ...).
    Returns the store's path.

    >>> path = extract("test_efficientnet", "imagefolder", IMAGES, store=TMP / "tiny.zarr", random_init=True, workers=0)
    >>> open_store(path).shape.classes
    3
    """
    from featcache.extract_request import ExtractRequest
    from featcache.runner import extract as run

    offered = [f.name for f in fields(ExtractRequest) if f.metadata.get("help")]  # the command's flags
    check_keywords(extract, options, offered)
    named = {
        "model": model,
        "dataset": dataset,
        "data_root": data_root,
        "cache_dir": cache_dir,
        "store": store,
    }
    check_types("extract", ExtractRequest, {**named, **options})  # "false" would count as true
    request = ExtractRequest(
        model=model,
        dataset=dataset,
        data_root=None if data_root is None else Path(data_root),
        cache_dir=Path(cache_dir),
        store=None if store is None else Path(store),
        spell=as_keyword,
        **options,
    )
    check_outputs(request)  # as the command line checks them: before anything runs
    return run(request).store


def embed(store: str | Path | FeatureStore, images: list[str | Path], device: str = "auto") -> Any:
    """The store's features of new images (files, or folders searched by the rule of `tosca
    extract`): the same backbone, weights (checked by hash), preprocessing and precision. [n, d]
    float32, in the order of the images found. `device` as `tosca predict`'s (auto: CUDA when present).

    >>> from pathlib import Path
    >>> tiny = extract("test_efficientnet", "imagefolder", IMAGES, store=TMP / "embed.zarr", random_init=True, workers=0)
    >>> embed(tiny, [Path(IMAGES) / "test"]).shape
    (6, 256)
    """
    from featcache.embedding import embed_images, image_paths
    from tosca_foundation.devices import resolve_device

    if isinstance(images, (str, Path)):  # one path, not its letters
        images = [images]
    if not isinstance(images, (list, tuple)) or not all(isinstance(p, (str, Path)) for p in images):
        raise UserTypeError(f"embed() keyword images={shown(images)} must be a path or a list of paths")
    if any(str(p) == "" for p in images):
        raise UserValueError(
            "embed() keyword images: an image path is empty (it would mean the current folder): give a file or a folder"
        )
    check_device_name(device, "device")
    opened = store if isinstance(store, FeatureStore) else open_store(store)
    paths, _ = image_paths([Path(p) for p in images])
    return embed_images(opened, paths, resolve_device(device))


def register_backbone(spec: BackboneSpec) -> BackboneSpec:
    """Add a backbone under a short alias (`tosca extract --model ALIAS` then finds it): a timm
    model name (optionally `arch.tag`), its preprocessing policy (`timm` or `pilot`), and where
    its weights come from. A name registered twice is refused.

    >>> from featcache.backbones import BACKBONES, resolve_backbone
    >>> spec = register_backbone(BackboneSpec("doc_tiny_cnn", "test_efficientnet", "timm", note="a doctest's"))
    >>> resolve_backbone("doc_tiny_cnn").timm_name
    'test_efficientnet'
    >>> del BACKBONES["doc_tiny_cnn"]  # (a doctest leaves the registry as it found it)
    """
    check_types("register_backbone", register_backbone, {"spec": spec})
    return _register_backbone(spec, sys._getframe(1).f_globals.get("__name__"))


def register_dataset(
    name: str,
    num_classes: int | None,
    description: str,
    split: Split | None = None,
    test_share: float | None = None,
) -> Callable[[Callable[[Path | None, Path], DatasetSource]], Callable[[Path | None, Path], DatasetSource]]:
    """A decorator adding a dataset under `name` (`tosca extract --dataset NAME`): the function
    gets the data root and the cache folder and returns a `DatasetSource` (its splits' samples and
    class names); `num_classes` is checked against what it returns (None: any). `split` is its
    default class split (`Split(init_cls, increment)`; stage 2 uses it where --init-cls and
    --increment are not given), `test_share` the share of each class it tests on when it makes
    its own test split.

    >>> from featcache.sources.datasets import DATASETS, folder_dataset
    >>> @register_dataset("doc_folders", 4, "train/ and test/ class folders, as a doctest", Split(2, 2))
    ... def doc_folders(data_root, cache_dir):
    ...     return folder_dataset("doc_folders", data_root, cache_dir)
    >>> DATASETS["doc_folders"].split
    Split(init_cls=2, increment=2, paper=True)
    >>> del DATASETS["doc_folders"]  # (a doctest leaves the registry as it found it)
    """
    check_types("register_dataset", register_dataset, locals())
    return _register_dataset(name, num_classes, description, split=split, test_share=test_share)
