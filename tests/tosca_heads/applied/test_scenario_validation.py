"""A scenario read with validation rows held out (`applied.scenario_validation`): every scenario's
stream is made of the kept rows only, the joined reading evaluates the held-out rows then the test
rows, and one training's answers split into exactly what the validation and test readings answer
when each is run on its own."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from support.stores import synthetic_store

from tosca_heads.applied.scenario_runs import store_labels
from tosca_heads.applied.scenario_validation import held_out_reading
from tosca_heads.applied.tosca_scenario import tosca_answers
from tosca_heads.method.protocol import ValidationConfig
from tosca_heads.method.scenarios import scenario
from tosca_heads.requests.plan import held_out

VALUES = {
    "cil": {"init_cls": 2, "increment": 2},
    "til": {"init_cls": 2, "increment": 2},
    "fscil": {"base_classes": 2, "ways": 2, "shots": 5, "sessions": 2},
    "blurry": {"tasks": 2, "eval_period": 30},
    "dil": {},
}
FAST = {"epochs": 2, "batch_size": 8, "routers": ("lda", "ncm")}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):
    return synthetic_store(
        tmp_path_factory.mktemp("s") / "s.zarr", classes=6, per_class=20, test_per_class=10, spread=1.6
    )


def _labels(store, name: str):
    labels = store_labels(store)
    if name != "dil":
        return labels
    train, test = len(labels.train_labels), len(labels.test_labels)  # three made-up domains
    return replace(labels, train_domains=np.arange(train) % 3, test_domains=np.arange(test) % 3)


@pytest.mark.parametrize("name", list(VALUES))
def test_the_stream_learns_the_kept_rows_and_answers_held_out_then_test_rows(store, name: str) -> None:
    labels = _labels(store, name)
    held = held_out(store, ValidationConfig(0.2, 3))
    reading = held_out_reading(scenario(name), labels, held, VALUES[name])
    n = len(labels.train_labels)
    assert len(held) == 6 * 4 and not np.isin(reading.kept, held).any()  # 20% of each class's 20
    assert np.array_equal(np.union1d(reading.kept, held), np.arange(n))
    learnt = np.concatenate([s.train_rows for s in reading.joined.steps])
    assert learnt.max() < len(reading.kept)  # positions among the kept rows only
    for joined, val, test in zip(
        reading.joined.steps, reading.validation.steps, reading.test.steps, strict=True
    ):
        assert np.array_equal(joined.eval_rows, np.concatenate([val.eval_rows, len(held) + test.eval_rows]))
    # each split's row classes are the reading's own: a held-out row keeps its class
    assert np.array_equal(reading.validation.test_ids, reading.joined.test_ids[: len(held)])
    assert np.array_equal(reading.test.test_ids, reading.joined.test_ids[len(held) :])


def test_one_training_answers_each_split_as_a_training_on_it_alone_would(store) -> None:
    labels, name = _labels(store, "fscil"), "fscil"
    reading = held_out_reading(
        scenario(name), labels, held_out(store, ValidationConfig(0.2, 3)), VALUES[name]
    )
    train_x, test_x = store.features("train"), store.features("test")
    kept_x, _ = reading.train_features(train_x, None)
    joined = tosca_answers(reading.joined, kept_x, reading.eval_features(train_x, test_x), False, FAST)
    on_test = tosca_answers(reading.test, kept_x, test_x, False, FAST)
    on_validation = tosca_answers(reading.validation, kept_x, train_x[reading.held], False, FAST)
    for router in FAST["routers"]:
        validation, test = reading.split(joined[router])
        assert all(np.array_equal(a, b) for a, b in zip(test, on_test[router], strict=True))
        assert all(np.array_equal(a, b) for a, b in zip(validation, on_validation[router], strict=True))


def test_no_validation_split_is_the_scenario_on_the_whole_store(store) -> None:
    labels = store_labels(store)
    reading = held_out_reading(scenario("fscil"), labels, np.zeros(0, dtype=np.int64), VALUES["fscil"])
    plain = scenario("fscil").plan(labels, **VALUES["fscil"])
    assert reading.validation is None and reading.joined is reading.test
    assert all(
        np.array_equal(a.train_rows, b.train_rows) and np.array_equal(a.eval_rows, b.eval_rows)
        for a, b in zip(reading.test.steps, plain.steps, strict=True)
    )
    answers = [np.zeros(len(s.eval_rows), dtype=np.int64) for s in plain.steps]
    assert reading.split(answers) == (None, answers)


def test_a_few_shot_session_is_drawn_among_the_kept_rows(store) -> None:
    labels = store_labels(store)
    held = held_out(store, ValidationConfig(0.5, 0))  # 10 of each class's 20 kept
    with pytest.raises(Exception, match=r"^fscil: class 2 has 10 training images, fewer than the 11 shots"):
        held_out_reading(scenario("fscil"), labels, held, {**VALUES["fscil"], "shots": 11})
