"""Entropy routing: per-sample routing on confident modules, and how batch routing differs."""

from __future__ import annotations

import numpy as np
import torch

from tosca_heads.router import entropy_and_prediction, predict, route, route_batches


def _constructed(n_per_task: int = 6, tasks: int = 3) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Module i is confident (low entropy) exactly on task i's samples and right there; one configuration."""
    true_task = torch.arange(tasks).repeat_interleave(n_per_task)
    labels = true_task * 2  # class 2t belongs to task t
    entropy = torch.full((1, tasks, len(labels)), 2.0)
    predictions = torch.full((1, tasks, len(labels)), -1)
    for i in range(tasks):
        entropy[0, i, true_task == i] = 0.1
        predictions[0, i, true_task == i] = labels[true_task == i]
    return entropy, predictions, true_task


def _route(mode: str, entropy: torch.Tensor, true_task: torch.Tensor, seed: int = 0) -> torch.Tensor:
    n = entropy.shape[-1]
    shuffled = torch.from_numpy(np.random.default_rng(seed).permutation(n))
    return route(mode, entropy, true_task, torch.arange(n), shuffled)


def test_sample_routing_routes_every_sample_right() -> None:
    entropy, predictions, true_task = _constructed()
    chosen = _route("sample", entropy, true_task)
    assert torch.equal(chosen[0], true_task)
    assert torch.equal(predict(predictions, chosen)[0], true_task * 2)
    assert torch.equal(_route("oracle", entropy, true_task)[0], true_task)


def test_batch_routing_differs_from_sample_routing_on_mixed_batches() -> None:
    entropy, _, true_task = _constructed(n_per_task=40)
    sample = _route("sample", entropy, true_task)[0]
    ordered = _route("batch", entropy, true_task)[0]
    shuffled = _route("batch_shuffled", entropy, true_task)[0]
    # ordered batches of 48 over 3 x 40 class-sorted samples: batches 2 and 3 mix two tasks,
    # so one module serves both and some samples go to the wrong module
    assert (ordered != sample).any() and (shuffled != sample).sum() > (ordered != sample).sum()
    assert (ordered == true_task).float().mean() > (shuffled == true_task).float().mean()


def test_batch_routing_is_the_reference_loop_for_every_configuration() -> None:
    """The vectorised batch means (last batch partial) pick what a plain loop over batches picks."""
    rng = np.random.default_rng(3)
    entropy = torch.from_numpy(rng.random((3, 4, 101)).astype(np.float32))
    order = torch.from_numpy(rng.permutation(101))
    chosen = route_batches(entropy, order, batch_size=48)
    for g in range(3):
        expected = np.empty(101, dtype=np.int64)
        for start in range(0, 101, 48):
            members = order[start : start + 48].numpy()
            expected[members] = entropy[g][:, members].numpy().mean(1).argmin()
        np.testing.assert_array_equal(chosen[g].numpy(), expected)


def test_entropy_is_the_reference_formula() -> None:
    logits = torch.tensor([[[2.0, 0.0, -1.0], [0.0, 0.0, 0.0]]])
    entropy, prediction = entropy_and_prediction(logits)
    p = torch.softmax(logits, -1)
    torch.testing.assert_close(entropy, -(p * torch.log(p + 1e-9)).sum(-1))
    assert prediction.tolist() == [[0, 0]]
    assert abs(float(entropy[0, 1]) - np.log(3)) < 1e-6  # uniform over 3 classes
