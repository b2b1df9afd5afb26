"""What a plug-in router or baseline hands back is checked before it is scored: a wrong shape, an
index out of range or a float would otherwise broadcast or index into a plausible accuracy."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

import tosca_heads
from tests.support.stores import synthetic_store
from tosca_foundation.errors import UserError
from tosca_heads.method.baseline_registry import BASELINES, register_baseline
from tosca_heads.routers import ROUTERS, Router, StageView, register_router


def _shapes(view: StageView) -> tuple[int, int, int]:
    groups, modules, n = view.entropy.shape
    return groups, modules, n


ROUTES: dict[str, tuple[Callable[[StageView], object], str]] = {
    "one column": (lambda v: torch.zeros(_shapes(v)[0], 1, dtype=torch.long), "returned shape"),
    "no group axis": (lambda v: torch.zeros(_shapes(v)[2], dtype=torch.long), "returned shape"),
    "past the last module": (lambda v: torch.full(_shapes(v)[::2], _shapes(v)[1]), "chose module"),
    "negative": (lambda v: torch.full(_shapes(v)[::2], -1), "chose module -1"),
    "floats": (lambda v: torch.zeros(_shapes(v)[::2]), "returned torch.float32 values"),
    "a list": (lambda v: [0] * _shapes(v)[2], "returned list"),
}


@pytest.fixture
def foreign_router(request: pytest.FixtureRequest) -> Iterator[str]:
    answer, _ = ROUTES[request.param]

    @register_router
    class Foreign(Router):
        name = "test_foreign"

        def route(self, view: StageView) -> torch.Tensor:
            return answer(view)  # type: ignore[return-value]

    yield request.param
    del ROUTERS["test_foreign"]


@pytest.mark.parametrize("foreign_router", list(ROUTES), indirect=True)
def test_a_router_answer_that_is_not_one_module_per_sample_stops_the_fit(
    tmp_path: Path, foreign_router: str
) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=4, per_class=8, test_per_class=4)
    with pytest.raises(UserError, match=f"router 'test_foreign' {ROUTES[foreign_router][1]}"):
        tosca_heads.fit(store, init_cls=2, increment=2, epochs=1, batch_size=8)


def test_a_router_answer_is_checked_by_predict_too(tmp_path: Path) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=4, per_class=8, test_per_class=4)
    tosca_heads.fit(store, run=tmp_path / "run", init_cls=2, increment=2, epochs=1, batch_size=8)

    @register_router
    class Column(Router):
        name = "test_column"

        def route(self, view: StageView) -> torch.Tensor:
            return torch.zeros(view.entropy.shape[0], 1, dtype=torch.long)

    try:
        with pytest.raises(UserError, match="router 'test_column' returned shape"):
            tosca_heads.predict(tmp_path / "run", store.features("test")[:3], router="test_column")
    finally:
        del ROUTERS["test_column"]


PREDICTIONS: dict[str, tuple[Callable[[int], object], str]] = {
    "one column": (lambda n: np.zeros((n, 1), dtype=np.int64), "predict returned shape"),
    "a class not seen yet": (lambda n: np.full(n, 10**6), "predicted class 1000000"),
    "negative": (lambda n: np.full(n, -1), "predicted class -1"),
    "NaN": (lambda n: np.full(n, np.nan), "predict returned float64 values"),
    "a number": (lambda n: 0, "predict returned int"),
}


@pytest.mark.parametrize("case", list(PREDICTIONS))
def test_a_baseline_answer_that_is_not_one_seen_class_per_sample_stops(tmp_path: Path, case: str) -> None:
    answer, said = PREDICTIONS[case]

    @register_baseline("test_foreign")
    class Foreign:
        incremental = True

        def __init__(self, device: str = "cpu") -> None:
            self.device = device

        def partial_fit(self, features: object, labels: object) -> Foreign:
            return self

        def predict(self, features: torch.Tensor) -> object:
            return answer(len(features))

        def num_parameters(self) -> int:
            return 0

    store = synthetic_store(tmp_path / "s.zarr", classes=4, per_class=8, test_per_class=4)
    try:
        with pytest.raises(UserError, match=f"baseline 'test_foreign': {said}"):
            tosca_heads.baselines(store, ["test_foreign"], init_cls=2, increment=2)
    finally:
        del BASELINES["test_foreign"]


def test_predict_refuses_features_of_another_width_or_not_finite(tmp_path: Path) -> None:
    """The compiled step reads [n, d] by pointer: a 1-D or narrower array crashed the process."""
    store = synthetic_store(tmp_path / "s.zarr", classes=4, per_class=8, test_per_class=4, dim=32)
    tosca_heads.fit(store, run=tmp_path / "run", init_cls=2, increment=2, epochs=1, batch_size=8)
    x = store.features("test")
    for wrong in (x[0], x[:3, :16], np.zeros((3, 40), np.float32)):
        with pytest.raises(UserError, match=r"needs \[n, 32\]"):
            tosca_heads.predict(tmp_path / "run", wrong, router="entropy")
    bad = x[:3].copy()
    bad[1, 2] = np.nan
    with pytest.raises(UserError, match="NaN or infinite"):
        tosca_heads.predict(tmp_path / "run", bad, router="entropy")
    assert tosca_heads.predict(tmp_path / "run", x[:3], router="entropy").classes.shape == (3,)
