"""Each scenario's reading of a store (its tasks, its evaluation sets, what it draws) and its
figures from answers whose accuracies are known."""

from __future__ import annotations

import numpy as np
import pytest

from tosca_foundation.errors import UserError
from tosca_heads.method.protocol import TaskStream
from tosca_heads.method.scenarios import SCENARIOS, StoreLabels, scenario
from tosca_heads.method.scenarios.blurry import si_blurry_tasks


def _store(classes: int, train: int, test: int, dataset: str = "", domains: int = 0) -> StoreLabels:
    train_labels = np.tile(np.arange(classes), train)
    test_labels = np.tile(np.arange(classes), test)
    if not domains:
        return StoreLabels(train_labels, test_labels, dataset=dataset)
    return StoreLabels(
        train_labels,
        test_labels,
        np.arange(len(train_labels)) % domains,
        np.arange(len(test_labels)) % domains,
        dataset=dataset,
        domain_names=tuple(f"d{i}" for i in range(domains)),
    )


def _perfect(plan) -> list[np.ndarray]:
    return [plan.test_ids[step.eval_rows] for step in plan.steps]


def test_every_built_in_is_registered_with_its_figures() -> None:
    scenario("cil")
    assert {"cil", "til", "fscil", "blurry", "dil"} <= set(SCENARIOS)
    for name in ("cil", "til", "fscil", "blurry", "dil"):
        assert SCENARIOS[name].figures and SCENARIOS[name].paper


def test_cil_is_the_protocols_class_order_and_split() -> None:
    plan = scenario("cil").plan(_store(10, 4, 2), init_cls=4, increment=2, order_seed=7)
    stream = TaskStream.build(10, 4, 2, 7)
    assert plan.num_tasks == stream.num_tasks == 4
    assert np.array_equal(plan.facts["order"], stream.order)
    for t, step in enumerate(plan.steps):
        assert np.array_equal(plan.task_classes[t], np.array(stream.task_classes(t)))
        assert set(plan.train_ids[step.train_rows]) == set(stream.task_classes(t))
        assert len(step.eval_rows) == 2 * stream.seen_classes(t)


def test_cil_figures_count_forgetting_from_each_tasks_best() -> None:
    plan = scenario("cil").plan(_store(4, 2, 10), init_cls=2, increment=2)
    answers = _perfect(plan)
    wrong = answers[1].copy()
    first_task = plan.test_task[plan.steps[1].eval_rows] == 0
    wrong[np.flatnonzero(first_task)[:5]] = 3  # 5 of task 0's 20 test images wrong at the end
    figures = scenario("cil").figures_of(plan, [answers[0], wrong])
    assert figures == pytest.approx({"A_last": 35 / 40, "A_bar": (1 + 35 / 40) / 2, "forgetting": 5 / 20})


def test_til_tells_the_task() -> None:
    assert scenario("til").told_task and not scenario("cil").told_task


def test_fscil_draws_k_shots_per_new_class_by_its_seed() -> None:
    store = _store(20, 12, 3)
    plan = scenario("fscil").plan(store, base_classes=10, ways=2, shots=3, sessions=5, seed=4)
    assert [len(step.train_rows) for step in plan.steps] == [120, 6, 6, 6, 6, 6]
    for t, step in enumerate(plan.steps[1:], start=1):
        assert np.array_equal(np.bincount(plan.train_ids[step.train_rows])[plan.task_classes[t]], [3, 3])
    assert [len(step.eval_rows) for step in plan.steps] == [30, 36, 42, 48, 54, 60]
    again = scenario("fscil").plan(store, base_classes=10, ways=2, shots=3, sessions=5, seed=4)
    other = scenario("fscil").plan(store, base_classes=10, ways=2, shots=3, sessions=5, seed=5)
    assert again.facts["shots_drawn"] == plan.facts["shots_drawn"] != other.facts["shots_drawn"]


def test_fscil_presets_are_the_papers() -> None:
    plan = scenario("fscil").plan(_store(100, 6, 1, dataset="cifar100"))
    assert [len(c) for c in plan.task_classes] == [60] + [5] * 8


