"""The accuracies every scenario's figures are made of, from a plan and its answers (the class id
each evaluation row was given at each step): one place, so two scenarios never count differently."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tosca_heads.method.scenarios.plan import ScenarioPlan


def step_accuracy(
    plan: ScenarioPlan, answers: Sequence[np.ndarray], step: int, rows: np.ndarray | None = None
) -> float:
    """Accuracy of step `step`'s answers over its evaluation rows (or the subset `rows` of them);
    nan where there is no row to count."""
    evaluated = plan.steps[step].eval_rows
    keep = np.ones(len(evaluated), dtype=bool) if rows is None else np.isin(evaluated, rows)
    if not keep.any():
        return float("nan")
    truth = plan.test_ids[evaluated[keep]]
    return float((np.asarray(answers[step])[keep] == truth).mean())


def curve(plan: ScenarioPlan, answers: Sequence[np.ndarray]) -> list[float]:
    """Accuracy after each step over that step's evaluation rows."""
    return [step_accuracy(plan, answers, s) for s in range(len(plan.steps))]


def harmonic_mean(a: float, b: float) -> float:
    """2ab / (a + b); 0 where both are 0."""
    return 0.0 if a + b == 0 else 2 * a * b / (a + b)


def last_step_of_each_task(plan: ScenarioPlan) -> list[int]:
    """The index of the last step of each task (a task's end-of-task evaluation)."""
    last: dict[int, int] = {}
    for s, step in enumerate(plan.steps):
        last[step.task] = s
    return [last[t] for t in sorted(last)]
