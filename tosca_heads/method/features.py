"""Feature sources: where a trainer's features come from (the one seam between cache and backbone).

`CachedFeatures` reads a store. Any object that answers the same two questions can stand in
(the tests run the backbone on the images every epoch, as the reference code does, and hold the
cached run to it). The engine moves what a source returns to its device;
a cached source can hold its arrays there already, so features cross to a GPU once.

A cached source checks the store before it hands out a number: complete, attrs that fit the
arrays, and every chunk against the checksum recorded when it was written
(`featcache.store.read_split`); a damaged store stops the command in one line.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch

from featcache.store import FeatureStore, check_readable, read_split, verify_streaming

MEMORY_BUDGET_BYTES = 4 << 30  # load whole arrays below this; read task by task above it


class FeatureSource(Protocol):
    views: int

    def epoch_features(self, rows: np.ndarray, epoch: int) -> torch.Tensor:
        """Training features of these train rows for this epoch: view (epoch mod V), or clean if V = 0."""
        ...

    def clean(self, split: str, rows: np.ndarray) -> torch.Tensor:
        """Clean (evaluation-transform) features of these rows."""
        ...


class CachedFeatures:
    """A complete store, held in memory (on `device`) when it fits, else read per task and kept for it."""

    def __init__(
        self,
        store: FeatureStore,
        memory_budget: int = MEMORY_BUDGET_BYTES,
        device: torch.device | str = "cpu",
    ):
        check_readable(store)
        self.store, self.views = store, store.views
        self.device = torch.device(device)
        n_train, n_test = store.layout("train").n, store.layout("test").n
        held = np.dtype(np.float32).itemsize  # float16 stores too are held as float32
        self.in_memory = (n_train * (1 + self.views) + n_test) * store.dim * held <= memory_budget
        self._arrays: dict[tuple[str, int], torch.Tensor] = {}
        self._task_cache: dict[tuple[bytes, int], torch.Tensor] = {}
        if not self.in_memory:  # read task by task later: every chunk is checked once now
            for split in ("train", "test"):
                verify_streaming(store, split)

    def _whole(self, split: str, k: int) -> torch.Tensor:
        key = (split, k)
        if key not in self._arrays:
            self._load_split(split)
        return self._arrays[key]

    def _load_split(self, split: str) -> None:
        """A whole split (its views too), each chunk checked against its checksum as it is read."""
        features, views = read_split(self.store, split)
        arrays = {-1: features} | ({} if views is None else dict(enumerate(views)))
        for k, array in arrays.items():
            host = torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32))
            self._arrays[(split, k)] = host.to(self.device)

    def _read(self, split: str, k: int, rows: np.ndarray) -> torch.Tensor:
        if self.in_memory:
            whole = self._whole(split, k)
            return whole.index_select(0, torch.from_numpy(np.asarray(rows, dtype=np.int64)).to(self.device))
        key = (rows.tobytes() + split.encode(), k)
        if key not in self._task_cache:
            if len(self._task_cache) > 2 * (1 + self.views):  # a new task: drop the previous one's rows
                self._task_cache.clear()
            sel = self.store.features(split, rows) if k < 0 else self.store.view(k, rows)
            self._task_cache[key] = torch.from_numpy(np.asarray(sel, dtype=np.float32)).to(self.device)
        return self._task_cache[key]

    def preload(self) -> CachedFeatures:
        """Read every array now (when they fit in memory), so no later run pays for the first read."""
        if self.in_memory:
            for split, k in [("train", -1), ("test", -1), *(("train", v) for v in range(self.views))]:
                self._whole(split, k)
        return self

    def epoch_features(self, rows: np.ndarray, epoch: int) -> torch.Tensor:
        return self._read("train", epoch % self.views if self.views else -1, rows)

    def clean(self, split: str, rows: np.ndarray) -> torch.Tensor:
        return self._read(split, -1, rows)
