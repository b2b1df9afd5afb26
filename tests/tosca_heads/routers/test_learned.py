"""Routers backed by a baseline (`routers.learned`): computed where a run names them and nowhere
else, scored as the baseline's own classifier would route, refitted by predict from the store.

The backing baseline here is SimpleCIL, whose classifier (cosine to each class's mean feature) is
the `ncm` router's: a router learned from it must route exactly as `ncm` does, a figure that holds
only if the learner saw each task's clean training rows, in order, and nothing else.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from support.stores import synthetic_store

from tosca_foundation.errors import UserError
from tosca_heads.applied.predict import RunPredictor
from tosca_heads.requests.command_requests import FitRequest
from tosca_heads.routers import ROUTERS, on_request, resolve_routers
from tosca_heads.routers.learned import Learned
from tosca_heads.running.group import evaluate_run
from tosca_heads.running.runs import fit

RECIPE = {"epochs": 1, "batch_size": 16, "r": 8, "s": 8}


@pytest.fixture
def ncm_learned() -> Iterator[str]:
    """A router learned from SimpleCIL (registered for the test, removed after)."""

    class LearnedNCM(Learned):
        name = "test_learned_ncm"
        learner = "simplecil"

    ROUTERS.add(LearnedNCM.name, LearnedNCM(), "SimpleCIL as a router", module=__name__)
    yield LearnedNCM.name
    del ROUTERS[LearnedNCM.name]


def _fit(store: Path, run: Path, router: str | None, val: float = 0.0) -> dict:
    request = FitRequest(
        store=store,
        run=run,
        init_cls=2,
        increment=2,
        device="cpu",
        router=router,
        val_fraction=val,
        recipe=RECIPE,
    )
    return fit(request).metrics()


def test_a_learned_router_is_computed_where_named_and_routes_as_its_baseline(
    tmp_path: Path, ncm_learned: str
) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=6, spread=1.4)
    plain = _fit(store.path, tmp_path / "plain", None)
    assert ncm_learned not in plain["routers"]  # on request only: a plain fit never pays for it
    named = _fit(store.path, tmp_path / "named", f"entropy,{ncm_learned}", val=0.2)
    ours, ncm = named["routers"][ncm_learned], named["routers"]["ncm"]
    assert ours["A_t"] == ncm["A_t"] and ours["routing_accuracy_t"] == ncm["routing_accuracy_t"]
    assert named["validation"][ncm_learned]["A_last"] == named["validation"]["ncm"]["A_last"]
    assert (
        0.0 < ours["routing_accuracy"] < 1.0
    )  # a stream on which the router errs: the equality means something
    # re-evaluation computes it where asked, and keeps the others' figures
    again = evaluate_run(tmp_path / "plain", routers=(ncm_learned,)).metrics()
    assert again["routers"][ncm_learned]["A_t"] == again["routers"]["ncm"]["A_t"]
    assert again["routers"]["entropy"] == plain["routers"]["entropy"]


def test_predict_refits_a_learned_router_from_the_store_as_evaluation_did(
    tmp_path: Path, ncm_learned: str
) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=6, spread=1.4)
    _fit(store.path, tmp_path / "run", ncm_learned, val=0.2)
    predictor = RunPredictor(tmp_path / "run", 6).load()
    features = np.asarray(store.features("test"))
    with pytest.raises(UserError, match="learns from the run's store"):
        predictor.predict(features, ncm_learned)
    learned = predictor.learn_router(ncm_learned, store).predict(features, ncm_learned)
    assert np.array_equal(learned.tasks, predictor.predict(features, "ncm").tasks)


def test_the_router_list_asks_for_on_request_routers_only_by_name() -> None:
    assert {"fecam", "klda", "randumb"} <= set(ROUTERS)
    assert not set(on_request(resolve_routers(None)))  # the default computes none of them
    assert set(on_request(resolve_routers("all"))) == {"fecam", "klda", "randumb"}
    assert on_request(resolve_routers("lda,fecam")) == ("fecam",)


@pytest.mark.parametrize(
    ("method", "params"), [("fecam", {}), ("klda", {"dim": 128}), ("randumb", {"dim": 128})]
)
def test_a_router_s_snapshot_scores_as_its_baseline_did_after_that_task(method: str, params: dict) -> None:
    """What a router keeps after a task (`frozen_copy`, without the matrices the next task grows)
    scores as the baseline did then, however far the baseline has learned since."""
    from tosca_heads.method.baseline_registry import BASELINES

    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(6), 12)
    x = (2 * rng.normal(size=(6, 10))[y] + rng.normal(size=(72, 10))).astype(np.float32)
    model = BASELINES[method](**params)
    model.partial_fit(x[y < 2], y[y < 2])
    then = model.decision_function(x)
    snapshot = model.frozen_copy()
    model.partial_fit(x[(y >= 2) & (y < 4)], y[(y >= 2) & (y < 4)])
    model.partial_fit(x[y >= 4], y[y >= 4])
    assert np.array_equal(snapshot.decision_function(x), then)
    assert not np.array_equal(model.decision_function(x)[:, :2], then[:, :2]) or method == "fecam"
