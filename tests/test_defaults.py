"""The command line and the Python API are two faces of one function: for every command, the request
the command builds from its defaults is the request the API function builds from its own, every
option of the command is a parameter of the function (or is named here with the reason it is not),
and the same functions run. A default changed on one face only fails here."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import featcache.runner
import tosca_heads.running.runs
import tosca_heads.studies.comparison
import tosca_heads.studies.sweeps
from cli import app
from featcache import stage1_api as stage1
from featcache.extract_request import ExtractRequest
from tosca_heads import stage2_api as stage2
from tosca_heads.requests.command_requests import FIT_FLAGS, SWEEP_FLAGS, SuiteRequest
from tosca_heads.studies.suite import suite_runner as suite_run
from tosca_heads.studies.sweeps import parse_values

STORE = Path("some/store.zarr")

# options a command has and its function has not, each with its reason
FACE_ONLY = {
    "json": "how the command prints its answer",
    "as_json_": "how the command prints its answer (--json)",
    "model": "the API takes the store itself (an opened FeatureStore or its path)",
    "dataset": "the API takes the store itself",
    "cache_dir": "the API takes the store itself",
    "router": "the routers the command's tables show (the API returns every router)",
    "shown": "the routers the command's tables show (the API returns every router)",
    "dry_run": "the sweep's printed plan (the API: sweeps.plan_sweep(request).estimate())",
}


class Captured(Exception):
    """Raised by a stand-in for the function a face calls, holding what it was called with."""

    def __init__(self, request: Any) -> None:
        super().__init__("captured")
        self.request = request


def capture(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> None:
    def stand_in(request: Any, *args: Any, **kwargs: Any) -> Any:
        raise Captured(request)

    monkeypatch.setattr(module, name, stand_in)


def from_command(args: list[str]) -> Any:
    result = CliRunner().invoke(app, args)
    assert isinstance(result.exception, Captured), result.output
    return result.exception.request


def from_api(call: Callable[[], Any]) -> Any:
    with pytest.raises(Captured) as caught:
        call()
    return caught.value.request


def given(values: dict[str, Any]) -> dict[str, Any]:
    """A request's dict of flags as given: a flag left at None was not given."""
    return {k: v for k, v in values.items() if v is not None}


def command_options(name: str) -> dict[str, Any]:
    """A command's options and arguments, name -> default, as click sees them."""
    group = typer.main.get_command(app)
    command = group.commands[name]  # type: ignore[attr-defined]
    return {p.name: p.default for p in command.params}


def api_parameters(function: Callable[..., Any]) -> dict[str, Any]:
    return {
        n: p.default
        for n, p in inspect.signature(function).parameters.items()
        if p.kind is not inspect.Parameter.VAR_KEYWORD
    }


FACES = [
    ("extract", stage1.extract, {"options": "every other flag of the command, by name"}),
    (
        "fit",
        stage2.fit,
        {
            "write": "Python only: keep the run in memory",
            "recipe": "the recipe flags, by name",
            "scenario_values": "a scenario's values as a mapping (the command: --set K=V)",
        },
    ),
    (
        "sweep",
        stage2.sweep,
        {
            "grid": "the swept flags",
            "fixed": "one-value flags, by name",
            "scenario_values": "a scenario's values as a mapping (the command: --set K=V)",
        },
    ),
    (
        "baselines",
        stage2.baselines,
        {"scenario_values": "a scenario's values as a mapping (the command: --set K=V)"},
    ),
    ("eval", stage2.evaluate, {}),
    ("predict", stage2.predict, {"features": "Python classifies features; the command embeds images first"}),
    (
        "suite",
        stage2.run_suite,
        {
            "spec": "the suite itself (the command's SUITE.toml or --preset)",
            "extract": "injected stage 1",
            "on_cell": "a callback",
            "on_start": "a callback",
            "runs_root": "where a suite without --out gets its folder (the command: runs/)",
            "estimate_extraction": "stage 1's extraction estimate for a dry run, handed in (the command's: featcache.extraction_estimate)",
        },
    ),
]
EXTRA_FLAGS = {"fit": {f.name for f in FIT_FLAGS}, "sweep": {f.name for f in SWEEP_FLAGS}}
COMMAND_ONLY = {
    "predict": {
        "images": "the command embeds images; Python passes features",
        "batch_size": "the backbone's batch (Python: featcache.embed)",
    },
    "baselines": {"set_values": "a scenario's values as K=V text (Python: scenario_values, a mapping)"},
    "sweep": {"set_values": "a scenario's values as K=V text (Python: scenario_values, a mapping)"},
    "fit": {"set_values": "a scenario's values as K=V text (Python: scenario_values, a mapping)"},
    "suite": {
        "suite": "the suite file (Python: spec)",
        "preset": "a shipped suite (Python: spec=preset's SuiteSpec)",
    },
}


