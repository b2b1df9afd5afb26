"""A baseline whose class says `order_free = True` ends where a one-shot fit on every class ends:
the same predictions (at least 99% of test rows) and, where it has `decision_function`, the same
scores to 1e-4 of their scale (as tests/tosca_heads/method/baselines/test_order_free.py holds the
built-ins). A knob it chooses from its first task (its `tuned`, its `order_free_given`) depends on
that task, so it must be fixed in the parameters given, else this check is skipped."""

from __future__ import annotations

from typing import Any

import numpy as np

from tosca_heads.conformance.baseline_learning import learned
from tosca_heads.conformance.shared import ToyStream, calling, refuse

AGREE, SCORE_TOLERANCE = 0.99, 1e-4


def unfixed_knobs(cls: type, params: dict[str, Any]) -> list[str]:
    """The knobs chosen from the first task that `params` leaves to the class."""
    knobs = (getattr(cls, "tuned", None), *getattr(cls, "order_free_given", ()))
    return [knob for knob in knobs if knob and knob not in params]


def check_order_free(cls: type, params: dict[str, Any]) -> None:
    name = cls.__name__
    toy = ToyStream.draw()
    streamed, _ = learned(cls, params, toy)
    joint = calling("baseline", name, "__init__", lambda: cls(device="cpu", **params))
    calling("baseline", name, "partial_fit on every class", joint.partial_fit, toy.train_x, toy.train_y)
    a, b = (
        np.asarray(calling("baseline", name, "predict", e.predict, toy.test_x)) for e in (streamed, joint)
    )
    agree = float((a == b).mean())
    if agree < AGREE:
        raise refuse(
            "baseline",
            name,
            f"declares order_free = True, yet streamed task by task it agrees with a one-shot fit on {agree:.0%} "
            f"of test rows (at least {AGREE:.0%})",
        )
    if callable(getattr(cls, "decision_function", None)):
        s, t = (np.asarray(e.decision_function(toy.test_x), dtype=np.float64) for e in (streamed, joint))
        scale = float(np.abs(t).max()) or 1.0
        apart = float(np.abs(s - t).max()) / scale if s.shape == t.shape else float("inf")
        if apart > SCORE_TOLERANCE:
            raise refuse(
                "baseline",
                name,
                f"declares order_free = True, yet its streamed scores are {apart:.1e} of their scale from a "
                f"one-shot fit's (at most {SCORE_TOLERANCE:g})",
            )
