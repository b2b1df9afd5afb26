"""Issue 57, point 3: a tie for the top score counts as wrong, for every baseline's prediction and
a scenario's told-the-task answer, and a run says how many it counted (`method/ties.py`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from support.stores import store_of_vectors
from typer.testing import CliRunner

from cli import app
from featcache.store import FeatureStore
from tosca_heads.method.baseline_registry import BASELINES
from tosca_heads.method.baselines.randumb import RanDumb
from tosca_heads.method.ties import TIED, top_class

RUNNER = CliRunner()


def test_top_class_answers_tied_where_the_top_is_shared_or_missing() -> None:
    scores = np.array(
        [[0.1, 0.9, 0.2], [0.5, 0.5, 0.1], [0.3, 0.3, 0.3], [np.nan, 1.0, 0.0], [-np.inf, 2.0, 2.0]]
    )
    np.testing.assert_array_equal(top_class(scores), [1, TIED, TIED, TIED, TIED])
    assert top_class(torch.tensor([[1.0, np.nextafter(1.0, 2.0)]])).tolist() == [
        1
    ]  # a last bit tells them apart
    assert top_class(np.array([[1.0, 0.0]] * 3)).dtype == np.int64


def repeated_store(path: Path, classes: int = 6) -> FeatureStore:
    """Each class's images (train and test) are one repeated vector: RanDumb's covariance is zero."""
    return store_of_vectors(path, np.random.default_rng(0).normal(size=(classes, 16)))


def test_randumb_on_one_vector_per_class_ties_everywhere() -> None:
    """The estimator: every class has the same score (no covariance, no discriminant): every
    answer TIED, none the first class by argmax's order."""
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(4, 16)).astype(np.float32)
    y = np.repeat(np.arange(4), 5)
    model = RanDumb(dim=64).partial_fit(centres[y], y)
    assert (model.predict(centres[y]) == TIED).all()


@pytest.mark.parametrize("name", sorted(BASELINES))
def test_every_baselines_prediction_follows_the_tie_rule(name: str) -> None:
    """Each registered baseline's `predict` is `top_class` of its scores where it has scores: one
    with a `decision_function` answers TIED exactly where two classes share the top."""
    cls = BASELINES[name]
    if not callable(getattr(cls, "decision_function", None)):
        pytest.skip(f"{name} has no scores")
    rng = np.random.default_rng(1)
    x = rng.normal(size=(24, 8)).astype(np.float32)
    y = np.repeat(np.arange(4), 6)
    kwargs = {"dim": 64} if name in ("randumb", "klda", "klda_ensemble") else {}
    for key in ("buffer_size", "projection_dim", "embedding_dim"):
        if key in __import__("inspect").signature(cls).parameters:
            kwargs[key] = 64
    model = cls(**kwargs)
    (model.partial_fit if getattr(cls, "incremental", True) else model.fit)(x, y)
    scores = np.asarray(model.decision_function(x))
    np.testing.assert_array_equal(model.predict(x), top_class(scores))


def test_a_tie_is_wrong_and_said_through_the_command(tmp_path: Path) -> None:
    """The issue's case: RanDumb printed A_last 16.67 (argmax's first class, 1 in 6) without a word;
    now 0 with a line saying every test image tied, and the count in its metrics.json."""
    store = repeated_store(tmp_path / "s.zarr")
    out = tmp_path / "out"
    args = ["baselines", "--store", str(store.path), "--out", str(out), "--no-tosca", "--device", "cpu"]
    result = RUNNER.invoke(
        app,
        [
            *args,
            "--init-cls",
            "2",
            "--increment",
            "2",
            "--methods",
            "randumb,simplecil",
            "--randumb-dim",
            "64",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "randumb: 30 of the 30 test images had two or more classes tied for the top score" in result.output
    figures = {
        name: json.loads((out / name / "metrics.json").read_text())["routers"]["none"]
        for name in ("randumb", "simplecil")
    }
    assert figures["randumb"]["A_last"] == 0.0 and figures["simplecil"]["A_last"] == 1.0
    assert figures["randumb"]["tied"] == [10, 20, 30] and figures["randumb"]["tied_of"] == 30
    assert "tied" not in figures["simplecil"]  # said only where a tie was counted
