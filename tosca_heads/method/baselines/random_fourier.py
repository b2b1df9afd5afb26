"""What KLDA and RanDumb share: random Fourier features of an RBF kernel (Rahimi & Recht 2007),
phi(x) = sqrt(2 / D) cos(x W + b), W ~ N(0, 2 gamma) entrywise and b ~ U[0, 2 pi), so that
phi(x)'phi(y) ~ exp(-gamma ||x - y||^2); the scatter of the features about their class means summed
(which each keeps as a `closed_form.RidgeSystem`, in the smaller of its two forms). Products and
Gram sums are `linalg`'s tiled ones (the same bits on any thread count)."""

from __future__ import annotations

import numpy as np
import torch

from tosca_heads.method import linalg
from tosca_heads.method.baseline_estimators import Array, as_tensor


def cosine_features(
    features: Array, weights: torch.Tensor, offset: torch.Tensor, run: linalg.Run, device: str | torch.device
) -> torch.Tensor:
    """sqrt(2 / D) cos(x W + b) as float64 [n, D]: x W in float32 (as the authors' code on float32
    features), one product per (row block, column tile) on `run`'s threads, then widened."""
    x = as_tensor(features, device)
    blocks, tiles = linalg.row_blocks(x), linalg.column_tiles(weights)
    shifts = [offset[span] for span in linalg.spans(len(offset))]
    scale = float(np.sqrt(2.0 / len(offset)))
    pairs = [(b, t) for b in range(len(blocks)) for t in range(len(tiles))]
    flat = run(lambda p: (torch.cos(blocks[p[0]] @ tiles[p[1]] + shifts[p[1]]) * scale).double(), pairs)
    if not blocks:
        return torch.zeros(0, len(offset), dtype=torch.float64, device=weights.device)
    rows = [torch.cat(flat[b * len(tiles) : (b + 1) * len(tiles)], 1) for b in range(len(blocks))]
    return torch.cat(rows)


def class_means(h: torch.Tensor, labels: np.ndarray) -> tuple[np.ndarray, torch.Tensor, torch.Tensor]:
    """The classes in `labels` (sorted), their row counts and their means of `h` (float64)."""
    classes, counts = np.unique(labels, return_counts=True)
    means = torch.stack([h[torch.from_numpy(labels == c).to(h.device)].mean(0) for c in classes])
    return classes, torch.from_numpy(counts).to(h.device), means


def centred(h: torch.Tensor, labels: np.ndarray, classes: np.ndarray, means: torch.Tensor) -> torch.Tensor:
    """Each row minus its class's mean."""
    index = torch.from_numpy(np.searchsorted(classes, labels)).to(h.device)
    return h - means[index]
