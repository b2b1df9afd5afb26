"""A store's backbone run on new images the way the store's features were made: the stage-1 half
of `tosca predict`. Decoding and resizing run on the CPU here, so for a store made with `--decode
torch` on a GPU (nvjpeg, GPU resizes) the features agree within the GPU-vs-CPU tolerance, not
bit for bit.

The backbone comes from the weights source the store recorded (packaged, a file, timm's
download, or the fixed random init) and must hash to the recorded sha256; the images go through
the recorded preprocessing (policy, sizes, decoder) and precision. Anything that cannot be had
is refused with one line: a prediction from other weights or pixels would be silently wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from featcache.backbones import LoadedBackbone, load_backbone, resolve_backbone
from featcache.images.decoding import open_picture
from featcache.images.transforms import Preprocessing
from featcache.pipeline.mapper import FeatureMapper, default_batch_size
from featcache.sources.datasets import SplitSamples
from featcache.sources.listing import IMAGE_SUFFIXES, checked_name, image_files
from featcache.store import FeatureStore
from featcache.store.left_out import LeftOut
from tosca_foundation.errors import UserError
from tosca_foundation.text import reason


def backbone_of_store(store: FeatureStore) -> LoadedBackbone:
    """The frozen backbone that made `store`, from the same weights source, checked by hash."""
    ident = store.identity["backbone"]
    if ident.get("imported"):
        raise UserError(
            f"store {store.path} was imported (features of {ident.get('encoder')!r}, computed outside tosca): "
            "tosca has no backbone to embed new inputs with; compute their features with that encoder"
        )
    spec = resolve_backbone(ident["alias"])
    source = ident["weights_source"]
    if source == "random-init":
        loaded = load_backbone(spec, None, random_init=True)
    elif source == "file":
        path = store.attrs.get("backbone_weights_file")
        if not path or not Path(path).is_file():
            raise UserError(
                f"store {store.path} was made with the weights file {path}, which is not there any more; "
                "put it back at that path to predict with this run"
            )
        loaded = load_backbone(spec, Path(path))
    else:  # the packaged weights, or timm's download (fails offline with its own clear line)
        loaded = load_backbone(spec)
    if loaded.weights_sha256 != ident["weights_sha256"]:
        raise UserError(
            f"the {source} weights of {spec.alias} here hash to {loaded.weights_sha256[:12]}, the store's to "
            f"{ident['weights_sha256'][:12]}: not the backbone that made {store.path}"
        )
    return loaded


def preprocessing_of_store(store: FeatureStore) -> Preprocessing:
    attrs: dict[str, Any] = dict(store.identity["preprocessing"])
    for key, value in attrs.items():
        if isinstance(value, list):
            attrs[key] = tuple(value)  # JSON has no tuples
    return Preprocessing(**attrs)


def image_paths(inputs: list[Path]) -> tuple[list[Path], LeftOut]:
    """Image files named directly (used whatever their name, as long as it is text: one that is not
    valid UTF-8 is refused as in a folder), and the images under named folders by the rule `tosca
    extract` follows (`featcache.sources.listing`: hidden and non-image files are left out and
    counted), in that order; refuses a path that does not exist and inputs without one image."""
    found: list[Path] = []
    left_out = LeftOut()
    for item in inputs:
        if item.is_dir():
            found += image_files(item, left_out)
        elif item.is_file():
            found.append(checked_name(item))  # one rule with the folders' images: a name is text
        elif item.exists():
            raise UserError(f"{item} is neither an image file nor a folder (a device, a pipe or a socket)")
        else:
            raise UserError(f"no such image or folder: {item}")
    if not found:
        said = f" ({left_out.summary()} left out)" if left_out else ""
        raise UserError(f"no images ({', '.join(IMAGE_SUFFIXES)}) under {', '.join(map(str, inputs))}{said}")
    return found, left_out


def embed_images(
    store: FeatureStore,
    paths: list[Path],
    device: torch.device,
    batch_size: int | None = None,
    on_progress: Callable[[str, int, int], None] | None = None,
) -> np.ndarray:
    """The store's features of these images: [n, d] float32 (the clean, evaluation-transform vector).
    `on_progress("", images done now, images in all)` after each batch (a long predict speaks)."""
    backbone = backbone_of_store(store)
    prep = preprocessing_of_store(store)
    samples = SplitSamples(
        ids=[str(p.resolve()) for p in paths], labels=np.zeros(len(paths), dtype=np.int64), root=Path("/")
    )
    precision = str(store.identity.get("precision", "fp32"))
    batch = batch_size or default_batch_size(device)
    mapper = FeatureMapper(backbone.model, device, precision, batch)
    outputs = []
    for start in range(0, len(paths), batch):
        images = []
        for i in range(start, min(len(paths), start + batch)):
            try:
                images.append(prep.clean(open_picture(samples, i, prep.decoder, prep.resize_size)))
            except Exception as exc:  # a user's file: say which, not a traceback
                raise UserError(f"cannot read image {paths[i]} ({reason(exc)})") from None
        outputs.append(mapper(torch.stack(images)))
        if on_progress is not None:
            on_progress("", len(images), len(paths))
    return np.concatenate(outputs).astype(np.float32)
