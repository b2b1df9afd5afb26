"""Routers backed by a frozen-feature baseline: the task of the class the baseline predicts from the
frozen feature alone, as `lda` routes by its Gaussian classifier. FeCAM, KLDA and RanDumb score
classes from frozen features, so each is also a router (`fecam`, `klda`, `randumb`).

Each is computed on request only (`on_request = True`): where a run names it (`tosca fit --router
fecam`, `tosca eval --router`, a sweep's `--rank-by`, a suite's `tosca.routers`, `tosca predict
--router`). Their cost is their baseline's, once per run and task: FeCAM's Mahalanobis distance
to every class is n x C x d^2 per evaluation (at CIFAR-100's 100 classes and d = 1280, minutes on
a CPU), which every `tosca fit` would otherwise pay. Their learners never see a module: they
learn task by task from the clean training features beside the routers' statistics
(`statistics.ClassStatistics`, `learners=`), with their baseline's defaults (the authors'), and
keep statistics, never samples. A run's router file keeps the statistics only; `tosca predict`
refits a learned router from the run's store (seconds; refused in one line when the store is gone).

Import-light: the baselines load where a learner is built.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tosca_foundation.errors import UserError
from tosca_heads.method.ties import task_of_classes
from tosca_heads.routers.routing_rules import ROUTERS, FrozenFeature, StageView, register_router

if TYPE_CHECKING:
    import numpy as np
    import torch


class Learned(FrozenFeature):
    """A router whose choice is the task of the class `learner` (a registered baseline with
    `decision_function`) predicts from the frozen feature."""

    on_request = True
    learner = ""

    def available(self, view: StageView) -> bool:
        return view.frozen is not None and self.name in view.frozen.learned

    def task(self, view: StageView) -> torch.Tensor:
        import torch

        scorer = view.frozen.learned[self.name]
        classes = torch.from_numpy(scorer.predict(view.features.detach().cpu())).long()
        return task_of_classes(view.class_task.to(view.features.device), classes.to(view.features.device))


@register_router
class FeCAM(Learned):
    name = "fecam"
    learner = "fecam"
    summary = (
        "the task of FeCAM's class (Mahalanobis distance to each class's own shrunk, normalised "
        "covariance; on request: n x C x d^2 per evaluation)"
    )


@register_router
class KLDA(Learned):
    name = "klda"
    learner = "klda"
    summary = "the task of KLDA's class (LDA on random Fourier features of an RBF kernel; on request)"


@register_router
class RanDumb(Learned):
    name = "randumb"
    learner = "randumb"
    summary = "the task of RanDumb's class (OAS-shrunk LDA on random RBF features; on request)"


def on_request(names: Sequence[str] | None) -> tuple[str, ...]:
    """The on-request routers among `names` (a run computes these besides every other router)."""
    return tuple(n for n in names or () if getattr(ROUTERS[n], "on_request", False))


def learners_of(names: Sequence[str] | None) -> tuple[str, ...]:
    """The baselines the on-request routers among `names` learn (`fecam` -> FeCAM's)."""
    return tuple(ROUTERS[n].learner for n in on_request(names))


class RouterLearners:
    """The learners of the on-request routers a run asked for, fitted task by task on the clean
    training features (incremental class ids, a task's classes the next ones), each a baseline with
    its defaults. `snapshot()` gives each one frozen as it is now (what evaluation after this task
    reads, while the next task goes on learning)."""

    def __init__(self, routers: Sequence[str] = ()):
        self.routers = tuple(routers)

    def partial_fit(self, features: torch.Tensor, labels: np.ndarray) -> RouterLearners:
        if not hasattr(self, "learners_"):
            self.learners_ = {name: _learner(name, features.shape[1]) for name in self.routers}
        for learner in self.learners_.values():
            learner.partial_fit(features, labels)
        return self

    def snapshot(self) -> dict[str, Any]:
        """Each learner as it is now: its own `frozen_copy()` where it has one (sharing what never
        changes again, such as FeCAM's per-class matrices), else a deep copy."""
        learners = getattr(self, "learners_", {})
        return {
            name: (learner.frozen_copy() if hasattr(learner, "frozen_copy") else copy.deepcopy(learner))
            for name, learner in learners.items()
        }


def _learner(router: str, dim: int) -> Any:
    """Router `router`'s baseline with its defaults, its needs checked against this machine first."""
    from tosca_heads.method.baseline_registry import BASELINES, arguments, check_fits

    method = ROUTERS[router].learner
    if method not in BASELINES:
        raise UserError(f"router {router!r} needs baseline {method!r}, which is not registered")
    values = arguments(method, {})
    check_fits(method, values, dim)
    return BASELINES[method](**values)
