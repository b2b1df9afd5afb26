"""The protocol: the default split of a dataset without a paper split, the one naming of splits,
the validation split carved per class from train, and the protocol said in words with its warnings."""

from __future__ import annotations

import numpy as np
import pytest

from tosca_foundation.errors import UserError
from tosca_heads.method.protocol import (
    HELD_OUT,
    StreamConfig,
    ValidationConfig,
    describe_protocol,
    generic_increment,
    split_name,
    split_origin,
    stream_config,
)

pytestmark = pytest.mark.cpu_reference


@pytest.mark.parametrize(
    ("classes", "increment"),
    [(4, 2), (6, 2), (10, 2), (12, 2), (30, 3), (100, 10), (200, 20), (7, None), (3, None)],
)
def test_a_dataset_without_a_paper_split_gets_the_stated_default(classes: int, increment: int | None) -> None:
    """At most 10 equal tasks of the fewest classes each, 2 or more; never one class per task, never
    one task: a prime number of classes (or fewer than 4) is refused in one line."""
    assert generic_increment(classes) == increment
    if increment is None:
        with pytest.raises(UserError, match="pass --init-cls and --increment"):
            stream_config("imagefolder", classes, None, None)
        return
    chosen = stream_config("imagefolder", classes, None, None)
    stream = chosen.task_stream(classes)
    assert (chosen.init_cls, chosen.increment) == (increment, increment)
    assert 2 <= stream.num_tasks <= 10 and stream.describe().startswith(f"B0 Inc{increment}: ")


def test_paper_splits_and_given_splits_win_over_the_default() -> None:
    assert stream_config("cifar100", 100, None, None) == StreamConfig(5, 5)
    assert stream_config("imagefolder", 7, 3, 2) == StreamConfig(3, 2)  # given: no default needed
    assert stream_config("imagefolder", 10, None, 4) == StreamConfig(2, 4)  # the rest from the default
    assert split_origin("imagefolder", None, None).startswith("the default without a paper split")
    assert split_origin("cifar100", None, None) == "the paper's split for cifar100"
    assert split_origin("eurosat", None, None) == "tosca's default for eurosat, not in the paper"
    assert split_origin("cifar100", 10, 10) == "as given"


def test_one_naming_of_splits() -> None:
    assert split_name(2, 2) == "B0 Inc2" and split_name(50, 10) == "B50 Inc10"
    assert StreamConfig(50, 10).task_stream(100).describe() == "B50 Inc10: 6 tasks (50 classes, then 5 of 10)"
    assert StreamConfig(1, 1).task_stream(2).describe() == "B0 Inc1: 2 tasks of 1 class"


def test_the_validation_split_is_carved_per_class_with_its_own_seed() -> None:
    labels = np.repeat([3, 0, 2, 1], [40, 10, 3, 2])  # store labels, unequal classes
    held = ValidationConfig(0.25, seed=7).carve(labels)
    per_class = {c: int((labels[held] == c).sum()) for c in range(4)}
    assert per_class == {3: 10, 0: 2, 2: 1, 1: 1}  # round(0.25 n), at least 1, at most n - 1
    assert np.array_equal(held, np.sort(held)) and len(set(held.tolist())) == len(held)
    assert np.array_equal(held, ValidationConfig(0.25, seed=7).carve(labels))  # seeded
    assert not np.array_equal(held, ValidationConfig(0.25, seed=8).carve(labels))
    # the carve of a class depends on its rows only, not on the class order or the other classes
    only_three = ValidationConfig(0.25, seed=7).carve(np.where(labels == 3, 3, 9))
    assert np.array_equal(only_three[only_three < 40], held[held < 40])
    assert len(ValidationConfig(0.0).carve(labels)) == 0
    with pytest.raises(UserError, match="class lonely has 1 training sample"):
        ValidationConfig(0.1).carve(np.array([0, 0, 1]), ["full", "lonely"])
    for bad in (0.6, -0.1, float("nan"), "0.1", True):
        with pytest.raises(UserError, match="--val-fraction"):
            ValidationConfig(bad).validate()  # type: ignore[arg-type]


def test_held_out_rows_are_in_no_task() -> None:
    stream = StreamConfig(2, 2).task_stream(4)
    remapped = np.array([0, 1, HELD_OUT, 2, 3, HELD_OUT])
    assert list(stream.rows_of_task(remapped, 0)) == [0, 1]
    assert list(stream.rows_seen(remapped, 1)) == [0, 1, 3, 4]


def test_the_protocol_is_said_with_its_warnings() -> None:
    train, test = np.repeat(np.arange(10), 30), np.repeat(np.arange(10), 4)
    names = [f"c{i}" for i in range(10)]
    report = describe_protocol(
        "imagefolder",
        names,
        StreamConfig(2, 2).task_stream(10),
        1993,
        "as given",
        ValidationConfig(0.1),
        train,
        test,
        ValidationConfig(0.1).carve(train),
    )
    line = report.line()
    assert "B0 Inc2: 5 tasks of 2 classes (as given)" in line and "30 training images held out" in line
    assert report.held_out == 30 and [len(t) for t in report.tasks] == [2] * 5
    assert sorted(n for t in report.tasks for n in t) == sorted(names)
    assert any("fewer than the 48 of a `batch` routing batch" in w for w in report.warnings)
    assert any("has 4 test sample(s)" in w for w in report.warnings)
    assert any("has 3 validation sample(s)" in w for w in report.warnings)
    quiet = describe_protocol(
        "cifar100",
        names,
        StreamConfig(2, 2).task_stream(10),
        1993,
        "as given",
        ValidationConfig(),
        *(np.repeat(np.arange(10), 60),) * 2,
        ValidationConfig().carve(np.repeat(np.arange(10), 60)),
    )
    assert quiet.warnings == () and "no validation split" in quiet.line()
    assert quiet.record()["tasks"] == [list(t) for t in quiet.tasks]


@pytest.mark.parametrize(
    ("fraction", "said"),
    [
        (
            1e-9,
            "4 training images held out (1 of 16 in each class, 6.25%; 1e-07% asked, rounded to whole "
            "images, at least 1 and at most all but 1 per class; seed 0)",
        ),
        (0.25, "16 training images held out (4 of 16 in each class, 25%; seed 0)"),
    ],
)
def test_the_validation_split_is_said_as_it_was_held_out(fraction: float, said: str) -> None:
    """--val-fraction 1e-9 held out 1 image of each class (at least 1), and said "1e-07% of each
    class": the line says what was held out, and the share asked only where it differs."""
    train, test = np.repeat(np.arange(4), 16), np.repeat(np.arange(4), 8)
    report = describe_protocol(
        "imagefolder",
        list("abcd"),
        StreamConfig(2, 2).task_stream(4),
        1993,
        "as given",
        ValidationConfig(fraction),
        train,
        test,
        ValidationConfig(fraction).carve(train),
    )
    assert said in report.line(), report.line()
