"""TOSCA and the baselines under each scenario on a small store: what each answers, the figures
the scenario makes of it, and the one-line refusals of a method that cannot run a scenario."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from support.stores import synthetic_store

from tosca_foundation.errors import UserError
from tosca_heads.applied.scenario_runs import method_answers, run_scenario, store_labels
from tosca_heads.applied.tosca_scenario import tosca_answers
from tosca_heads.method.baselines.gacl import GACL
from tosca_heads.method.scenarios import StoreLabels, scenario
from tosca_heads.method.ties import TIED


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):
    return synthetic_store(
        tmp_path_factory.mktemp("s") / "s.zarr", classes=6, per_class=20, test_per_class=10, spread=1.6
    )


def test_til_answers_among_the_told_tasks_classes(store) -> None:
    cil, til = (
        run_scenario(store, name, ("simplecil",), {"init_cls": 2, "increment": 2})[0]
        for name in ("cil", "til")
    )
    plan = scenario("til").plan(store_labels(store), init_cls=2, increment=2)
    for answers, step in zip(til.answers, plan.steps, strict=True):
        told = plan.test_task[step.eval_rows]
        assert all(a in plan.task_classes[t] for a, t in zip(answers, told, strict=True))
    assert til.figures["A_last"] >= cil.figures["A_last"] and til.figures["A_last"] > 0.5


def test_tosca_runs_cil_til_and_fscil(store) -> None:
    for name, values in (
        ("til", {"init_cls": 2, "increment": 2}),
        ("fscil", {"base_classes": 2, "ways": 2, "shots": 5, "sessions": 2}),
    ):
        result = run_scenario(store, name, ("tosca",), values, {"tosca": {"epochs": 2}})[0]
        assert len(result.curve) == 3 and 0.3 < result.figures["A_last"] <= 1.0


def test_gacl_under_blurry_is_its_joint_solution_on_the_rows_seen(store) -> None:
    result = run_scenario(
        store, "blurry", ("gacl",), {"tasks": 2, "eval_period": 30}, {"gacl": {"buffer_size": 64}}
    )[0]
    plan = scenario("blurry").plan(store_labels(store), tasks=2, eval_period=30)
    seen = np.concatenate([step.train_rows for step in plan.steps])
    whole = GACL(buffer_size=64).partial_fit(store.features("train")[seen], plan.train_ids[seen])
    last = plan.steps[-1].eval_rows
    assert np.array_equal(result.answers[-1], whole.predict(store.features("test")[last]))
    assert result.figures["A_last"] == pytest.approx(
        float((result.answers[-1] == plan.test_ids[last]).mean())
    )


def test_a_method_that_cannot_run_blurry_refuses_it_in_one_line(store) -> None:
    message = r"^slda cannot run blurry: it learns each class from one task's rows \(those that can: "
    with pytest.raises(UserError, match=message):
        run_scenario(store, "blurry", ("tosca", "slda"), {"tasks": 2})  # before tosca learns


BLURRY = {"tasks": 2, "eval_period": 30}
FAST = {"epochs": 2, "batch_size": 8}


def _domain_plan(store):
    labels = store_labels(store)
    return scenario("dil").plan(
        StoreLabels(
            labels.train_labels,
            labels.test_labels,
            np.arange(len(labels.train_labels)) % 3,
            np.arange(len(labels.test_labels)) % 3,
            domain_names=("a", "b", "c"),
        )
    )


def test_tosca_in_dil_gives_a_recurring_class_a_row_per_task_or_learns_it_once(store) -> None:
    plan = _domain_plan(store)
    x_train, x_test = store.features("train"), store.features("test")
    rows = tosca_answers(plan, x_train, x_test, False, {**FAST, "routers": ("lda", "ncm")})
    first = tosca_answers(plan, x_train, x_test, False, {**FAST, "recurring": "first_task"})["lda"]
    # every step answers every test image (dil), each a class of the store's 6
    assert all(set(a.tolist()) <= set(range(6)) for a in rows["lda"])
    figures = scenario("dil").figures_of(plan, rows["lda"])
    assert 0.5 < figures["A_last"] <= 1.0
    # learnt once: the first domain's module alone, so every later step answers as the first did
    assert all(np.array_equal(a, first[0]) for a in first)
    assert not all(np.array_equal(a, rows["lda"][0]) for a in rows["lda"])


def test_tosca_in_blurry_trains_at_a_tasks_end_or_at_each_step(store) -> None:
    plan = scenario("blurry").plan(store_labels(store), **BLURRY)
    first_task = [s for s, step in enumerate(plan.steps) if step.task == 0]
    assert len(first_task) >= 2  # a point inside the first task, then its end
    per_task = run_scenario(store, "blurry", ("tosca",), BLURRY, {"tosca": FAST})[0]
    per_step = run_scenario(store, "blurry", ("tosca",), BLURRY, {"tosca": {**FAST, "module_per": "step"}})[0]
    inside = first_task[0]
    assert (per_task.answers[inside] == TIED).all() and per_task.curve[inside] == 0.0  # no module yet
    assert per_step.curve[inside] > 0.3
    assert 0.5 < per_task.figures["A_last"] <= 1.0 and per_task.figures["A_AUC"] < per_step.figures["A_AUC"]


def test_a_few_shot_session_may_reuse_the_base_module_frozen(store) -> None:
    """`later_modules="first"` (the few-shot alternative): every session's module is the base
    session's, unchanged, and its classes' rows are prototypes of that module's output over their
    shots; the base session is trained exactly as by default, so the first step's answers agree."""
    import torch

    from tosca_heads.engine.outputs import module_outputs

    values = {"base_classes": 2, "ways": 2, "shots": 5, "sessions": 2}
    plan = scenario("fscil").plan(store_labels(store), **values)
    train_x, test_x = store.features("train"), store.features("test")
    params = {**FAST, "routers": ("lda", "entropy"), "later_modules": "first"}
    keep: dict = {}
    first = tosca_answers(plan, train_x, test_x, False, params, keep=keep)
    default = tosca_answers(plan, train_x, test_x, False, {**FAST, "routers": ("lda", "entropy")})
    assert np.array_equal(first["lda"][0], default["lda"][0])  # the base session: the same training
    assert all(np.array_equal(a, b) for a, b in zip(first["lda"], first["entropy"], strict=True))
    trainer = keep["model"].trainer_
    assert len(trainer.modules_) == 3
    assert all(torch.equal(m, trainer.modules_[0]) for m in trainer.modules_[1:])
    rows = plan.steps[1].train_rows
    out = module_outputs(
        trainer.layout, trainer.modules_[0], torch.from_numpy(train_x[rows]), normalize=False
    )
    ids = plan.train_ids[rows]
    for c in np.unique(ids):
        row = int(np.flatnonzero(keep["row_class"] == c)[0])
        torch.testing.assert_close(trainer.weight_[:, row], out[:, torch.from_numpy(ids == c)].mean(1))


