"""Writer: gathers per-batch features into whole chunks and hands each finished chunk to the store."""

from __future__ import annotations

import numpy as np

from featcache.store import FeatureStore


class ChunkWriter:
    """Buffers one chunk at a time (batches arrive chunk by chunk) and writes it when full."""

    def __init__(self, store: FeatureStore, split: str, dtype: str, sources: dict[int, str] | None = None):
        self.store, self.split, self.dtype = store, split, np.dtype(dtype)
        self.sources = sources or {}  # chunk -> fingerprint of its files, recorded with it
        self.layout = store.layout(split)
        self.views = store.views if split == "train" else 0
        self._buffers: dict[int, tuple[np.ndarray, np.ndarray | None, set[int]]] = {}

    def _buffer(self, chunk: int) -> tuple[np.ndarray, np.ndarray | None, set[int]]:
        if chunk not in self._buffers:
            sl = self.layout.chunk_slice(chunk)
            n, dim = sl.stop - sl.start, self.store.dim
            views = np.zeros((self.views, n, dim), np.float32) if self.views else None
            self._buffers[chunk] = (np.zeros((n, dim), np.float32), views, set())
        return self._buffers[chunk]

    def add(self, indices: list[int], clean: np.ndarray, views: np.ndarray | None) -> list[int]:
        """Place B clean vectors and their [B, V, D] views; return the chunks this completed."""
        finished = []
        for row, index in enumerate(indices):
            chunk = index // self.layout.chunk_size
            feats, view_buf, filled = self._buffer(chunk)
            offset = index - chunk * self.layout.chunk_size
            feats[offset] = clean[row]
            if view_buf is not None and views is not None:
                view_buf[:, offset] = views[row]
            filled.add(offset)
            if len(filled) == feats.shape[0]:
                finished.append(chunk)
        for chunk in finished:
            feats, view_buf, _ = self._buffers.pop(chunk)
            self.store.write_chunk(
                self.split,
                chunk,
                feats.astype(self.dtype),
                None if view_buf is None else view_buf.astype(self.dtype),
                self.sources.get(chunk),
            )
        return finished
