"""The views a router is checked on: after each task of the toy stream, G = 2 configurations'
entropies and energies (drawn, seeded), the class statistics of the frozen features (with the
router's baseline learner, for one computed on request), and what only references see."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from tosca_heads.conformance.shared import DIM, PER_TASK, TASKS, ToyStream
from tosca_heads.method.baseline_registry import BASELINES, arguments
from tosca_heads.method.class_statistics import ClassStatistics
from tosca_heads.routers import ReferenceView, Router

GROUPS = 2


def views(
    router: Router, with_statistics: bool, learner: Mapping[str, Any] | None = None, seed: int = 0
) -> Iterator[ReferenceView]:
    """One `ReferenceView` per task (modules 1, 2, 3), over the test rows seen so far; `frozen`
    None unless `with_statistics`; a router's baseline learner (its `learner`, a registered
    baseline) made with `learner`'s keywords over its defaults."""
    toy = ToyStream.draw()
    draw = torch.Generator().manual_seed(seed)
    statistics = ClassStatistics(DIM, shrinkage="oas")
    learner_name = getattr(router, "learner", "")
    fitted = (
        BASELINES[learner_name](**{**arguments(learner_name, {}), **(learner or {})})
        if learner_name in BASELINES
        else None
    )
    for task in range(TASKS):
        rows = toy.task_rows(toy.train_y, task)
        classes = range(task * PER_TASK, (task + 1) * PER_TASK)
        statistics.partial_fit(toy.train_x[rows], toy.train_y[rows], classes)
        frozen = None
        if with_statistics:
            frozen = statistics.model()
            if fitted is not None:
                fitted.partial_fit(toy.train_x[rows], toy.train_y[rows])
                frozen = replace(frozen, learned={router.name: fitted})
        seen = toy.seen_rows(toy.test_y, task)
        labels, modules, n = toy.test_y[seen], task + 1, len(seen)
        yield ReferenceView(
            entropy=torch.rand(GROUPS, modules, n, generator=draw),
            energy=-torch.rand(GROUPS, modules, n, generator=draw) * 5,
            frozen=frozen,
            features=toy.test_x[seen],
            class_task=torch.arange(modules).repeat_interleave(PER_TASK),
            true_task=torch.from_numpy(labels // PER_TASK),
            class_ordered=torch.from_numpy(np.argsort(labels, kind="stable")),
            shuffled=torch.randperm(n, generator=draw),
        )
