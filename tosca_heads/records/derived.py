"""Figures from the kept answers: every figure tosca shows is computed here, when read, from the
per-image answers a cell keeps (`records.outcomes`, `records.cell`), never read from a file.

A metrics block (a router's or a method's on one split) holds A_t and the accuracy matrix, every
figure of `metrics.figures()` computed from them (A_bar, A_last, forgetting, a plug-in's), their
intervals and standard errors (`uncertainty.intervals_of`), and the images they rest on;
`expected_block` makes it exactly as the views are written (`metrics.summarise`, then
`records.with_intervals`). The routing accuracy is worked out from the kept routes (`routing_of`).

The intervals of every block of one split on the same images come from one bootstrap
(`intervals_of` over them all, grouped by `image_key`): its draws depend only on the seed and the
classes' sizes, so a block's intervals are the same whichever others are computed with it
(`cell.figures_of_many`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from tosca_heads.method.metrics import summarise
from tosca_heads.method.uncertainty import Interval, Outcomes, accuracy_interval
from tosca_heads.records import with_intervals

Block = dict[str, Any]


def curves_of(outcome: Outcomes) -> tuple[list[float], list[list[float]]]:
    """A_t after each task (the accuracy over the images of every class seen) and the accuracy
    matrix (row t: the accuracy on each task's images after task t), from per-image answers."""
    right = outcome.correct.astype(np.int64)
    curve, matrix = [], []
    for t in range(outcome.tasks):
        seen = outcome.task <= t
        curve.append(float(right[t][seen].sum() / seen.sum()) if seen.any() else math.nan)
        row = []
        for j in range(t + 1):
            block = outcome.task == j
            row.append(float(right[t][block].sum() / block.sum()) if block.any() else math.nan)
        matrix.append(row)
    return curve, matrix


def routing_of(outcome: Outcomes) -> list[float] | None:
    """The routing accuracy after each task (the images of every class seen that the router sent
    to their own task's module), from the kept routes (None: a method without a router)."""
    if outcome.routed is None:
        return None
    routed = outcome.routed.astype(np.int64)
    return [
        float(routed[t][outcome.task <= t].sum() / (outcome.task <= t).sum()) for t in range(outcome.tasks)
    ]


def expected_block(outcome: Outcomes, found: Mapping[str, Interval] | None) -> Block:
    """The metrics block tosca writes for these answers (`found`: their intervals)."""
    curve, matrix = curves_of(outcome)
    routed = routing_of(outcome)
    block = summarise(curve, matrix, routed)
    interval = None
    if routed is not None and found:
        interval = accuracy_interval(routed[-1], next(iter(found.values())).images)
    return with_intervals(block, dict(found) if found else None, interval)


def image_key(split: str, outcome: Outcomes) -> tuple[str, str]:
    """Blocks on the same images share one bootstrap (`intervals_of` requires the same images)."""
    digest = hashlib.sha256(outcome.rows.tobytes() + b"|" + outcome.classes.tobytes()).hexdigest()
    return split, digest
