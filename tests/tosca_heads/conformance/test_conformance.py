"""The conformance check for plug-in authors (issue 54, point 4): every built-in baseline and
router passes `check_baseline` / `check_router`, and each deliberately broken plug-in is refused
with its one-line reason."""

from __future__ import annotations

import inspect
import re
from typing import Any

import numpy as np
import pytest
import torch

from tosca_heads import Conformance, NonConforming, check_baseline, check_router
from tosca_heads.method.baseline_registry import BASELINES, Interval, Param
from tosca_heads.routers import ROUTERS, Router, StageView

SMALL = {"projection_dim": 256, "dim": 256, "buffer_size": 256, "embed_dim": 256, "rff_dim": 256}
FIXED = {"ridge": 1e-2, "gamma": 0.02, "update": "exact", "sigma": 0.02}  # as test_order_free fixes them


def _small(cls: type) -> dict[str, Any]:
    """Its sizes small (the defaults' 10,000 random features take minutes here), the knobs it
    chooses from its first task fixed where it is order-free (so that check runs)."""
    keywords = inspect.signature(cls).parameters
    given = {k: v for k, v in SMALL.items() if k in keywords}
    if getattr(cls, "order_free", False):
        knobs = (getattr(cls, "tuned", None), *getattr(cls, "order_free_given", ()))
        given.update({k: FIXED[k] for k in knobs if k in keywords})
    return given


@pytest.mark.parametrize("method", list(BASELINES))
def test_every_built_in_baseline_conforms(method: str) -> None:
    cls = BASELINES[method]
    found = check_baseline(cls, _small(cls))
    assert isinstance(found, Conformance) and found.name == cls.__name__
    assert found.passed[:3] == (
        "declarations",
        "fit per task" if not cls.incremental else "partial_fit per task",
        "state size",
    )
    assert "parameter count" in found.passed  # its formula is what it learns (issue 54 point 1)
    assert ("order-free" in found.passed) == bool(getattr(cls, "order_free", False))
    assert ("one-line refusals" in found.passed) == hasattr(cls, "check_fits")


@pytest.mark.parametrize("name", list(ROUTERS))
def test_every_built_in_router_conforms(name: str) -> None:
    router = ROUTERS[name]
    learner = BASELINES[router.learner] if getattr(router, "learner", "") else None
    small = {k: v for k, v in SMALL.items() if learner and k in inspect.signature(learner).parameters}
    found = check_router(type(router), learner=small)
    assert found.passed == ("declarations", "choices per task", "same choices twice"), found


class Good:
    """Nearest class mean: what every broken plug-in below changes one thing of."""

    incremental = True
    order_free = True
    params = (Param("k", int, "a parameter", valid=Interval(1, None)),)

    def __init__(self, k: int = 1, device: str = "cpu"):
        self.k, self.device = k, device

    def partial_fit(self, features: Any, labels: np.ndarray) -> Good:
        x, y = np.asarray(features, dtype=np.float64), np.asarray(labels)
        sums = getattr(self, "sums_", np.zeros((0, x.shape[1])))
        counts = getattr(self, "counts_", np.zeros(0))
        grown = max(len(sums), int(y.max()) + 1)
        self.sums_ = np.vstack([sums, np.zeros((grown - len(sums), x.shape[1]))])
        self.counts_ = np.concatenate([counts, np.zeros(grown - len(counts))])
        np.add.at(self.sums_, y, x)
        np.add.at(self.counts_, y, 1)
        return self

    def decision_function(self, features: Any) -> np.ndarray:
        means = self.sums_ / self.counts_[:, None]
        return -((np.asarray(features, dtype=np.float64)[:, None] - means[None]) ** 2).sum(-1)

    def predict(self, features: Any) -> np.ndarray:
        return self.decision_function(features).argmax(1)

    def num_parameters(self) -> int:
        return int(self.sums_.size + self.counts_.size)

    @staticmethod
    def parameters_for(dim: int, classes: int, /, **params: Any) -> int:
        return classes * dim + classes  # the sums and the counts


def _broken(name: str, **changed: Any) -> type:
    return type(name, (Good,), {"__doc__": "A broken plug-in.", **changed})


