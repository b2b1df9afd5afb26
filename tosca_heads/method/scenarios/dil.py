"""`dil`: domain-incremental learning: the same classes in every task, each task a new domain
(van de Ven & Tolias's Domain-IL; RanPAC and FeCAM report CORe50, CDDB-Hard and DomainNet so).
Task t learns every training image of the t-th domain in the dataset's standard order (the order
of its domain ids: `tosca_foundation.dataset_domains`); after each task, accuracy on every test
image (of every domain, seen or not: CORe50 tests on sessions never trained), and per test domain
for forgetting."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from tosca_foundation.errors import UserValueError
from tosca_heads.method.baseline_registry import Interval
from tosca_heads.method.scenarios.figures import curve, step_accuracy
from tosca_heads.method.scenarios.plan import ScenarioPlan, Step, first_met_ids
from tosca_heads.method.scenarios.registry import Scenario, ScenarioParam, StoreLabels, register_scenario

WITH_DOMAINS = "core50, domainnet, cddb_hard, cifar100_superclasses"  # tosca_foundation.dataset_domains


@register_scenario
class DomainIncremental(Scenario):
    """One task per training domain, in the domains' standard order; every class in every task."""

    name = "dil"
    summary = "domain-incremental: the same classes in every task, each task a new domain"
    paper = (
        "van de Ven & Tolias, Three scenarios for continual learning, 2019; CORe50 (Lomonaco & Maltoni, 2017), "
        "DomainNet (Peng et al., 2019), CDDB-Hard (Li et al., 2023) as RanPAC and FeCAM report them"
    )
    figures: ClassVar[Mapping[str, str]] = {
        "A_last": "accuracy on every test image after the last domain",
        "A_bar": "mean over tasks of the accuracy on every test image after each",
        "forgetting": "mean over trained test domains of (best accuracy before the end - accuracy at the end)",
    }
    params = (
        ScenarioParam("first_domain", int, 0, Interval(0, None), "the position of the first domain learned"),
    )

    @classmethod
    def plan(cls, store: StoreLabels, **values: Any) -> ScenarioPlan:
        v = cls.checked(values, store.dataset)
        if store.train_domains is None or store.test_domains is None:
            raise UserValueError(
                f"dil needs a store with a domain per image; {store.dataset or 'this store'} has none "
                f"(datasets with domains: {WITH_DOMAINS})"
            )
        domains = np.unique(store.train_domains)
        if len(domains) < 2:
            raise UserValueError(f"dil needs at least 2 training domains; the store has {len(domains)}")
        if v["first_domain"] >= len(domains):
            raise UserValueError(
                f"dil first_domain must be below the {len(domains)} domains, got {v['first_domain']}"
            )
        domains = np.roll(domains, -v["first_domain"])
        classes = np.unique(np.concatenate([store.train_labels, store.test_labels]))
        train_ids, _ = first_met_ids(store.train_labels, classes)
        test_ids, _ = first_met_ids(store.test_labels, classes)
        every_test = np.arange(len(test_ids))
        steps = tuple(
            Step(t, np.flatnonzero(store.train_domains == d), every_test) for t, d in enumerate(domains)
        )
        position = {int(d): t for t, d in enumerate(domains)}
        test_task = np.array([position.get(int(d), -1) for d in store.test_domains], dtype=np.int64)
        all_classes = np.arange(len(classes))
        names = [store.domain_names[d] if d < len(store.domain_names) else str(d) for d in domains.tolist()]
        return ScenarioPlan(
            cls.name,
            steps,
            train_ids,
            test_ids,
            tuple(all_classes for _ in domains),
            test_task,
            recurring=True,
            facts={**v, "domain_order": names},
        )

    @classmethod
    def figures_of(cls, plan: ScenarioPlan, answers: Sequence[np.ndarray]) -> dict[str, float]:
        accuracies = curve(plan, answers)
        last = len(plan.steps) - 1
        drops = []
        for j in range(last):
            rows = np.flatnonzero(plan.test_task == j)
            if len(rows):
                best = max(step_accuracy(plan, answers, t, rows) for t in range(j, last))
                drops.append(best - step_accuracy(plan, answers, last, rows))
        return {
            "A_last": accuracies[-1],
            "A_bar": float(np.mean(accuracies)),
            "forgetting": float(np.mean(drops)) if drops else 0.0,
        }
