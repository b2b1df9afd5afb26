"""`blurry`: Si-Blurry (Moon et al., "Online Continual Learning on Class Incremental Blurry Task
Configuration with Anytime Inference", ICCV 2023), the setting GACL (Zhuang et al., NeurIPS 2024)
is measured in: N% of the classes are disjoint (each in one task), the rest blurry (a class's
images in its own task, except M% of the blurry images scattered over every task), with the
split points of both drawn at random, so tasks differ in size and overlap in classes.

The stream is the authors' `OnlineSampler` with `varing_NM` (their `--rnd_NM`, which GACL's
scripts pass), written out with the same `torch.Generator` draws in the same order, so a seed
gives their task indices on a store whose rows are in their dataset's order. Evaluation is theirs:
every `eval_period` training images, accuracy on the test images of every class exposed so far;
A_AUC is the mean of those accuracies (the area under the accuracy curve over equally spaced
points), A_last the accuracy after the whole stream. Defaults are GACL's on CIFAR-100 (5 tasks,
N = 50, M = 10, evaluation every 1,000 images, seeds 1 to 5)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import torch

from tosca_heads.method.baseline_registry import Interval
from tosca_heads.method.scenarios.figures import curve
from tosca_heads.method.scenarios.plan import ScenarioPlan, Step, first_met_ids, rows_of, task_of_rows
from tosca_heads.method.scenarios.registry import Scenario, ScenarioParam, StoreLabels, register_scenario


def _split_points(count: int, parts: int, generator: torch.Generator) -> list[int]:
    """[0, sorted random cut points, count]: the authors' torch.randint(0, count, (parts-1,)) sorted."""
    cuts = torch.randint(0, count, (parts - 1,), generator=generator).sort().values.tolist()
    return [0, *cuts, count]


def si_blurry_tasks(
    targets: np.ndarray, num_tasks: int, disjoint_percent: int, blurry_percent: int, seed: int
) -> list[list[int]]:
    """Each task's training rows in stream order: the authors' OnlineSampler(varing_NM=True).

    `targets` are class indices 0..C-1 in the dataset's row order."""
    generator = torch.Generator().manual_seed(seed)
    num_classes = int(targets.max()) + 1
    disjoint_num = num_classes * disjoint_percent // 100
    disjoint_num = disjoint_num // num_tasks * num_tasks
    blurry_num = (num_classes - disjoint_num) // num_tasks * num_tasks
    class_order = torch.randperm(num_classes, generator=generator)
    disjoint_all = class_order[:disjoint_num].tolist()
    if disjoint_num > 0:
        cut = _split_points(disjoint_num, num_tasks, generator)
        disjoint = [disjoint_all[cut[i] : cut[i + 1]] for i in range(num_tasks)]
    else:
        disjoint = [[] for _ in range(num_tasks)]
    if blurry_num > 0:
        cut = _split_points(blurry_num, num_tasks, generator)
        blurry = [
            class_order[disjoint_num + cut[i] : disjoint_num + cut[i + 1]].tolist() for i in range(num_tasks)
        ]
    else:
        blurry = [[] for _ in range(num_tasks)]
    task_of_class = np.full(num_classes, -1, dtype=np.int64)
    is_disjoint = np.zeros(num_classes, dtype=bool)
    for j in range(num_tasks):
        task_of_class[disjoint[j]] = j
        is_disjoint[disjoint[j]] = True
    for j in range(num_tasks):  # the authors' loop checks task j's disjoint classes, then its blurry ones
        free = task_of_class[blurry[j]] < 0
        task_of_class[np.asarray(blurry[j], dtype=np.int64)[free]] = j
    disjoint_rows: list[list[int]] = [[] for _ in range(num_tasks)]
    blurry_rows: list[list[int]] = [[] for _ in range(num_tasks)]
    for i, target in enumerate(targets.tolist()):
        j = task_of_class[target]
        if j >= 0:
            (disjoint_rows if is_disjoint[target] else blurry_rows)[j].append(i)
    num_blurred = sum(len(rows) for rows in blurry_rows) * blurry_percent // 100
    if num_blurred > 0:
        cut = _split_points(num_blurred, num_tasks, generator)
        blurred: list[int] = []
        for i in range(num_tasks):
            take = cut[i + 1] - cut[i]
            blurred += blurry_rows[i][:take]
            blurry_rows[i] = blurry_rows[i][take:]
        shuffled = torch.tensor(blurred, dtype=torch.int64)[
            torch.randperm(len(blurred), generator=generator)
        ].tolist()
        for i in range(num_tasks):
            take = cut[i + 1] - cut[i]
            blurry_rows[i] += shuffled[:take]
            shuffled = shuffled[take:]
    tasks = []
    for i in range(num_tasks):
        rows = torch.tensor(disjoint_rows[i] + blurry_rows[i], dtype=torch.int64)
        tasks.append(rows[torch.randperm(len(rows), generator=generator)].tolist())
    return tasks


