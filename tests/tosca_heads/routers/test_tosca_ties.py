"""Issue 57, point 3 for TOSCA itself: the cosine classifier's answer per module and every router's
choice of module follow the one tie rule (`method/ties.py`): a tied answer, or a tied route, is
TIED, counted wrong, and the run says how many. Where nothing ties, the bits of argmax/argmin."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from support.stores import store_of_vectors
from typer.testing import CliRunner

import tosca_heads
from cli import app
from featcache.store import FeatureStore
from tosca_heads.applied.estimators import TOSCAClassifier
from tosca_heads.method.protocol import class_order
from tosca_heads.method.ties import TIED, least_index, task_of_classes, top_index
from tosca_heads.records.run_cell import read_run
from tosca_heads.routers import ROUTERS

RUNNER = CliRunner()
FIT = {"init_cls": 2, "increment": 2, "epochs": 1, "batch_size": 8}


def one_vector_store(path: Path, classes: int = 4, vectors: int = 1) -> FeatureStore:
    """Every image of every class (train and test) is the same vector (`vectors` = 1: refused where
    the store is read, `verify.one_vector`), or each task's classes share one vector of that task's
    own (`vectors` = 2 with 2 classes a task): nothing tells a task's classes apart; a first-of-equals
    argmax would answer the task's first class and score 1 / 2."""
    table = np.random.default_rng(0).normal(size=(vectors, 16))
    position = np.argsort(class_order(classes))  # each class's place in the default order
    return store_of_vectors(path, table[(position * vectors) // classes])


def test_top_and_least_index_are_argmax_and_argmin_where_nothing_ties() -> None:
    scores = torch.randn(3, 5, 200, generator=torch.Generator().manual_seed(0))
    for dim in (0, 1, -1):
        assert torch.equal(top_index(scores, dim), scores.argmax(dim))
        assert torch.equal(least_index(scores, dim), scores.argmin(dim))
    tied = torch.tensor([[1.0, 3.0, 3.0], [0.5, 0.5, 2.0], [float("nan"), 0.0, 1.0], [2.0, 1.0, 0.0]])
    assert top_index(tied).tolist() == [TIED, 2, TIED, 0]
    assert least_index(tied).tolist() == [0, TIED, TIED, 2]
    classes = torch.tensor([0, TIED, 2])
    assert task_of_classes(torch.tensor([0, 0, 1]), classes).tolist() == [0, TIED, 1]


def test_ncm_routes_a_tie_within_one_task_to_that_task() -> None:
    """Two classes of one task tied at the top still pick that task (not a tied route); tied
    classes of two tasks are a tied route."""
    from tosca_heads.routers.routing_rules import StageView

    class Frozen:
        def __init__(self, scores: torch.Tensor) -> None:
            self.scores = scores

        def ncm_scores(self, features: torch.Tensor) -> torch.Tensor:
            return self.scores

    scores = torch.tensor([[0.9, 0.9, 0.1, 0.2], [0.1, 0.9, 0.9, 0.0], [0.1, 0.2, 0.3, 0.8]])
    view = StageView(
        entropy=torch.zeros(1, 2, 3),
        energy=torch.zeros(1, 2, 3),
        frozen=Frozen(scores),  # type: ignore[arg-type]
        features=torch.zeros(3, 4),
        class_task=torch.tensor([0, 0, 1, 1]),
    )
    assert ROUTERS["ncm"].task(view).tolist() == [0, TIED, 1]


def test_fit_where_a_tasks_classes_share_one_vector_counts_every_answer_tied(tmp_path: Path) -> None:
    """Through the command: each task's two classes are one vector (the tasks' vectors differ), so
    every module's answer ties (A_last 0 for every router, was 1 / 2 for the first class of each
    tie) while every route is right; the ties counted per task in measured.json and in the figures
    read back, said under the table."""
    store = one_vector_store(tmp_path / "same.zarr", vectors=2)
    args = ["fit", "--store", str(store.path), "--run", str(tmp_path / "run"), "--device", "cpu"]
    result = RUNNER.invoke(app, [*args, "--init-cls", "2", "--increment", "2", "--epochs", "1"])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    routers = "entropy, batch, batch_shuffled, oracle, energy, ncm, lda, fusion"
    assert f"routers {routers}: 20 of the 20 test images had a tied answer" in said, said
    assert "no module picked" not in said  # no route tied: each task has its own vector
    record = read_run(tmp_path / "run")
    measured = json.loads((tmp_path / "run" / "measured.json").read_text())
    for name, block in record.metrics["routers"].items():
        assert block["A_last"] == 0.0 and block["A_t"] == [0.0, 0.0], name
        assert block["tied"] == [10, 20], name  # every image seen after each task
        assert block["tied_routes"] == [0, 0], name
        assert measured["tied"]["test"][name]["tied"] == [10, 20]
        assert np.sum(record.confusion["test"][name]) == 20  # every route counted in its cell


def test_fit_on_one_vector_for_every_class_is_refused_where_the_store_is_read(tmp_path: Path) -> None:
    """Every row of the store one vector: nothing tells any class apart, and RanPAC and DS-AL
    printed 16.67 (argmax of rounding noise), the others 0.00 tied. Refused in one line by the
    store's reader (`verify.one_vector`), for fit and the baselines alike, before any figure."""
    store = one_vector_store(tmp_path / "same.zarr")
    for command in (
        ["fit", "--run", str(tmp_path / "run")],
        ["baselines", "--no-tosca", "--methods", "ranpac,ds_al", "--out", str(tmp_path / "out")],
    ):
        split = ["--device", "cpu", "--init-cls", "2", "--increment", "2"]
        result = RUNNER.invoke(app, [*command, "--store", str(store.path), *split])
        assert result.exit_code == 2, result.output
        line = result.output.strip().splitlines()[-1]
        assert line == (
            f"error: store {store.path}: every one of the 40 train rows is the same vector, so nothing tells "
            "its classes apart and no figure would mean anything; check the backbone that extracted it "
            "(`tosca cache info`) or the arrays it was imported from"
        ), line
        assert "A_last" not in result.output


def test_a_run_without_a_tie_keeps_no_tie_field(tmp_path: Path) -> None:
    from support.stores import synthetic_store

    store = synthetic_store(tmp_path / "s.zarr", classes=4, per_class=10, test_per_class=5, dim=16)
    tosca_heads.fit(store, run=tmp_path / "run", **FIT)
    assert "tied" not in json.loads((tmp_path / "run" / "measured.json").read_text())
    assert all("tied" not in b for b in read_run(tmp_path / "run").metrics["routers"].values())


@pytest.mark.parametrize("labels", [np.array([3, 5, 7, 9]), np.array(["a", "b", "c", "d"])])
def test_the_estimator_answers_a_tie_as_no_class(labels: np.ndarray) -> None:
    """predict on one vector for every class: TIED for integer labels, None for others; never a
    class of `classes_` (the first of the tied by argmax's order)."""
    vector = np.random.default_rng(0).normal(size=16).astype(np.float32)
    y = np.repeat(labels, 10)
    model = TOSCAClassifier(epochs=1, batch_size=8, device="cpu").partial_fit(
        np.tile(vector, (20, 1)), y[:20]
    )
    model.partial_fit(np.tile(vector, (20, 1)), y[20:])
    found = model.predict(np.tile(vector, (5, 1)))
    expected = TIED if labels.dtype.kind in "iu" else None
    assert all(a == expected for a in found), found
    assert not np.isin(found[found != None], labels).any()  # noqa: E711 (an object array's None)
