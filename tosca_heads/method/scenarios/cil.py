"""`cil`, tosca's own scenario (disjoint classes, every training image, the class-incremental
protocol of method.md §2), and `til`, the same stream with the task id told at test (Mammoth's
Task-IL beside Class-IL; van de Ven & Tolias, "Three scenarios for continual learning", 2019):
a learner answers among its task's classes only, so the told-the-task figure, a reference in
`cil`, is the honest one there."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from tosca_foundation.errors import UserValueError
from tosca_heads.method.baseline_registry import Interval
from tosca_heads.method.protocol import DEFAULT_ORDER_SEED, class_order, default_stream
from tosca_heads.method.scenarios.figures import curve, last_step_of_each_task, step_accuracy
from tosca_heads.method.scenarios.plan import ScenarioPlan, Step, first_met_ids, rows_of, task_of_rows
from tosca_heads.method.scenarios.registry import Scenario, ScenarioParam, StoreLabels, register_scenario

SPLIT_PARAMS = (
    ScenarioParam(
        "init_cls", int, 0, Interval(0, None), "classes of the first task (0: the dataset's split)"
    ),
    ScenarioParam(
        "increment", int, 0, Interval(0, None), "classes of each later task (0: the dataset's split)"
    ),
    ScenarioParam(
        "order_seed", int, DEFAULT_ORDER_SEED, Interval(0, 2**32, closed="left"), "seed of the class order"
    ),
)
INCREMENTAL_FIGURES = {
    "A_last": "accuracy over every seen class's test images after the last task",
    "A_bar": "mean over tasks of the accuracy after each task",
    "forgetting": "mean over earlier tasks of (best accuracy on it before the end - accuracy on it at the end)",
}


def disjoint_plan(
    name: str, store: StoreLabels, init_cls: int, increment: int, order_seed: int
) -> ScenarioPlan:
    """The class-incremental stream: the classes in the seeded order (the reference code's), a first
    task of `init_cls`, tasks of `increment`, every training image; after each task the test images
    of every class seen."""
    classes = np.unique(np.concatenate([store.train_labels, store.test_labels]))
    if not init_cls or not increment:
        split = default_stream(store.dataset, len(classes))
        init_cls, increment = init_cls or split.init_cls, increment or split.increment
    if init_cls > len(classes) or (len(classes) - init_cls) % increment:
        raise UserValueError(
            f"{name}: {len(classes)} classes do not split into a first task of {init_cls} and tasks of {increment}"
        )
    order = classes[class_order(len(classes), order_seed)]
    train_ids, _ = first_met_ids(store.train_labels, order)
    test_ids, _ = first_met_ids(store.test_labels, order)
    bounds = [0, init_cls, *range(init_cls + increment, len(classes) + 1, increment)]
    task_classes = tuple(np.arange(lo, hi) for lo, hi in itertools.pairwise(bounds))
    steps = tuple(
        Step(t, rows_of(train_ids, classes_t), rows_of(test_ids, np.arange(classes_t[-1] + 1)))
        for t, classes_t in enumerate(task_classes)
    )
    return ScenarioPlan(
        name,
        steps,
        train_ids,
        test_ids,
        task_classes,
        task_of_rows(test_ids, task_classes),
        facts={"init_cls": init_cls, "increment": increment, "order": order.tolist()},
    )


def incremental_figures(plan: ScenarioPlan, answers: Sequence[np.ndarray]) -> dict[str, float]:
    """A_last, A_bar and forgetting from the answers after each task."""
    accuracies = curve(plan, answers)
    ends = last_step_of_each_task(plan)
    per_task = [
        [step_accuracy(plan, answers, ends[t], np.flatnonzero(plan.test_task == j)) for j in range(t + 1)]
        for t in range(len(ends))
    ]
    drops = [
        max(per_task[t][j] for t in range(j, len(ends) - 1)) - per_task[-1][j] for j in range(len(ends) - 1)
    ]
    return {
        "A_last": accuracies[ends[-1]],
        "A_bar": float(np.mean([accuracies[s] for s in ends])),
        "forgetting": float(np.mean(drops)) if drops else 0.0,
    }


@register_scenario
class ClassIncremental(Scenario):
    """Disjoint classes, every training image, tasks of B-n Inc-k (tosca's default scenario)."""

    name = "cil"
    summary = "class-incremental: disjoint classes, every training image, no task id at test (the default)"
    paper = "Rebuffi et al., iCaRL, CVPR 2017; TOSCA's protocol (method.md §2)"
    figures = INCREMENTAL_FIGURES
    params = SPLIT_PARAMS

    @classmethod
    def plan(cls, store: StoreLabels, **values: Any) -> ScenarioPlan:
        return disjoint_plan(cls.name, store, **cls.checked(values, store.dataset))

    @classmethod
    def figures_of(cls, plan: ScenarioPlan, answers: Sequence[np.ndarray]) -> dict[str, float]:
        return incremental_figures(plan, answers)


@register_scenario
class TaskIncremental(ClassIncremental):
    """The class-incremental stream, with each test image's task id told: answers among its task's
    classes only."""

    name = "til"
    summary = "task-incremental: cil's stream, the task id told at test (answers among its task's classes)"
    paper = "van de Ven & Tolias, Three scenarios for continual learning, arXiv:1904.07734, 2019"
    told_task = True