def test_one_tosca_training_answers_for_every_router_asked(store) -> None:
    values = {"init_cls": 2, "increment": 2}
    both = run_scenario(store, "cil", ("tosca",), values, {"tosca": {**FAST, "routers": ("lda", "ncm")}})
    alone = run_scenario(store, "cil", ("tosca",), values, {"tosca": {**FAST, "router": "ncm"}})[0]
    assert [r.label for r in both] == ["tosca (lda)", "tosca (ncm)"]
    assert all(np.array_equal(a, b) for a, b in zip(both[1].answers, alone.answers, strict=True))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"routers": ("oracle",)}, r"^--routers oracle is a reference, never a scenario's result \(honest: "),
        ({"routers": ("nope",)}, r"^unknown --routers 'nope'"),
        ({"recurring": "merge"}, r"^--recurring must be one of task_rows, first_task, got 'merge'$"),
        ({"module_per": "epoch"}, r"^--module-per must be one of task, step, got 'epoch'$"),
        ({"later_modules": "last"}, r"^--later-modules must be one of train, first, got 'last'$"),
    ],
)
def test_toscas_scenario_options_are_checked_before_any_method_learns(store, options, message) -> None:
    with pytest.raises(UserError, match=message):
        run_scenario(store, "cil", ("ridge", "tosca"), {"init_cls": 2, "increment": 2}, {"tosca": options})


