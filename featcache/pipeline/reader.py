"""Reader: decode and transform the images of given sample chunks, in chunk-aligned batches.

Batches never cross a chunk boundary and always start at a chunk's first sample, so the
backbone sees exactly the same batches whether a chunk is computed in a fresh run, a resumed
run or on a distributed worker: resumed stores are bit-identical to uninterrupted ones.

Two stages: the host stage (DataLoader workers) decodes and transforms on the CPU; with the
`torch` decoder on an accelerator the workers only read bytes, and the device stage
(`DeviceImages`) decodes and transforms whole batches on the device.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field

import torch
from torch.utils.data import DataLoader, Dataset

from featcache.images.decoding import DecodeError, Encoded, decode_on_device, open_picture, read_encoded
from featcache.images.transforms import Preprocessing, view_rng
from featcache.sources.datasets import SplitSamples
from featcache.store import SplitLayout
from tosca_foundation.processes import loader_worker_start
from tosca_foundation.text import reason


@dataclass
class Item:
    index: int
    clean: torch.Tensor | None
    views: torch.Tensor | None
    error: str | None
    encoded: Encoded | None = None


@dataclass
class Batch:
    """B samples: their global indices, B clean images then B*V views (sample-major).

    Before the device stage, `images` is None and `encoded` holds the B samples' bytes or pixels.
    """

    indices: list[int]
    images: torch.Tensor | None
    views: int
    errors: list[str]
    encoded: list[Encoded] = field(default_factory=list)

    def pin_memory(self) -> Batch:
        """Called by the DataLoader's pin-memory thread: page-locked, so host-to-device copies overlap."""
        images = self.images.pin_memory() if self.images is not None else None
        return Batch(self.indices, images, self.views, self.errors, [e.pin_memory() for e in self.encoded])


def _describe_error(samples: SplitSamples, i: int, exc: Exception) -> str:
    where = samples.describe(i)
    detail = type(exc).__name__ if where in str(exc) else reason(exc)
    return f"{where} ({detail})"


@dataclass(eq=False)
class SplitPictures:
    """The pictures of one split: its samples, how they are prepared, and the seed and number of
    the seeded views each training sample gets."""

    samples: SplitSamples
    prep: Preprocessing
    split: str
    seed: int
    views: int


@dataclass(eq=False)
class SampleImages(SplitPictures, Dataset):
    """Item i = the clean image of sample i and its V seeded views (V = 0 for test).

    With `device_stage`, item i is only its encoded bytes (or pixels); `DeviceImages` finishes it.
    """

    device_stage: bool = False

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> Item:
        try:
            if self.device_stage:
                return Item(i, None, None, None, read_encoded(self.samples, i, self.prep.resize_size))
            img = open_picture(self.samples, i, self.prep.decoder, self.prep.resize_size)
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
            return Item(i, None, None, _describe_error(self.samples, i, exc))


def collate(items: list[Item]) -> Batch:
    indices = [it.index for it in items]
    errors = [it.error for it in items if it.error is not None]
    if errors:
        return Batch(indices, None, 0, errors)
    if items[0].encoded is not None:
        return Batch(indices, None, 0, [], [it.encoded for it in items if it.encoded is not None])
    views = items[0].views.shape[0] if items[0].views is not None else 0
    parts = [torch.stack([it.clean for it in items if it.clean is not None])]
    if views:
        parts.append(torch.cat([it.views for it in items if it.views is not None]))
    return Batch(indices, torch.cat(parts), views, [])


@dataclass(eq=False)
class DeviceImages(SplitPictures):
    """The device stage: decode a batch's bytes on `device` (nvjpeg on CUDA), then resize, crop and
    draw the seeded views there; the same boxes and flips as the host stage."""

    device: torch.device

    def __call__(self, batch: Batch) -> Batch:
        if batch.errors or batch.images is not None:
            return batch
        try:
            decoded = decode_on_device(batch.encoded, self.device)
        except DecodeError as exc:
            i = batch.indices[exc.position]
            return Batch(batch.indices, None, 0, [f"{self.samples.describe(i)} ({exc.reason})"])
        parts = [self.prep.clean_batch(decoded)]
        if self.views:
            parts += [
                self.prep.view(img, view_rng(self.seed, self.split, self.samples.ids[i], k)).unsqueeze(0)
                for img, i in zip(decoded, batch.indices, strict=True)
                for k in range(self.views)
            ]
        return Batch(batch.indices, torch.cat(parts), self.views, [])


def chunk_batches(layout: SplitLayout, chunks: list[int], batch_size: int) -> list[list[int]]:
    """Sample indices of the given chunks, cut into batches that start at each chunk's start."""
    batches = []
    for chunk in chunks:
        sl = layout.chunk_slice(chunk)
        batches += [
            list(range(s, min(s + batch_size, sl.stop))) for s in range(sl.start, sl.stop, batch_size)
        ]
    return batches


def make_loader(
    dataset: SampleImages, batches: list[list[int]], workers: int, pin_memory: bool = False
) -> DataLoader:
    return DataLoader(
        dataset,
        batch_sampler=batches,
        num_workers=workers,
        collate_fn=collate,
        persistent_workers=False,
        prefetch_factor=4 if workers > 0 else None,
        pin_memory=pin_memory,
        worker_init_fn=functools.partial(loader_worker_start, os.getpid()),  # gone with this process
    )
