"""What a scenario makes of a store: the steps of its stream (training rows learned, then test
rows answered) and the facts its figures need (each test row's task, the classes of each task).

A scenario reads the store's labels (and domains) only: the features are never touched here, so
every scenario is a different reading of the same cached features (docs/scenarios.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Step:
    """One point of the stream: learn `train_rows` (train-split rows, in the order learned), then
    answer `eval_rows` (test-split rows). `task` is the task the rows belong to (a blurry stream
    has several evaluation points per task)."""

    task: int
    train_rows: np.ndarray
    eval_rows: np.ndarray


@dataclass(frozen=True)
class ScenarioPlan:
    """A scenario's reading of one store.

    - `steps`: the stream, in order;
    - `train_ids`, `test_ids`: each row's class id in the stream's numbering (classes numbered in
      the order they are first met; -1 for a row of no class the stream uses);
    - `task_classes`: the class ids each task introduces (task-incremental: the classes a told task
      id restricts the answer to);
    - `test_task`: each test row's task (-1: in none), what `til` tells the learner;
    - `recurring`: whether a class's rows may arrive in more than one task (blurry, dil): a method
      that learns each class once refuses such a plan;
    - `facts`: what the plan drew (a few-shot session's image ids, the blurry stream's classes),
      recorded beside the figures so a reader can redraw it.
    """

    scenario: str
    steps: tuple[Step, ...]
    train_ids: np.ndarray
    test_ids: np.ndarray
    task_classes: tuple[np.ndarray, ...]
    test_task: np.ndarray
    recurring: bool = False
    facts: dict[str, object] = field(default_factory=dict)

    @property
    def num_tasks(self) -> int:
        return len(self.task_classes)

    @property
    def num_classes(self) -> int:
        return int(max(self.train_ids.max(initial=-1), self.test_ids.max(initial=-1))) + 1

    def describe(self) -> str:
        """One line: '5 tasks, 10 evaluation points, 100 classes (blurry: classes recur)'."""
        points = "" if len(self.steps) == self.num_tasks else f", {len(self.steps)} evaluation points"
        recur = " (classes recur across tasks)" if self.recurring else ""
        return f"{self.scenario}: {self.num_tasks} tasks{points}, {self.num_classes} classes{recur}"


def first_met_ids(labels: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Class ids numbered by `order` (order[i] = the original label of class id i): each label's id,
    -1 for a label not in `order`; returns (ids, order)."""
    position = np.full(int(max(labels.max(initial=-1), order.max(initial=-1))) + 1, -1, dtype=np.int64)
    position[order] = np.arange(len(order))
    return position[labels], order


def rows_of(ids: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Rows whose class id is among `classes`, in row order."""
    return np.flatnonzero(np.isin(ids, classes))


def task_of_rows(ids: np.ndarray, task_classes: tuple[np.ndarray, ...]) -> np.ndarray:
    """Each row's task (the task that introduces its class), -1 for a row of no task."""
    task = np.full(len(ids), -1, dtype=np.int64)
    for t, classes in enumerate(task_classes):
        task[np.isin(ids, classes)] = t
    return task