def test_fscil_figures() -> None:
    plan = scenario("fscil").plan(_store(4, 6, 10), base_classes=2, ways=2, shots=1, sessions=1)
    answers = _perfect(plan)
    last = answers[1].copy()
    novel = np.flatnonzero(plan.test_task[plan.steps[1].eval_rows] == 1)
    last[novel[:10]] = 0  # half the novel test images wrong
    figures = scenario("fscil").figures_of(plan, [answers[0], last])
    assert figures == pytest.approx(
        {"A_last": 0.75, "A_mean": 0.875, "PD": 0.25, "base": 1.0, "novel": 0.5, "HM": 2 * 0.5 / 1.5}
    )


def test_fscil_refuses_more_shots_than_a_class_has() -> None:
    with pytest.raises(
        UserError, match=r"^fscil: class 3 has 3 training images, fewer than the 5 shots asked"
    ):
        scenario("fscil").plan(_store(5, 3, 1), base_classes=3, ways=1, shots=5, sessions=2)


def test_si_blurry_keeps_disjoint_classes_in_one_task_and_blurs_m_percent() -> None:
    targets = np.repeat(np.arange(20), 30)
    tasks = si_blurry_tasks(targets, 4, 50, 20, seed=3)
    stream = [r for rows in tasks for r in rows]
    assert sorted(stream) == list(range(600))  # 20 classes: 10 disjoint, 10 blurry, every row once
    task_sets = [set(targets[rows].tolist()) for rows in tasks]
    homes = {c: [t for t, s in enumerate(task_sets) if c in s] for c in range(20)}
    single = [c for c, ts in homes.items() if len(ts) == 1]
    assert len(single) >= 10  # the disjoint ten (and blurry ones no blurred image left)
    assert len({len(rows) for rows in tasks}) > 1  # tasks of varying size
    assert tasks == si_blurry_tasks(targets, 4, 50, 20, seed=3) != si_blurry_tasks(targets, 4, 50, 20, seed=4)


def test_si_blurry_with_every_class_disjoint_is_class_incremental() -> None:
    targets = np.repeat(np.arange(10), 5)
    tasks = si_blurry_tasks(targets, 2, 100, 0, seed=1)
    assert not set(targets[tasks[0]].tolist()) & set(targets[tasks[1]].tolist())


def test_blurry_evaluates_every_period_on_exposed_classes() -> None:
    plan = scenario("blurry").plan(_store(20, 30, 4), tasks=4, eval_period=100, seed=2)
    assert len(plan.steps) == 6 and plan.facts["auc_steps"] == 6 and plan.recurring
    seen: set[int] = set()
    for step in plan.steps:
        seen |= set(plan.train_ids[step.train_rows].tolist())
        assert set(plan.test_ids[step.eval_rows].tolist()) == seen
    assert scenario("blurry").figures_of(plan, _perfect(plan)) == {"A_last": 1.0, "A_AUC": 1.0}


@pytest.mark.parametrize("value", [-0.1, 1.5])
def test_blurry_refuses_a_ratio_outside_0_1(value: float) -> None:
    with pytest.raises(UserError, match=rf"^blurry blurry must be in \[0, 1\], got {value}$"):
        scenario("blurry").plan(_store(10, 5, 1), blurry=value)


def test_dil_learns_one_domain_per_task_and_tests_every_image() -> None:
    plan = scenario("dil").plan(_store(3, 8, 4, domains=4))
    assert plan.num_tasks == 4 and plan.facts["domain_order"] == ["d0", "d1", "d2", "d3"]
    assert all(len(step.eval_rows) == 12 for step in plan.steps)
    answers = _perfect(plan)
    drifted = answers[3].copy()
    drifted[plan.test_task == 0] = (drifted[plan.test_task == 0] + 1) % 3  # domain 0 forgotten at the end
    figures = scenario("dil").figures_of(plan, [*answers[:3], drifted])
    assert figures == pytest.approx({"A_last": 0.75, "A_bar": (3 + 0.75) / 4, "forgetting": 1 / 3})


def test_dil_refuses_a_store_without_domains() -> None:
    with pytest.raises(
        UserError,
        match=r"^dil needs a store with a domain per image; cifar10 has none \(datasets with domains: ",
    ):
        scenario("dil").plan(_store(10, 5, 1, dataset="cifar10"))


def test_an_unknown_scenario_or_parameter_is_one_line() -> None:
    with pytest.raises(UserError, match="fscl"):
        scenario("fscl")
    with pytest.raises(
        UserError, match=r"^scenario fscil takes no parameter 'way' \(it takes: base_classes, ways"
    ):
        scenario("fscil").plan(_store(10, 5, 1), way=3)
