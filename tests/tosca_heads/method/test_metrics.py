"""The continual-learning metrics on accuracy matrices worked out by hand: row t holds the
accuracy on each task block seen so far after training task t."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tosca_heads.method.metrics import (
    accuracy,
    average_incremental_accuracy,
    block_accuracies,
    forgetting,
    last_accuracy,
    summarise,
)

pytestmark = pytest.mark.cpu_reference

# three tasks: block 0 falls from 0.9 to 0.6, block 1 peaks at 0.8 and ends at 0.7
MATRIX = [[0.9], [0.8, 0.8], [0.6, 0.7, 0.95]]
CURVE = [0.9, 0.8, 0.75]  # A_t: accuracy over all test samples seen after task t


def test_accuracy_and_blocks() -> None:
    pred, labels = np.array([0, 1, 1, 2, 2, 2]), np.array([0, 1, 0, 2, 2, 1])
    assert accuracy(pred, labels) == pytest.approx(4 / 6)
    assert math.isnan(accuracy(pred[:0], labels[:0]))  # no samples: not a number, never 0 or 1
    task_of = np.array([0, 0, 0, 1, 1, 1])
    assert block_accuracies(pred, labels, task_of, 2) == pytest.approx([2 / 3, 2 / 3])
    assert math.isnan(block_accuracies(pred, labels, task_of, 3)[2])  # a block not seen yet


def test_average_and_last() -> None:
    assert average_incremental_accuracy(CURVE) == pytest.approx((0.9 + 0.8 + 0.75) / 3)
    assert last_accuracy(CURVE) == 0.75


def test_forgetting_is_the_mean_drop_from_each_old_blocks_best() -> None:
    # block 0: best 0.9 before the last stage, 0.6 at it (0.3); block 1: best 0.8, ends 0.7 (0.1)
    assert forgetting(MATRIX) == pytest.approx((0.3 + 0.1) / 2)
    assert forgetting([[0.9]]) == 0.0  # one task: nothing to forget
    assert forgetting([[0.5], [0.7, 0.9]]) == pytest.approx(-0.2)  # a block that improved counts negative


def test_summarise_has_one_shape_with_and_without_a_router() -> None:
    routed = summarise(CURVE, MATRIX, routing=[1.0, 0.9, 0.85])
    plain = summarise(CURVE, MATRIX)
    assert set(routed) == set(plain)
    assert routed["A_bar"] == pytest.approx(0.8166666) and routed["A_last"] == 0.75
    assert routed["forgetting"] == pytest.approx(0.2) and routed["routing_accuracy"] == 0.85
    assert plain["routing_accuracy"] is None and plain["routing_accuracy_t"] is None
    assert routed["accuracy_matrix"] == MATRIX