@pytest.mark.parametrize("name, function, api_only", FACES, ids=[f[0] for f in FACES])
def test_every_option_is_a_parameter_with_the_same_default(
    name: str, function: Callable[..., Any], api_only: dict[str, str]
) -> None:
    options = command_options(name)
    parameters = api_parameters(function)
    missing = [
        o
        for o in options
        if o not in parameters
        and o not in FACE_ONLY
        and o not in EXTRA_FLAGS.get(name, ())
        and o not in COMMAND_ONLY.get(name, {})
        and not (name == "extract" and o in {f.name for f in dataclasses.fields(ExtractRequest)})
    ]
    assert not missing, f"`tosca {name}` options with no parameter of {function.__name__}: {missing}"
    unexplained = [
        p for p in parameters if p not in options and p not in api_only and p not in ("run", "store")
    ]
    assert not unexplained, f"{function.__name__} parameters with no option of `tosca {name}`: {unexplained}"
    for option, default in options.items():
        if option in parameters and parameters[option] is not inspect.Parameter.empty:
            expected = parameters[option]
            shown = str(default) if isinstance(expected, str) and isinstance(default, Path) else default
            if isinstance(expected, (list, tuple)):  # a command's list is comma-separated text
                parts = shown.split(",") if isinstance(shown, str) else shown
                expected, shown = tuple(expected), tuple(parts)
            assert shown == expected, (
                f"--{option}: `tosca {name}` defaults to {default!r}, {function.__name__} to {expected!r}"
            )


def test_fit_builds_the_same_request(monkeypatch: pytest.MonkeyPatch) -> None:
    capture(monkeypatch, tosca_heads.running.runs, "fit")
    command = from_command(["fit", "--store", str(STORE)])
    python = from_api(lambda: stage2.fit(STORE))
    assert dataclasses.replace(command, recipe=given(command.recipe)) == python
    command = from_command(["fit", "--store", str(STORE), "--task", "1", "--r", "8", "--device", "cpu"])
    python = from_api(lambda: stage2.fit(STORE, task=1, r=8, device="cpu"))
    assert dataclasses.replace(command, recipe=given(command.recipe)) == python


def test_sweep_builds_the_same_request(monkeypatch: pytest.MonkeyPatch) -> None:
    capture(monkeypatch, tosca_heads.studies.sweeps, "sweep")
    command = from_command(["sweep", "--store", str(STORE), "--r", "8,16", "--l1", "0.001"])
    python = from_api(lambda: stage2.sweep(STORE, {"r": [8, 16]}, l1=0.001))

    def parsed(grid: dict[str, Any]) -> dict[str, Any]:
        return {k: parse_values(k, v) for k, v in given(grid).items()}

    assert parsed(command.grid) == parsed(python.grid)  # the same points, the same swept flags
    assert dataclasses.replace(command, grid={}, shown=None) == dataclasses.replace(python, grid={})


def test_baselines_build_the_same_request(monkeypatch: pytest.MonkeyPatch) -> None:
    capture(monkeypatch, tosca_heads.studies.comparison, "compare")
    command = from_command(["baselines", "--store", str(STORE)])
    assert command == from_api(lambda: stage2.baselines(STORE))


def test_extract_builds_the_same_request(monkeypatch: pytest.MonkeyPatch) -> None:
    capture(monkeypatch, featcache.runner, "extract")
    command = from_command(["extract", "--model", "effnet_lite0", "--dataset", "eurosat"])
    assert command == from_api(lambda: stage1.extract("effnet_lite0", "eurosat"))


def test_suite_passes_its_defaults_to_run_suite() -> None:
    """`tosca suite` calls run_suite with the request's values: their defaults agree."""
    parameters = api_parameters(suite_run.run_suite)
    for f in dataclasses.fields(SuiteRequest):
        if f.name in parameters:
            assert f.default == parameters[f.name], (
                f"--{f.name}: SuiteRequest {f.default!r}, run_suite {parameters[f.name]!r}"
            )
