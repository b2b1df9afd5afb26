"""Inference without task identity: entropy routing over the stored modules (method.md §5).

`sample`: per-sample argmin entropy (the honest default). `batch`: the reference code's, one
module per batch of 48 by mean entropy, on a test set ordered class by class in task order.
`batch_shuffled`: the same on shuffled batches (how much `batch` owes to the ordering).
`oracle`: the true task's module (the routing upper bound).

Everything here works on tensors with a leading configuration axis G (a group of runs): entropy
and predictions are `[G, M, n]` for M modules and n test samples, choices are `[G, n]`.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

MODES = ("sample", "batch", "batch_shuffled", "oracle")
REFERENCE_BATCH = 48


def entropy_and_prediction(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """H = -sum p log(p + 1e-9) of softmax(logits) (the reference's formula), and argmax, over the last axis."""
    p = torch.softmax(logits, dim=-1)
    return -(p * torch.log(p + 1e-9)).sum(-1), logits.argmax(-1)


def route_sample(entropy: torch.Tensor) -> torch.Tensor:
    return entropy.argmin(1)


def route_batches(
    entropy: torch.Tensor, order: torch.Tensor, batch_size: int = REFERENCE_BATCH
) -> torch.Tensor:
    """One module per consecutive batch of `order` (sample positions), by mean entropy over the batch."""
    groups, modules, n = entropy.shape
    batches = -(-n // batch_size)
    padded = F.pad(entropy[:, :, order], (0, batches * batch_size - n))
    sums = padded.view(groups, modules, batches, batch_size).sum(-1)
    counts = torch.full((batches,), float(batch_size), device=entropy.device, dtype=sums.dtype)
    counts[-1] = n - (batches - 1) * batch_size
    best = (sums / counts).argmin(1)  # [G, batches]
    chosen = torch.empty(groups, n, dtype=torch.long, device=entropy.device)
    chosen[:, order] = best.repeat_interleave(batch_size, dim=1)[:, :n]
    return chosen


def route(
    mode: str,
    entropy: torch.Tensor,
    true_task: torch.Tensor,
    class_ordered: torch.Tensor,
    shuffled: torch.Tensor,
) -> torch.Tensor:
    """The module chosen for each sample under a routing mode, for every configuration.

    class_ordered / shuffled: the sample positions in the reference's class-by-class test order and
    in a shuffled order (the batches of `batch` and `batch_shuffled`)."""
    if mode == "sample":
        return route_sample(entropy)
    if mode == "batch":
        return route_batches(entropy, class_ordered)
    if mode == "batch_shuffled":
        return route_batches(entropy, shuffled)
    if mode == "oracle":
        return true_task.long().expand(entropy.shape[0], -1)
    raise ValueError(f"unknown routing mode {mode!r}")


def predict(predictions: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
    """Each sample's class from its chosen module: [G, M, n] and [G, n] -> [G, n]."""
    return predictions.gather(1, chosen.unsqueeze(1)).squeeze(1)


def shuffled_order(n: int, seed: int) -> np.ndarray:
    """The shuffled test order of `batch_shuffled` after task `seed`."""
    return np.random.default_rng(seed).permutation(n)
