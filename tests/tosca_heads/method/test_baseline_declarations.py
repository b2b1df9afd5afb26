"""What a baseline declares once, on its class, and everything reads from there (issue 45): whether
it runs when no methods are named (`runs_by_default` -> `default_baselines()`, read by the command
line, the API and a suite alike), and each parameter's rule, whose words are its refusal."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from cli import app
from tosca_foundation.errors import UserError
from tosca_heads.method.baseline_registry import (
    BASELINES,
    Interval,
    Options,
    Param,
    default_baselines,
    params_of,
    register_baseline,
)
from tosca_heads.requests.command_requests import BaselinesRequest
from tosca_heads.stage2_api import _request
from tosca_heads.studies.comparison import check_request
from tosca_heads.studies.suite import parse_suite

RUNNER = CliRunner()
BUILT_IN = ("simplecil", "ranpac", "joint_probe")


@pytest.mark.parametrize(
    ("rule", "inside", "outside", "words"),
    [
        (Interval(1, None), 1, 0, "at least 1"),
        (Interval(0, None, closed="neither"), 0.5, 0, "more than 0"),
        (Interval(None, 10), 10, 11, "at most 10"),
        (Interval(None, 10, closed="neither"), 9.5, 10, "less than 10"),
        (Interval(0, 2**32, closed="left"), 0, 2**32, "in [0, 2**32)"),
        (Interval(0.0, 1.0, closed="right"), 1.0, 0.0, "in (0, 1]"),
        (Interval(1, 10_000), 10_000, 10_001, "in [1, 10,000]"),
        (Options(("rbf", "linear")), "rbf", "poly", "one of 'rbf', 'linear'"),
    ],
)
def test_a_rule_and_its_words_come_from_one_declaration(
    rule: object, inside: object, outside: object, words: str
) -> None:
    param = Param("x", type(inside), "a parameter", valid=rule)
    assert param.check(inside, "--plug-x") == inside and str(rule) == words
    with pytest.raises(UserError, match=rf"^--plug-x must be {re.escape(words)}, got {outside!r}$"):
        param.check(outside, "--plug-x")


def test_a_value_is_checked_for_its_kind_first_and_the_command_lines_text_converted() -> None:
    param = Param("projection_dim", int, "M", valid=Interval(1, None))
    assert param.check("64", "--ranpac-projection-dim", text=True) == 64
    for given, said in (("10k", "'10k'"), (True, "True"), (2.5, "2.5")):
        with pytest.raises(UserError, match=f"^--ranpac-projection-dim must be an integer, got {said}$"):
            param.check(given, "--ranpac-projection-dim", text=isinstance(given, str))


def test_a_declaration_that_breaks_its_own_rule_is_refused_when_made() -> None:
    class ZeroDefault(_Plugin):
        def __init__(self, k: int = 0, device: str = "cpu"):  # its Param asks for at least 1
            self.k, self.device = k, device

    with pytest.raises(ValueError, match="baseline ZeroDefault's k default must be at least 1, got 0"):
        register_baseline("zero_default_plugin")(ZeroDefault)
    assert "zero_default_plugin" not in BASELINES
    with pytest.raises(ValueError, match="is no constraint"):
        Param("k", int, "k", valid=lambda k: k > 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="closed='both sides'"):
        Interval(0, 1, closed="both sides")


@pytest.mark.parametrize("method", BUILT_IN)
def test_every_built_in_parameter_is_a_keyword_of_its_estimator(method: str) -> None:
    """One name for each (RanPAC's projection size is `projection_dim` on the class, in its Param,
    in METHOD_NAME and --METHOD-NAME): a declaration names its estimator's keyword, whose default
    is the parameter's and keeps its rule."""
    keywords = inspect.signature(BASELINES[method]).parameters
    for param in params_of(method):
        assert param.name in keywords and keywords[param.name].default == param.default, param
        assert param.check(param.default, param.name) == param.default
    if method == "ranpac":
        assert [(p.name, p.default) for p in params_of(method)] == [("projection_dim", 10_000), ("seed", 0)]


def test_a_plugin_param_not_named_after_a_keyword_is_refused() -> None:
    class Misnamed(_Plugin):
        params = (Param("m", int, "size", valid=Interval(1, None)),)

    with pytest.raises(ValueError, match="not a Param named after a keyword of __init__ with a default"):
        register_baseline("misnamed_plugin")(Misnamed)
    assert "misnamed_plugin" not in BASELINES


class _Plugin:
    """A plug-in of the tests: predicts the first class it saw."""

    incremental = True
    deterministic = True
    params = (Param("k", int, "a parameter", valid=Interval(1, None)),)

    def __init__(self, k: int = 1, device: str = "cpu"):
        self.k, self.device = k, device

    def partial_fit(self, features: object, labels: object) -> _Plugin:
        self.first_ = int(np.asarray(labels).min())
        return self

    def predict(self, features: object) -> np.ndarray:
        return np.full(len(features), self.first_)  # type: ignore[arg-type]

    def num_parameters(self) -> int:
        return 1


@pytest.fixture(params=[False, True], ids=["not by default", "by default"])
def plugin(request: pytest.FixtureRequest) -> Iterator[tuple[str, bool]]:
    """The plug-in registered as outside code registers it, with `runs_by_default` as asked."""
    cls = type("Plugin", (_Plugin,), {"runs_by_default": request.param})
    register_baseline("plugin_first")(cls)
    try:
        yield "plugin_first", request.param
    finally:
        del BASELINES["plugin_first"]


def test_a_plugin_runs_by_default_everywhere_or_nowhere_as_it_declares(
    plugin: tuple[str, bool], tmp_path: Path
) -> None:
    name, by_default = plugin
    expected = (*BUILT_IN, name) if by_default else BUILT_IN
    assert default_baselines() == expected
    # the command line's request and the API's (`tosca_heads.baselines(store)`: methods=None)
    assert check_request(BaselinesRequest(store=tmp_path))[0] == expected
    api = _request(BaselinesRequest, "baselines", {"store": tmp_path, "methods": None, "with_tosca": False})
    assert check_request(api)[0] == expected
    # a suite without `methods`: the same list (before issue 45: every registered baseline)
    spec = parse_suite({"stores": [{"name": "A", "path": "a.zarr"}]}, tmp_path)
    assert spec.baselines == expected
    # the command itself: an unknown option lists the own options of the baselines it would run
    said = RUNNER.invoke(app, ["baselines", "--store", str(tmp_path), "--nope", "1"]).output
    offered = said.split("the baselines' own parameters are ")[1].split()
    assert ("--plugin-first-k" in " ".join(offered)) == by_default, said
    # named, it runs either way
    assert check_request(BaselinesRequest(store=tmp_path, methods=(name,)))[0] == (name,)
