"""Feature sources: where a trainer's features come from (the one seam between cache and backbone).

`CachedFeatures` reads a store. Any object that answers the same two questions can stand in
(the tests run the backbone on the images every epoch, as the reference code does, and hold the
cached run to it). The engine moves what a source returns to its device;
a cached source can hold its arrays there already, so features cross to a GPU once.

A cached source checks the store before it hands out a number: complete, attrs that fit the
arrays, and every chunk against the checksum recorded when it was written
(`featcache.store.checked_chunks`); a damaged store stops the command in one line.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch

from featcache.store import FeatureStore, check_readable, checked_chunks, verify_streaming
from tosca_foundation.limits import memory_budget as budget_setting


class FeatureSource(Protocol):
    views: int

    def epoch_features(self, rows: np.ndarray, epoch: int) -> torch.Tensor:
        """Training features of these train rows for this epoch: view (epoch mod V), or clean if V = 0."""
        ...

    def clean(self, split: str, rows: np.ndarray) -> torch.Tensor:
        """Clean (evaluation-transform) features of these rows."""
        ...


class CachedFeatures:
    """A complete store, held whole (on `device`) when its features fit the memory budget as
    float32, else read task by task: then only the clean rows of the task being read are kept
    (its prototypes and its routers' statistics both read them); a view is handed over, not kept
    (the trainer keeps a view it will use again). Memory: the store, or one task's rows."""

    def __init__(
        self,
        store: FeatureStore,
        memory_budget: int | None = None,
        device: torch.device | str = "cpu",
    ):
        check_readable(store)
        self.store, self.views = store, store.views
        self.device = torch.device(device)
        memory_budget = budget_setting() if memory_budget is None else memory_budget
        self.in_memory = store.shape.float32_bytes <= memory_budget
        self._arrays: dict[tuple[str, int], torch.Tensor] = {}
        self._task: tuple[str, bytes] | None = None  # the split and rows whose clean features are kept
        self._clean: torch.Tensor | None = None
        if not self.in_memory:  # read task by task later: every chunk is checked once now
            for split in ("train", "test"):
                verify_streaming(store, split)

    def _whole(self, split: str, k: int) -> torch.Tensor:
        key = (split, k)
        if key not in self._arrays:
            self._load_split(split)
        return self._arrays[key]

    def _load_split(self, split: str) -> None:
        """A whole split (its views too) as float32 on the device, filled one checked chunk at a time:
        never the split whole in the store's dtype beside it, nor on the host for a GPU."""
        n, dim, host = self.store.layout(split).n, self.store.dim, self.device.type == "cpu"
        keys = [-1] + (list(range(self.views)) if split == "train" else [])
        arrays = {
            k: torch.from_numpy(np.empty((n, dim), dtype=np.float32))
            if host
            else torch.empty(n, dim, dtype=torch.float32, device=self.device)
            for k in keys
        }
        for rows, features, views in checked_chunks(self.store, split):
            for k in keys:
                block = features if k < 0 else views[k]
                if host:  # cast to float32 as it is copied
                    arrays[k].numpy()[rows] = block
                else:
                    arrays[k][rows] = torch.from_numpy(block.astype(np.float32)).to(self.device)
        for k, array in arrays.items():
            self._arrays[(split, k)] = array

    def _read(self, split: str, k: int, rows: np.ndarray) -> torch.Tensor:
        if self.in_memory:
            whole = self._whole(split, k)
            return whole.index_select(0, torch.from_numpy(np.asarray(rows, dtype=np.int64)).to(self.device))
        task = (split, np.asarray(rows, dtype=np.int64).tobytes())
        if self._task != task:  # another task's rows: the previous one's go
            self._task, self._clean = task, None
        if k >= 0 or self._clean is None:
            sel = self.store.features(split, rows) if k < 0 else self.store.view(k, rows)
            read = torch.from_numpy(np.asarray(sel, dtype=np.float32)).to(self.device)
            if k >= 0:
                return read
            self._clean = read
        return self._clean

    def preload(self) -> CachedFeatures:
        """Read every array now (when they fit in memory), so no later run pays for the first read."""
        if self.in_memory:
            for split in ("train", "test"):
                self._whole(split, -1)
        return self

    def epoch_features(self, rows: np.ndarray, epoch: int) -> torch.Tensor:
        return self._read("train", epoch % self.views if self.views else -1, rows)

    def clean(self, split: str, rows: np.ndarray) -> torch.Tensor:
        return self._read(split, -1, rows)