def test_dil_on_a_store_without_domains_is_refused_before_any_work(store) -> None:
    with pytest.raises(UserError, match=r"^dil needs a store with a domain per image"):
        run_scenario(store, "dil", ("ridge",))


def test_the_same_answers_at_any_thread_count(store, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = scenario("blurry").plan(store_labels(store), tasks=2, eval_period=40)
    x, t = store.features("train"), store.features("test")
    first = method_answers("gacl", plan, x, t, params={"buffer_size": 600})[""]
    monkeypatch.setenv("TOSCA_LINALG_THREADS", "3")
    again = method_answers("gacl", plan, x, t, params={"buffer_size": 600})[""]
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))


def test_store_labels_read_a_cifar100_store_as_superclasses(tmp_path: Path) -> None:
    from tosca_foundation.dataset_domains import CIFAR100_SUPERCLASSES

    class Made:
        identity: ClassVar[dict[str, dict[str, str]]] = {"dataset": {"name": "cifar100"}}

        def labels(self, split: str) -> np.ndarray:
            return np.zeros(2, dtype=np.int64)

        def ids(self, split: str) -> np.ndarray:
            return np.array([f"{split}/apple/0.jpg", f"{split}/willow_tree/0.jpg"])

    read = store_labels(Made(), "cifar100_superclasses")  # type: ignore[arg-type]
    coarse = list(CIFAR100_SUPERCLASSES)
    assert read.train_labels.tolist() == [coarse.index("fruit_and_vegetables"), coarse.index("trees")]
    assert read.train_domains.tolist() == [0, 4]


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_tosca_under_cil_is_tosca_fit_views_and_all(tmp_path: Path) -> None:
    # a store with augmented views: the scenario's modules train on them as `tosca fit`'s do, and
    # every router's answers after the last task are the fit's, to the last digit
    import tosca_heads

    store = synthetic_store(
        tmp_path / "v.zarr", classes=6, per_class=20, test_per_class=10, views=3, spread=2.0
    )
    split = {"init_cls": 2, "increment": 2}
    fitted = tosca_heads.fit(store.path, write=False, epochs=3, batch_size=8, **split).metrics()["routers"]
    routers = ("lda", "ncm", "entropy")
    results = run_scenario(
        store, "cil", ("tosca",), split, {"tosca": {"epochs": 3, "batch_size": 8, "routers": routers}}
    )
    for result in results:
        assert result.figures["A_last"] == fitted[result.router]["A_last"], result.router
        assert result.figures["A_bar"] == pytest.approx(fitted[result.router]["A_bar"], abs=1e-12)
    # the modules train on the views given, not on the clean features: far-off views answer otherwise
    plan = scenario("cil").plan(store_labels(store), **split)
    x_train, x_test, fast = store.features("train"), store.features("test"), {"epochs": 3, "batch_size": 8}
    noisy = x_train[None] + 3.0 * np.random.default_rng(1).normal(size=(2, *x_train.shape)).astype(np.float32)
    clean = tosca_answers(plan, x_train, x_test, False, fast)["lda"]
    trained_on_noise = tosca_answers(plan, x_train, x_test, False, fast, noisy)["lda"]
    assert not all(np.array_equal(a, b) for a, b in zip(clean, trained_on_noise, strict=True))


def test_told_the_task_tosca_answers_once_whatever_routers_were_asked(store) -> None:
    values, fast = {"init_cls": 2, "increment": 2}, {"epochs": 2, "batch_size": 8}
    told = run_scenario(store, "til", ("tosca",), values, {"tosca": {**fast, "routers": ("lda", "ncm")}})
    assert [r.label for r in told] == ["tosca (told task)"]
    alone = run_scenario(store, "til", ("tosca",), values, {"tosca": fast})[0]
    assert all(np.array_equal(a, b) for a, b in zip(told[0].answers, alone.answers, strict=True))