class _Remembers(Good):
    """Keeps every row it sees."""

    def partial_fit(self, features: Any, labels: np.ndarray) -> _Remembers:
        super().partial_fit(features, labels)
        self.rows_ = [*getattr(self, "rows_", []), *np.asarray(features)]
        return self

    def num_parameters(self) -> int:
        return super().num_parameters() + len(self.rows_) * 16


class _Fading(Good):
    """Shrinks what earlier tasks taught it at each new task, yet says it is order-free."""

    def partial_fit(self, features: Any, labels: np.ndarray) -> _Fading:
        if hasattr(self, "sums_"):
            self.sums_ *= 0.9
        return super().partial_fit(features, labels)


def _no_device_init(self: Any, k: int = 1) -> None:
    self.k = k


def _fits_badly(dim: int, classes: int = 0, **params: Any) -> None:
    if dim > 1000:
        raise MemoryError("cannot allocate")


BROKEN_BASELINES = [
    (
        _broken("NoIncremental", incremental=None),
        "incremental must be True (partial_fit) or False (fit), got None",
    ),
    (_broken("NoPredict", predict=None), "lacks predict (incremental = True)"),
    (_broken("NoDevice", __init__=_no_device_init), "__init__ takes no device keyword"),
    (type("NoDoc", (Good,), {"__doc__": None}), "has no docstring"),
    (_broken("EmptyReference", reference=""), "reference must be True, False or words saying why, got ''"),
    (_broken("NumberPaper", paper=2024), "paper must be a text, got 2024"),
    (_broken("TextFlag", runs_by_default="yes"), "runs_by_default must be True or False, got 'yes'"),
    (
        _broken("Misnamed", params=(Param("m", int, "size", valid=Interval(1, None)),)),
        "params holds m, not a Param named after a keyword of __init__ with a default",
    ),
    (
        _broken("ReturnsNone", partial_fit=lambda self, x, y: Good.partial_fit(self, x, y) and None),
        "partial_fit returned NoneType, not the estimator (self)",
    ),
    (
        _broken("Column", predict=lambda self, x: Good.predict(self, x)[:, None]),
        "predict returned shape [20, 1], not [20]",
    ),
    (
        _broken("Floats", predict=lambda self, x: Good.predict(self, x).astype(float)),
        "predict returned float64 values, not integer class ids",
    ),
    (
        _broken("Unseen", predict=lambda self, x: Good.predict(self, x) + 1),
        "predicted class 2; the classes seen so far are 0 to 1",
    ),
    (
        _broken("Crashes", partial_fit=lambda self, x, y: 1 / 0),
        "partial_fit on task 0 raised ZeroDivisionError: division by zero",
    ),
    (
        _broken("Constant", predict=lambda self, x: np.zeros(len(x), dtype=np.int64)),
        "17% right after 3 tasks on well-separated classes",
    ),
    (
        _broken(
            "Random", predict=lambda self, x: np.random.default_rng().integers(0, len(self.counts_), len(x))
        ),
        "predict changed its answers when asked twice",
    ),
    (
        _broken("BoolSize", num_parameters=lambda self: True),
        "num_parameters() returned True, not a count (an int, at least 1)",
    ),
    (
        _broken("Miscounts", parameters_for=staticmethod(lambda dim, classes, /, **params: classes * dim)),
        "parameters_for with d = 16 and 6 classes gives 96 parameters, but num_parameters() after "
        "partial_fit counts 102",
    ),
    (
        _broken("FloatCount", parameters_for=staticmethod(lambda dim, classes, /, **params: 1.5)),
        "parameters_for with d = 16 and 6 classes returned 1.5, not a count (an int, at least 1)",
    ),
    (
        _broken("CountCrashes", parameters_for=staticmethod(lambda dim, classes, /, **params: dim // 0)),
        "parameters_for with d = 16 and 6 classes raised ZeroDivisionError",
    ),
    (_Remembers, "num_parameters() grows with the rows seen (2,022 with 20 per class, 3,942 with 40)"),
    (_Fading, "declares order_free = True, yet its streamed scores are"),
    (
        _broken("FitsBadly", check_fits=staticmethod(_fits_badly)),
        "check_fits raised MemoryError, not a one-line UserError",
    ),
]


@pytest.mark.parametrize(("cls", "reason"), BROKEN_BASELINES, ids=[c.__name__ for c, _ in BROKEN_BASELINES])
def test_each_broken_baseline_is_refused_in_one_line(cls: type, reason: str) -> None:
    with pytest.raises(NonConforming) as refused:
        check_baseline(cls)
    said = str(refused.value)
    assert said.startswith(f"baseline {cls.__name__}: ") and "\n" not in said, said
    assert reason in said, said


def test_the_good_plugin_conforms_and_a_bad_parameter_is_refused() -> None:
    assert check_baseline(Good).passed == (
        "declarations",
        "partial_fit per task",
        "state size",
        "parameter count",
        "order-free",
    )
    with pytest.raises(NonConforming.__mro__[1], match=r"^check_baseline's k must be at least 1, got 0$"):
        check_baseline(Good, {"k": 0})


class GoodRouter(Router):
    name = "good_router"
    summary = "the module of least entropy"

    def route(self, view: StageView) -> torch.Tensor:
        return view.entropy.argmin(1)


def _router(cls_name: str, **changed: Any) -> type:
    return type(cls_name, (GoodRouter,), {"name": cls_name.lower(), **changed})


BROKEN_ROUTERS = [
    (type("NotARouter", (), {"name": "x"}), "router NotARouter: is not a subclass of tosca_heads.Router"),
    (_router("Spaced", name="two words"), "name must be a non-empty text without spaces"),
    (_router("TwoLines", summary="one\ntwo"), "summary must be one line"),
    (_router("OddAliases", aliases=["other"]), "aliases must be a tuple of names, got a list"),
    (_router("NumberReference", reference=3), "reference must be True, False or words saying why, got 3"),
    (_router("SaysHonest", honest=True), "sets honest: set `reference = True`"),
    (type("NoRoute", (Router,), {"name": "no_route", "summary": "s"}), "defines no route(view)"),
    (
        _router("Listed", route=lambda self, view: view.entropy.argmin(1).tolist()),
        "returned list, not a tensor of module indices",
    ),
    (
        _router("Floating", route=lambda self, view: view.entropy.argmin(1).float()),
        "returned torch.float32 values",
    ),
    (
        _router("OneColumn", route=lambda self, view: view.entropy.argmin(1)[:, :1]),
        "returned shape [2, 1], not [2, 20]",
    ),
    (
        _router("PastTheEnd", route=lambda self, view: view.entropy.argmin(1) + 1),
        "chose module 1; there are 1 (0 to 0)",
    ),
    (
        _router("Peeks", route=lambda self, view: view.true_task.expand(view.groups, -1)),
        "read view.true_task, which only reference routers see",
    ),
    (
        _router(
            "Unstated",
            route=lambda self, view: view.for_every_configuration(
                view.frozen.ncm_scores(view.features).argmax(1) * 0
            ),
        ),
        "view.frozen is None here: a router that reads the class statistics says needs_statistics = True",
    ),
    (
        _router(
            "Restless",
            route=lambda self, view: torch.randint(0, view.modules, (view.groups, view.entropy.shape[2])),
        ),
        "chose differently when asked twice",
    ),
]


@pytest.mark.parametrize(("cls", "reason"), BROKEN_ROUTERS, ids=[c.__name__ for c, _ in BROKEN_ROUTERS])
def test_each_broken_router_is_refused_in_one_line(cls: type, reason: str) -> None:
    with pytest.raises(NonConforming) as refused:
        check_router(cls)
    said = str(refused.value)
    assert said.startswith("router ") and "\n" not in said and reason in said, said
    assert check_router(GoodRouter).name == "good_router"
    assert not re.search(r"good_router", ", ".join(ROUTERS))  # checked, never registered


def test_a_plugin_without_a_count_formula_is_accepted_and_says_so() -> None:
    """A plug-in that declares no `parameters_for` conforms (its tables say "not declared"), the
    check it skips named with why."""
    silent = type("Silent", (Good,), {"__doc__": "Good without a count formula.", "parameters_for": None})
    found = check_baseline(silent)
    assert "parameter count" not in found.passed
    assert found.skipped["parameter count"] == "no parameters_for"