@register_scenario
class SiBlurry(Scenario):
    """Si-Blurry's stream: disjoint and blurry classes, tasks of random size, anytime evaluation."""

    name = "blurry"
    summary = "Si-Blurry: N% disjoint classes, M% of the rest's images blurred across tasks of random size"
    paper = (
        "Moon, Park, Kim, Kim, Hong & Park, Online Continual Learning on Class Incremental Blurry Task "
        "Configuration with Anytime Inference (Si-Blurry, MVP), ICCV 2023; GACL (Zhuang et al., NeurIPS 2024) uses it"
    )
    figures: ClassVar[Mapping[str, str]] = {
        "A_last": "accuracy on the test images of every exposed class after the whole stream",
        "A_AUC": "mean accuracy over the evaluation points (every eval_period training images)",
    }
    params = (
        ScenarioParam("tasks", int, 5, Interval(1, None), "tasks of the stream"),
        ScenarioParam("disjoint", float, 0.5, Interval(0, 1), "share N of the classes that are disjoint"),
        ScenarioParam(
            "blurry", float, 0.1, Interval(0, 1), "share M of the blurry classes' images scattered"
        ),
        ScenarioParam(
            "seed", int, 1, Interval(0, 2**63, closed="left"), "seed of the stream (the authors' rnd_seed)"
        ),
        ScenarioParam("eval_period", int, 1000, Interval(1, None), "training images between evaluations"),
    )

    @classmethod
    def plan(cls, store: StoreLabels, **values: Any) -> ScenarioPlan:
        v = cls.checked(values, store.dataset)
        classes, targets = np.unique(store.train_labels, return_inverse=True)
        tasks = si_blurry_tasks(
            targets, v["tasks"], round(100 * v["disjoint"]), round(100 * v["blurry"]), v["seed"]
        )
        stream = np.array([r for rows in tasks for r in rows], dtype=np.int64)
        task_of_row = np.repeat(np.arange(len(tasks)), [len(rows) for rows in tasks])
        exposed = classes[list(dict.fromkeys(targets[stream].tolist()))]  # first-met order
        train_ids, _ = first_met_ids(store.train_labels, exposed)
        test_ids, _ = first_met_ids(store.test_labels, exposed)
        points = list(range(v["eval_period"], len(stream) + 1, v["eval_period"]))
        ends = [*points] if points and points[-1] == len(stream) else [*points, len(stream)]
        steps, start, seen = [], 0, np.zeros(0, dtype=np.int64)
        for stop in ends:
            seen = np.unique(np.concatenate([seen, train_ids[stream[start:stop]]]))
            steps.append(Step(int(task_of_row[stop - 1]), stream[start:stop], rows_of(test_ids, seen)))
            start = stop
        task_classes = []
        met: set[int] = set()
        for rows in tasks:
            new = [c for c in dict.fromkeys(train_ids[rows].tolist()) if c not in met]
            met.update(new)
            task_classes.append(np.array(new, dtype=np.int64))
        facts = {
            **v,
            "task_sizes": [len(rows) for rows in tasks],
            "exposed_order": exposed.tolist(),
            "auc_steps": len(points),
        }
        return ScenarioPlan(
            cls.name,
            tuple(steps),
            train_ids,
            test_ids,
            tuple(task_classes),
            task_of_rows(test_ids, tuple(task_classes)),
            recurring=True,
            facts=facts,
        )

    @classmethod
    def figures_of(cls, plan: ScenarioPlan, answers: Sequence[np.ndarray]) -> dict[str, float]:
        accuracies = curve(plan, answers)
        points = int(plan.facts["auc_steps"]) or len(accuracies)  # type: ignore[call-overload]
        return {"A_last": accuracies[-1], "A_AUC": float(np.mean(accuracies[:points]))}
