"""`fscil`: few-shot class-incremental learning as TOPIC (Tao et al., CVPR 2020) and CEC (Zhang et
al., CVPR 2021) define it: a base session with every training image of its classes, then sessions
of N new classes with K training images each (N-way K-shot); after each session, accuracy on the
test images of every class seen.

The classes are taken in label order (TOPIC's: CIFAR-100's first 60 labels are its base classes).
The authors' session index files (which images are the shots) cannot be had offline: the shots are
drawn here by `seed` from each class's training images and recorded in the plan's facts, so a run
redraws the same shots but not TOPIC's."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from tosca_foundation.errors import UserValueError
from tosca_heads.method.baseline_registry import Interval
from tosca_heads.method.scenarios.figures import curve, harmonic_mean, step_accuracy
from tosca_heads.method.scenarios.plan import ScenarioPlan, Step, first_met_ids, rows_of, task_of_rows
from tosca_heads.method.scenarios.registry import Scenario, ScenarioParam, StoreLabels, register_scenario

TOPIC_CIFAR = {"base_classes": 60, "ways": 5, "shots": 5, "sessions": 8}


@register_scenario
class FewShotClassIncremental(Scenario):
    """A base session, then N-way K-shot sessions; the shots drawn by a seed."""

    name = "fscil"
    summary = "few-shot class-incremental: a base session of every image, then N-way K-shot sessions"
    paper = (
        "Tao et al., Few-Shot Class-Incremental Learning (TOPIC), CVPR 2020; Zhang et al., Few-Shot "
        "Incremental Learning with Continually Evolved Classifiers (CEC), CVPR 2021"
    )
    figures: ClassVar[Mapping[str, str]] = {
        "A_last": "accuracy on every seen class's test images after the last session",
        "A_mean": "mean over sessions (the base one included) of that accuracy",
        "PD": "performance drop: accuracy after the base session minus after the last",
        "base": "accuracy on the base classes' test images after the last session",
        "novel": "accuracy on the novel classes' test images after the last session",
        "HM": "harmonic mean of base and novel",
    }
    params = (
        ScenarioParam("base_classes", int, 60, Interval(1, None), "classes of the base session"),
        ScenarioParam("ways", int, 5, Interval(1, None), "new classes per session (N)"),
        ScenarioParam("shots", int, 5, Interval(1, None), "training images per new class (K)"),
        ScenarioParam("sessions", int, 8, Interval(1, None), "few-shot sessions after the base one"),
        ScenarioParam("seed", int, 1, Interval(0, 2**32, closed="left"), "seed of the shots drawn"),
    )
    presets: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "cifar100": TOPIC_CIFAR,
        "miniimagenet": TOPIC_CIFAR,
        "cub200": {"base_classes": 100, "ways": 10, "shots": 5, "sessions": 10},
    }

    @classmethod
    def plan(cls, store: StoreLabels, **values: Any) -> ScenarioPlan:
        v = cls.checked(values, store.dataset)
        classes = np.unique(np.concatenate([store.train_labels, store.test_labels]))
        needed = v["base_classes"] + v["ways"] * v["sessions"]
        if needed > len(classes):
            raise UserValueError(
                f"fscil: {v['base_classes']} base classes and {v['sessions']} sessions of {v['ways']} need "
                f"{needed} classes; the store has {len(classes)}"
            )
        order = classes[:needed]
        train_ids, _ = first_met_ids(store.train_labels, order)
        test_ids, _ = first_met_ids(store.test_labels, order)
        counts = np.bincount(train_ids[train_ids >= 0], minlength=needed)
        short = np.flatnonzero(counts[v["base_classes"] :] < v["shots"])
        if len(short):
            c = int(short[0]) + v["base_classes"]
            raise UserValueError(
                f"fscil: class {order[c].item()!r} has {counts[c]} training images, fewer than the {v['shots']} shots "
                f"asked (shots must be at most {int(counts[v['base_classes'] :].min())} on this store)"
            )
        rng = np.random.RandomState(v["seed"])
        bounds = [
            0,
            v["base_classes"],
            *(v["base_classes"] + v["ways"] * s for s in range(1, v["sessions"] + 1)),
        ]
        task_classes = tuple(np.arange(lo, hi) for lo, hi in itertools.pairwise(bounds))
        shots: dict[int, list[int]] = {}
        steps = []
        for t, session in enumerate(task_classes):
            if t == 0:
                train = rows_of(train_ids, session)
            else:
                for c in session:
                    shots[int(c)] = sorted(
                        rng.choice(np.flatnonzero(train_ids == c), v["shots"], replace=False).tolist()
                    )
                train = np.array(sorted(r for c in session for r in shots[int(c)]), dtype=np.int64)
            steps.append(Step(t, train, rows_of(test_ids, np.arange(session[-1] + 1))))
        facts = {
            **v,
            "order": order.tolist(),
            "shots_drawn": {str(order[c]): rows for c, rows in shots.items()},
        }
        return ScenarioPlan(
            cls.name,
            tuple(steps),
            train_ids,
            test_ids,
            task_classes,
            task_of_rows(test_ids, task_classes),
            facts=facts,
        )

    @classmethod
    def figures_of(cls, plan: ScenarioPlan, answers: Sequence[np.ndarray]) -> dict[str, float]:
        accuracies = curve(plan, answers)
        base_rows = np.flatnonzero(plan.test_task == 0)
        novel_rows = np.flatnonzero(plan.test_task > 0)
        base = step_accuracy(plan, answers, len(plan.steps) - 1, base_rows)
        novel = step_accuracy(plan, answers, len(plan.steps) - 1, novel_rows)
        return {
            "A_last": accuracies[-1],
            "A_mean": float(np.mean(accuracies)),
            "PD": accuracies[0] - accuracies[-1],
            "base": base,
            "novel": novel,
            "HM": harmonic_mean(base, novel),
        }
