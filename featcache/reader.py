"""Reader: decode and transform the images of given sample chunks, in chunk-aligned batches.

Batches never cross a chunk boundary and always start at a chunk's first sample, so the
backbone sees exactly the same batches whether a chunk is computed in a fresh run, a resumed
run or on a distributed worker: resumed stores are bit-identical to uninterrupted ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader, Dataset

from featcache.datasets import SplitSamples
from featcache.store import SplitLayout
from featcache.transforms import Preprocessing, view_rng


@dataclass
class Item:
    index: int
    clean: torch.Tensor | None
    views: torch.Tensor | None
    error: str | None


@dataclass
class Batch:
    """B samples: their global indices, B clean images then B*V views (sample-major)."""

    indices: list[int]
    images: torch.Tensor | None
    views: int
    errors: list[str]


class SampleImages(Dataset):
    """Item i = the clean image of sample i and its V seeded views (V = 0 for test)."""

    def __init__(self, samples: SplitSamples, prep: Preprocessing, split: str, seed: int, views: int):
        self.samples, self.prep, self.split, self.seed, self.views = samples, prep, split, seed, views

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> Item:
        try:
            img = self.samples.open_image(i)
            clean = self.prep.clean(img)
            sample_id = self.samples.ids[i]
            views = (
                torch.stack(
                    [
                        self.prep.view(img, view_rng(self.seed, self.split, sample_id, k))
                        for k in range(self.views)
                    ]
                )
                if self.views
                else None
            )
            return Item(i, clean, views, None)
        except Exception as exc:  # report which file, let the runner stop before flagging its chunk
            where = self.samples.describe(i)
            detail = type(exc).__name__ if where in str(exc) else f"{type(exc).__name__}: {exc}"
            return Item(i, None, None, f"{where} ({detail})")


def collate(items: list[Item]) -> Batch:
    errors = [it.error for it in items if it.error is not None]
    views = items[0].views.shape[0] if items[0].views is not None else 0
    if errors:
        return Batch([it.index for it in items], None, views, errors)
    parts = [torch.stack([it.clean for it in items])]
    if views:
        parts.append(torch.cat([it.views for it in items]))
    return Batch([it.index for it in items], torch.cat(parts), views, [])


def chunk_batches(layout: SplitLayout, chunks: list[int], batch_size: int) -> list[list[int]]:
    """Sample indices of the given chunks, cut into batches that start at each chunk's start."""
    batches = []
    for chunk in chunks:
        sl = layout.chunk_slice(chunk)
        batches += [
            list(range(s, min(s + batch_size, sl.stop))) for s in range(sl.start, sl.stop, batch_size)
        ]
    return batches


def make_loader(dataset: SampleImages, batches: list[list[int]], workers: int) -> DataLoader:
    return DataLoader(
        dataset,
        batch_sampler=batches,
        num_workers=workers,
        collate_fn=collate,
        persistent_workers=False,
        prefetch_factor=4 if workers > 0 else None,
    )
