"""Issue 57, point 8: a message names a class by the store's label and name, never by its position
in the class order (FeCAM said "class 4" of the class whose label is 5)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from cli import app
from featcache.store import FeatureStore
from featcache.store.format import made_up_identity
from tosca_foundation.errors import UserError
from tosca_heads.applied.scenario_runs import run_scenario
from tosca_heads.method.class_names import ClassFault, named_classes, said_class
from tosca_heads.method.protocol import class_order

RUNNER = CliRunner()


def test_said_class_is_the_label_and_its_name() -> None:
    assert said_class(5, ["a", "b", "c", "d", "e", "forest"]) == "5 ('forest')"
    assert said_class(5) == "5" and said_class(7, ["a"]) == "7"
    assert said_class(1, ["x", "bad\nname"]) == "1 ('bad\\x0aname')"  # one line stays one line


def test_a_class_fault_is_renamed_at_the_edge_by_the_class_order() -> None:
    order = np.array([3, 5, 0, 1, 2, 4])
    with pytest.raises(UserError) as refused, named_classes(order, ["a", "b", "c", "d", "e", "forest"]):
        raise ClassFault("class {cls} has one image", 1)  # position 1 is label 5
    assert str(refused.value) == "class 5 ('forest') has one image"
    assert not isinstance(refused.value, ClassFault)
    assert str(ClassFault("class {cls} has one image", 4)) == "class 4 has one image"  # the API's own ids


def _store_with_a_lonely_class(tmp_path: Path, names: list[str] | None = None) -> tuple[FeatureStore, int]:
    """Six classes; one class of the first task (by the order of seed 1993) has a single training
    image; returns the store and that class's label (never its position in the order)."""
    order = class_order(6)
    lonely = int(order[1])
    assert lonely != 1  # a position and a label that differ, or the tests could not fail
    train = np.concatenate([np.repeat(np.arange(6)[np.arange(6) != lonely], 6), [lonely]])
    labels = {"train": np.sort(train), "test": np.repeat(np.arange(6), 3)}
    identity = made_up_identity("synthetic", "none", 6, labels, 8, 0, 0)
    if names is not None:
        identity["dataset"]["class_names"] = names
    ids = {k: [f"{k}/{i}" for i in range(len(v))] for k, v in labels.items()}
    store = FeatureStore.create(tmp_path / "s.zarr", identity, {}, ids, labels, 8, 0, 16, "float32")
    rng = np.random.default_rng(0)
    for split, y in labels.items():
        x = (rng.normal(size=(6, 8))[y] + 0.3 * rng.normal(size=(len(y), 8))).astype(np.float32)
        for chunk in range(store.layout(split).n_chunks):
            rows = store.layout(split).chunk_slice(chunk)
            store.write_chunk(split, chunk, x[rows], None)
    return store, lonely


def test_fecams_refusal_through_the_command_names_the_store_label(tmp_path: Path) -> None:
    """FeCAM's line names the lonely class's store label, not its position in the order."""
    store, lonely = _store_with_a_lonely_class(tmp_path)
    args = ["baselines", "--store", str(store.path), "--out", str(tmp_path / "out"), "--no-tosca"]
    result = RUNNER.invoke(
        app, [*args, "--device", "cpu", "--init-cls", "2", "--increment", "2", "--methods", "fecam"]
    )
    assert result.exit_code == 2, result.output
    line = result.output.strip().splitlines()[-1]
    assert f"class {lonely} " in line and "class 1 " not in line, line  # the label, not position 1


def test_fecams_refusal_inside_a_scenario_names_the_store_label_and_name(tmp_path: Path) -> None:
    """The same fault inside `tosca scenario` (the plan numbers classes as first met): renamed too."""
    names = ["ash", "beech", "cedar", "deodar", "elm", "fir"]
    store, lonely = _store_with_a_lonely_class(tmp_path, names)
    with pytest.raises(UserError) as refused:
        run_scenario(store, "cil", ("fecam",), {"init_cls": 2, "increment": 2})
    said = str(refused.value)
    assert not isinstance(refused.value, ClassFault)
    assert f"class {lonely} ('{names[lonely]}')" in said and "class 1 " not in said, said
    args = ["scenario", "--store", str(store.path), "--scenario", "cil", "--methods", "fecam"]
    result = RUNNER.invoke(app, [*args, "--set", "init_cls=2", "--set", "increment=2"])
    assert result.exit_code == 2, result.output
    assert f"class {lonely} ('{names[lonely]}')" in result.output.strip().splitlines()[-1], result.output
