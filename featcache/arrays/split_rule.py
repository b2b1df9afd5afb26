"""The train/test split of arrays that come without one: a seeded, stratified rule. Each class's
rows are shuffled by a generator seeded with (seed, class), so a class's split does not depend on
the other classes, the thread count or the machine; `round(fraction * rows)` of them go to test,
at least one and never all (a class of one row keeps it in train, and the import refuses it)."""

from __future__ import annotations

import numpy as np


def stratified_test_rows(labels: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """True for the rows that go to test (`fraction` in (0, 1) and `seed` >= 0, checked where the
    request came in)."""
    test = np.zeros(len(labels), dtype=bool)
    for label in np.unique(labels):
        rows = np.flatnonzero(labels == label)
        shuffled = rows[np.random.default_rng([seed, int(label)]).permutation(len(rows))]
        count = min(max(1, round(fraction * len(rows))), len(rows) - 1)
        test[shuffled[:count]] = True
    return test
