"""What routed evaluation computes from each module's logits: entropy, prediction and energy, the
chosen module's class, and the shuffled test order of `batch_shuffled`.

Everything works on tensors with a leading configuration axis G: entropy and predictions are
`[G, M, n]` for M modules and n test samples, choices `[G, n]`.
"""

from __future__ import annotations

import numpy as np
import torch

from tosca_heads.method.ties import TIED, top_index


def module_scores(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Over the last axis: entropy H = -sum p log(p + 1e-9) of softmax(logits) (the reference's
    formula), the argmax class (`TIED` where two classes or more share the top logit: a tie is
    wrong, `method.ties`), and the free energy -logsumexp(logits)."""
    p = torch.softmax(logits, dim=-1)
    return -(p * torch.log(p + 1e-9)).sum(-1), top_index(logits), -torch.logsumexp(logits, dim=-1)


def predict(predictions: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
    """Each sample's class from its chosen module: [G, M, n] and [G, n] -> [G, n]; `TIED` where
    the chosen module's top was tied or the route was (a route of `TIED`: no module chosen)."""
    picked = chosen.clamp(min=0)
    answer = predictions.gather(1, picked.unsqueeze(1)).squeeze(1)
    return answer.masked_fill(chosen < 0, TIED)


def shuffled_order(n: int, seed: int) -> np.ndarray:
    """The shuffled test order of `batch_shuffled` after task `seed`."""
    return np.random.default_rng(seed).permutation(n)
