"""Bad images, found before a store's layout is fixed.

Why before: a store's rows are fixed when it is created, so an image that cannot be read can only
be left out before then. Without `--skip-bad-images` an unreadable image stops the extraction
with one line naming it (an empty file is caught here, before anything is written; any other
when its chunk is decoded). With it, every image is decoded once up front, by the store's
decoder, and the unreadable ones are left out and recorded in the store's attrs.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from torch.utils.data import DataLoader, Dataset

from featcache.images.decoding import open_picture
from featcache.images.transforms import Preprocessing
from featcache.sources.datasets import SplitSamples
from tosca_foundation.errors import UserError
from tosca_foundation.processes import loader_worker_start
from tosca_foundation.text import image_name, reason


@dataclass(frozen=True)
class BadImage:
    split: str
    sample_id: str
    reason: str

    def attrs(self) -> dict[str, str]:
        return {"split": self.split, "id": self.sample_id, "reason": self.reason}

    def shown(self) -> str:
        return image_name(self.split, self.sample_id)


def _path(samples: SplitSamples, i: int) -> Path | None:
    return samples.root / samples.ids[i] if samples.root is not None and samples.arrays is None else None


def empty_files(samples: SplitSamples) -> list[int]:
    """Indices of zero-byte image files (no image at all, whatever the decoder)."""
    found = []
    for i in range(len(samples)):
        path = _path(samples, i)
        if path is not None and path.stat().st_size == 0:
            found.append(i)
    return found


def refuse_empty_files(splits: dict[str, SplitSamples]) -> None:
    for samples in splits.values():
        empty = empty_files(samples)
        if empty:
            more = f" (and {len(empty) - 1} more)" if len(empty) > 1 else ""
            raise UserError(
                f"empty image file (0 bytes): {samples.describe(empty[0])}{more}; remove it, or pass "
                "--skip-bad-images to leave unreadable images out"
            )


class _Probe(Dataset):
    """Item i: None when sample i decodes and its size is one the preprocessing takes, else why
    not (one line)."""

    def __init__(self, samples: SplitSamples, prep: Preprocessing):
        self.samples, self.prep = samples, prep

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> tuple[int, str | None]:
        path = _path(self.samples, i)
        try:
            if path is not None and path.stat().st_size == 0:
                return i, "empty file (0 bytes)"
            open_picture(self.samples, i, self.prep.decoder, self.prep.resize_size)
        except Exception as exc:  # whatever the decoder raises is the reason it is bad
            return i, reason(exc, most=120)  # one line, without PIL's object reprs
        return i, None


def _as_list(items: list[tuple[int, str | None]]) -> list[tuple[int, str | None]]:
    return items


def find_bad_images(
    split: str, samples: SplitSamples, prep: Preprocessing, workers: int
) -> list[tuple[int, BadImage]]:
    """(index, what is wrong) of every sample the preprocessing's decoder cannot read, or refuses
    from its header (over the pixel limit, too thin to resize), in index order."""
    loader = DataLoader(
        _Probe(samples, prep),
        batch_size=16,
        num_workers=workers,
        collate_fn=_as_list,
        prefetch_factor=4 if workers > 0 else None,
        worker_init_fn=functools.partial(loader_worker_start, os.getpid()),  # gone with this process
    )
    bad = []
    for items in loader:
        bad += [(i, BadImage(split, samples.ids[i], reason)) for i, reason in items if reason is not None]
    return sorted(bad, key=lambda pair: pair[0])


def without(samples: SplitSamples, drop: list[int]) -> SplitSamples:
    keep = np.setdiff1d(np.arange(len(samples)), np.asarray(drop, dtype=np.int64))
    return samples.subset(keep)


def drop_ids(samples: SplitSamples, ids: set[str]) -> SplitSamples:
    """The samples minus the given ids (a store's recorded skip list, reused when it resumes)."""
    return without(samples, [i for i, sample_id in enumerate(samples.ids) if sample_id in ids])
