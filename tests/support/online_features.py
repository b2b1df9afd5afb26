"""An online feature source: runs the frozen backbone on the images whenever features are asked
for, as the reference code does every epoch (decoding with the store's decoder, on the CPU). It
answers the questions of `tosca_heads.method.features.CachedFeatures`, so the two swap under one
trainer: the cache must change nothing but speed.
"""

from __future__ import annotations

import numpy as np
import torch

from featcache.images.decoding import open_picture
from featcache.images.transforms import Preprocessing, view_rng
from featcache.pipeline.mapper import FeatureMapper
from featcache.sources.datasets import SplitSamples


class OnlineFeatures:
    def __init__(
        self,
        mapper: FeatureMapper,
        splits: dict[str, SplitSamples],
        prep: Preprocessing,
        seed: int,
        views: int,
    ):
        self.mapper, self.splits, self.prep, self.seed, self.views = mapper, splits, prep, seed, views
        self.images_forwarded = 0

    def _forward(self, images: list[torch.Tensor]) -> torch.Tensor:
        self.images_forwarded += len(images)
        return torch.from_numpy(self.mapper(torch.stack(images)))

    def epoch_features(self, rows: np.ndarray, epoch: int) -> torch.Tensor:
        samples = self.splits["train"]
        if not self.views:
            return self.clean("train", rows)
        k = epoch % self.views
        return self._forward(
            [
                self.prep.view(
                    open_picture(samples, i, self.prep.decoder),
                    view_rng(self.seed, "train", samples.ids[i], k),
                )
                for i in rows
            ]
        )

    def clean(self, split: str, rows: np.ndarray) -> torch.Tensor:
        samples = self.splits[split]
        return self._forward([self.prep.clean(open_picture(samples, i, self.prep.decoder)) for i in rows])
