"""Inference without task identity: entropy routing over the stored modules (method.md §5).

`sample`: per-sample argmin entropy (the honest default). `batch`: the reference code's, one
module per batch of 48 by mean entropy, on a test set ordered class by class in task order.
`batch_shuffled`: the same on shuffled batches (how much `batch` owes to the ordering).
`oracle`: the true task's module (the routing upper bound).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from tosca_heads.head import CosineClassifier
from tosca_heads.luca import LuCA

MODES = ("sample", "batch", "batch_shuffled", "oracle")
REFERENCE_BATCH = 48


@dataclass
class ModuleOutputs:
    """For each module i and test sample n: entropy H[i, n] and predicted class P[i, n]."""

    entropy: np.ndarray
    predictions: np.ndarray


@torch.no_grad()
def module_outputs(modules: list[LuCA], head: CosineClassifier, features: torch.Tensor) -> ModuleOutputs:
    entropies, predictions = [], []
    for module in modules:
        logits = head(module(features))
        p = torch.softmax(logits, dim=1)
        entropies.append(-(p * torch.log(p + 1e-9)).sum(1))
        predictions.append(logits.argmax(1))
    return ModuleOutputs(torch.stack(entropies).numpy(), torch.stack(predictions).numpy())


def route_sample(entropy: np.ndarray) -> np.ndarray:
    return entropy.argmin(0)


def route_batches(entropy: np.ndarray, order: np.ndarray, batch_size: int = REFERENCE_BATCH) -> np.ndarray:
    """One module per consecutive batch of `order` (sample positions), by mean entropy."""
    chosen = np.empty(entropy.shape[1], dtype=np.int64)
    for start in range(0, len(order), batch_size):
        members = order[start : start + batch_size]
        chosen[members] = entropy[:, members].mean(1).argmin()
    return chosen


def route(
    mode: str, outputs: ModuleOutputs, labels: np.ndarray, true_task: np.ndarray, seed: int = 0
) -> np.ndarray:
    """The module chosen for each sample under a routing mode."""
    if mode == "sample":
        return route_sample(outputs.entropy)
    if mode == "batch":
        return route_batches(outputs.entropy, np.argsort(labels, kind="stable"))
    if mode == "batch_shuffled":
        return route_batches(outputs.entropy, np.random.default_rng(seed).permutation(len(labels)))
    if mode == "oracle":
        return true_task.astype(np.int64)
    raise ValueError(f"unknown routing mode {mode!r}")


def predict(outputs: ModuleOutputs, chosen: np.ndarray) -> np.ndarray:
    return outputs.predictions[chosen, np.arange(len(chosen))]
