"""Entropy routing: per-sample routing on confident modules, and how batch routing differs."""

from __future__ import annotations

import numpy as np

from tosca_heads.router import ModuleOutputs, predict, route


def _constructed(n_per_task: int = 6, tasks: int = 3) -> tuple[ModuleOutputs, np.ndarray, np.ndarray]:
    """Module i is confident (low entropy) exactly on task i's samples and right there."""
    true_task = np.repeat(np.arange(tasks), n_per_task)
    labels = true_task * 2  # class 2t belongs to task t
    entropy = np.full((tasks, len(labels)), 2.0)
    predictions = np.full((tasks, len(labels)), -1)
    for i in range(tasks):
        entropy[i, true_task == i] = 0.1
        predictions[i, true_task == i] = labels[true_task == i]
    return ModuleOutputs(entropy, predictions), labels, true_task


def test_sample_routing_routes_every_sample_right() -> None:
    outputs, labels, true_task = _constructed()
    chosen = route("sample", outputs, labels, true_task)
    np.testing.assert_array_equal(chosen, true_task)
    assert (predict(outputs, chosen) == labels).all()
    np.testing.assert_array_equal(route("oracle", outputs, labels, true_task), true_task)


def test_batch_routing_differs_from_sample_routing_on_mixed_batches() -> None:
    outputs, labels, true_task = _constructed(n_per_task=40)
    sample = route("sample", outputs, labels, true_task)
    ordered = route("batch", outputs, labels, true_task)
    shuffled = route("batch_shuffled", outputs, labels, true_task, seed=0)
    # ordered batches of 48 over 3 x 40 class-sorted samples: batches 2 and 3 mix two tasks,
    # so one module serves both and some samples go to the wrong module
    assert (ordered != sample).any() and (shuffled != sample).sum() > (ordered != sample).sum()
    assert (ordered == true_task).mean() > (shuffled == true_task).mean()
