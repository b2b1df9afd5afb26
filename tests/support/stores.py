"""Small synthetic stores for stage-2 tests (no backbone needed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from featcache.store import FeatureStore
from featcache.store.format import made_up_identity


def synthetic_store(
    path: Path,
    classes: int = 6,
    per_class: int = 20,
    test_per_class: int = 10,
    dim: int = 32,
    views: int = 0,
    spread: float = 0.6,
    seed: int = 0,
) -> FeatureStore:
    """Gaussian class clusters; views are the clean features plus small noise."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, dim)).astype(np.float32)
    labels = {
        "train": np.repeat(np.arange(classes), per_class),
        "test": np.repeat(np.arange(classes), test_per_class),
    }
    identity = made_up_identity("synthetic", "none", classes, labels, dim, views, seed)
    ids = {k: [f"{k}/{i}" for i in range(len(v))] for k, v in labels.items()}
    store = FeatureStore.create(path, identity, {}, ids, labels, dim, views, 16, "float32")
    for split, y in labels.items():
        x = centres[y] + spread * rng.normal(size=(len(y), dim)).astype(np.float32)
        v = (
            (x[None] + 0.1 * rng.normal(size=(views, *x.shape))).astype(np.float32)
            if split == "train" and views
            else None
        )
        for chunk in range(store.layout(split).n_chunks):
            sl = store.layout(split).chunk_slice(chunk)
            store.write_chunk(split, chunk, x[sl], None if v is None else v[:, sl])
    return store


def store_of_vectors(path: Path, vectors: np.ndarray, train: int = 10, test: int = 5) -> FeatureStore:
    """Each class's images (train and test) are one repeated vector: class c's rows are all
    `vectors[c]` ([classes, d]); `train` and `test` images a class. Classes that share a vector
    cannot be told apart: the stores of the tie tests."""
    classes, dim = vectors.shape
    labels = {"train": np.repeat(np.arange(classes), train), "test": np.repeat(np.arange(classes), test)}
    identity = made_up_identity("synthetic", "none", classes, labels, dim, 0, 0)
    ids = {k: [f"{k}/{i}" for i in range(len(v))] for k, v in labels.items()}
    store = FeatureStore.create(path, identity, {}, ids, labels, dim, 0, 16, "float32")
    for split, y in labels.items():
        x = vectors.astype(np.float32)[y]
        for chunk in range(store.layout(split).n_chunks):
            rows = store.layout(split).chunk_slice(chunk)
            store.write_chunk(split, chunk, x[rows], None)
    return store
