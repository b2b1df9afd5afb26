"""The methods whose final state is the joint solution (their class says `order_free = True`: ncm
(SimpleCIL), ridge, SLDA, FeCAM, KLDA, RanDumb, ACIL) end where a one-shot fit on all the training
data ends, whatever the class order and the increment: the same scores to float tolerance and the
same A_last. A knob a method chooses on its first task (the ridge by RanPAC's rule, RanDumb's gamma by
scikit-learn's 'scale') depends on that task, and SLDA is order-free in its exact update only (the
authors' weights each sample by the global count before it), so it is fixed here (its class's `tuned` keyword and
its `order_free_given`): the order-freedom is the state's.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pytest
from support.stores import synthetic_store

from tosca_heads.method.baseline_registry import BASELINES, arguments
from tosca_heads.method.protocol import StreamConfig
from tosca_heads.requests.plan import FitPlan
from tosca_heads.running.baseline_runs import run_baseline

ORDER_FREE = [name for name in BASELINES if getattr(BASELINES[name], "order_free", False)]
FIXED = {
    "ridge": 1e-2,
    "gamma": 0.02,
    "update": "exact",
    "sigma": 0.02,
}  # a tuned knob's or an order-dependent value's, fixed here
SPLITS = [StreamConfig(2, 2, 1993), StreamConfig(4, 1, 7), StreamConfig(3, 3, 0)]


def _keywords(method: str) -> dict:
    """The method's defaults, small where its defaults are costly here, its tuned knob fixed."""
    values = arguments(method, {})
    for name, value in values.items():
        if name in ("dim", "projection_dim", "buffer_size", "embed_dim", "rff_dim") and isinstance(
            value, int
        ):
            values[name] = min(value, 512)
    cls = BASELINES[method]
    for knob in (getattr(cls, "tuned", None), *getattr(cls, "order_free_given", ())):
        if knob and knob in inspect.signature(cls).parameters:
            values[knob] = FIXED[knob]
    return values


def test_the_order_free_methods_are_the_seven_the_maths_says() -> None:
    expected = {"simplecil", "ridge", "slda", "fecam", "klda", "randumb", "acil"}
    assert expected <= set(ORDER_FREE), f"not order-free: {sorted(expected - set(ORDER_FREE))}"


@pytest.mark.parametrize("method", ORDER_FREE)
def test_the_final_state_is_the_joint_one_whatever_the_order_and_increment(
    tmp_path: Path, method: str
) -> None:
    store = synthetic_store(
        tmp_path / "s.zarr", classes=12, per_class=24, test_per_class=12, dim=20, spread=1.3
    )
    keywords = _keywords(method)
    lasts = []
    for split in SPLITS:
        result = run_baseline(method, FitPlan.build(store, split), **keywords)
        lasts.append(result.metrics["A_last"])
    assert max(lasts) - min(lasts) <= 1 / 144 + 1e-12, lasts  # at most one test image apart
    # the streamed state scores every test row as a one-shot fit on all training rows does
    x, y = np.asarray(store.features("train")), np.asarray(store.labels("train"))
    test = np.asarray(store.features("test"))
    streamed = BASELINES[method](**keywords)
    for task in range(4):
        rows = (y >= 3 * task) & (y < 3 * task + 3)
        streamed.partial_fit(x[rows], y[rows])
    joint = BASELINES[method](**keywords).partial_fit(x, y)
    a, b = streamed.decision_function(test), joint.decision_function(test)
    scale = float(np.abs(b).max())
    assert np.abs(a - b).max() <= 1e-4 * scale, f"{method}: {np.abs(a - b).max() / scale:.2e} apart"
    assert (a.argmax(1) == b.argmax(1)).mean() >= 0.99
