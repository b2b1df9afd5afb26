"""A baseline learns as a run drives it: task by task (`partial_fit` on each task's rows, or `fit`
on every seen class for one that is not incremental), each call returning the estimator, and after
each task `predict` gives one class id per row among the classes seen (the runner's own check,
`baseline_runs.checked_predictions`), the same ids when asked twice and from a second estimator
made alike, and better than chance on classes any method tells apart."""

from __future__ import annotations

from typing import Any

import numpy as np

from tosca_foundation.errors import UserError
from tosca_heads.conformance.shared import CLASSES, PER_TASK, TASKS, ToyStream, calling, refuse
from tosca_heads.method.protocol import StreamConfig
from tosca_heads.running.baseline_runs import checked_predictions

LEARNS = 0.5  # the least accuracy after the last task (chance: 1/6) on classes 4 standard deviations apart


def learned(cls: type, params: dict[str, Any], toy: ToyStream) -> tuple[Any, list[np.ndarray]]:
    """An estimator of `cls` (with `params`, on the CPU) driven through the toy stream as a run
    drives one, and its checked predictions on the seen test rows after each task."""
    name = cls.__name__
    estimator = calling("baseline", name, "__init__", lambda: cls(device="cpu", **params))
    stream = StreamConfig(PER_TASK, PER_TASK).task_stream(CLASSES)
    said: list[np.ndarray] = []
    for task in range(TASKS):
        if estimator.incremental:
            rows, learn = toy.task_rows(toy.train_y, task), "partial_fit"
        else:
            rows, learn = toy.seen_rows(toy.train_y, task), "fit"
        x, y = toy.train_x[rows], toy.train_y[rows]
        answer = calling("baseline", name, f"{learn} on task {task}", getattr(estimator, learn), x, y)
        if answer is not estimator:
            raise refuse(
                "baseline", name, f"{learn} returned {type(answer).__name__}, not the estimator (self)"
            )
        seen = toy.seen_rows(toy.test_y, task)
        pred = calling("baseline", name, f"predict after task {task}", estimator.predict, toy.test_x[seen])
        try:
            said.append(checked_predictions(name, pred, len(seen), task, stream))
        except UserError as exc:
            raise refuse("baseline", name, str(exc).removeprefix(f"baseline {name!r}: ")) from None
    return estimator, said


def check_learning(cls: type, params: dict[str, Any]) -> None:
    toy = ToyStream.draw()
    estimator, said = learned(cls, params, toy)
    name = cls.__name__
    again = np.asarray(calling("baseline", name, "predict", estimator.predict, toy.test_x))
    if not np.array_equal(again, said[-1]):
        raise refuse("baseline", name, "predict changed its answers when asked twice (it must not learn)")
    accuracy = float((said[-1] == toy.test_y).mean())
    if accuracy < LEARNS:
        raise refuse(
            "baseline",
            name,
            f"{accuracy:.0%} right after {TASKS} tasks on well-separated classes (chance {1 / CLASSES:.0%}; "
            f"every built-in has at least {LEARNS:.0%}): it does not learn from partial_fit's tasks",
        )
    _, twin = learned(cls, params, toy)
    if not all(np.array_equal(a, b) for a, b in zip(said, twin, strict=True)):
        raise refuse(
            "baseline",
            name,
            "two estimators made with the same parameters answer differently: seed its randomness from a parameter",
        )
