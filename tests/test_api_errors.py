"""A mistake in a Python call is one line in Python's words (issue 49, point 1): every public
function of both packages refuses at least one mistake (an unknown keyword, with the closest one;
a wrong type; a bad value) as the project's own `UserError` that is also the `TypeError` or
`ValueError` Python would raise, naming the keyword as Python names it and no --flag."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.stores import synthetic_store

import featcache
import tosca_heads
from featcache import stage1_api as stage1
from tosca_foundation.errors import UserError, UserTypeError, UserValueError
from tosca_heads import stage2_api as stage2

SPLIT = {"init_cls": 2, "increment": 2}
# public functions no argument of which can be wrong: nothing to refuse
TAKE_NOTHING = {"default_baselines"}


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A tiny store, a run fitted on it (for the calls that need one) and an empty folder."""
    root = tmp_path_factory.mktemp("api_errors")
    store = synthetic_store(root / "s.zarr", classes=4, per_class=8, test_per_class=4)
    tosca_heads.fit(store.path, run=root / "run", epochs=1, batch_size=8, **SPLIT)
    return {"root": root, "store": store.path, "run": root / "run", "x": store.features("test")}


class Lacking:  # no partial_fit, predict, ...: no baseline
    incremental = True


class NotARouter:
    name = "not_a_router"


# (public function, the call, Python's kind of mistake, what the line must say); `p` is `place`
MISTAKES: list[tuple[str, Callable[[dict[str, Any]], Any], type[Exception], tuple[str, ...]]] = [
    (
        "fit",
        lambda p: tosca_heads.fit(p["store"], write=False, epoch=2),
        TypeError,
        ("fit() got an unknown keyword argument 'epoch'", "did you mean 'epochs'?", "valid: store, task"),
    ),
    (
        "fit",
        lambda p: tosca_heads.fit(p["store"], write=False, epochs=-1),
        ValueError,
        ("epochs must be at least 1",),
    ),
    (
        "fit",
        lambda p: tosca_heads.fit(p["store"], write=False, epochs="2"),
        TypeError,
        ("epochs must be an integer",),
    ),
    (
        "fit",
        lambda p: tosca_heads.fit(p["store"], write=False, val_fraction="0.1"),
        TypeError,
        ("fit() keyword val_fraction='0.1' must be a number",),
    ),
    (
        "fit",
        lambda p: tosca_heads.fit(p["store"], write=False, router="fcam"),
        ValueError,
        ("unknown router 'fcam'", "did you mean 'fecam'?"),
    ),
    (
        "fit",
        lambda p: tosca_heads.fit(p["store"], write=False, device="gpu"),
        ValueError,
        ("unknown device 'gpu'",),
    ),
    (
        "fit",
        lambda p: tosca_heads.fit(p["store"], write=False, init_cls=9),
        ValueError,
        ("init_cls 9 is more than the store's 4 classes",),
    ),
    (
        "sweep",
        lambda p: tosca_heads.sweep(p["store"], {"rr": [8, 16]}, p["root"] / "sweep"),
        ValueError,
        ("sweep() grid key 'rr'", "did you mean 'r'?", "valid: r, s, l1"),
    ),
    (
        "sweep",
        lambda p: tosca_heads.sweep(p["store"], {"r": [8, "x"]}, p["root"] / "sweep", **SPLIT),
        TypeError,
        ("r must be an integer, got 'x'",),
    ),
    (
        "sweep",
        lambda p: tosca_heads.sweep(p["store"], {"r": [8]}, p["root"] / "sweep", epoch=1),
        TypeError,
        ("sweep() got an unknown keyword argument 'epoch'", "did you mean 'epochs'?"),
    ),
    (
        "sweep",
        lambda p: tosca_heads.sweep(p["store"], {"r": [8]}, p["root"] / "sweep", jobs=0),
        ValueError,
        ("jobs must be at least 1",),
    ),
    (
        "sweep",
        lambda p: tosca_heads.sweep(p["store"], {"r": [8]}, p["root"] / "sweep", rank_by="entropi"),
        ValueError,
        ("unknown rank_by 'entropi'", "did you mean 'entropy'?"),
    ),
    (
        "baselines",
        lambda p: tosca_heads.baselines(p["store"], ["ranpc"], out=p["root"] / "b"),
        ValueError,
        ("unknown methods 'ranpc'", "did you mean 'ranpac'?"),
    ),
    (
        "baselines",
        lambda p: tosca_heads.baselines(p["store"], ["ranpac"], ranpac_projection_dm=64, out=p["root"] / "b"),
        TypeError,
        ("baselines() got an unknown keyword argument 'ranpac_projection_dm'", "'ranpac_projection_dim'?"),
    ),
    (
        "scenario",
        lambda p: tosca_heads.scenario(p["store"], "tii", ["simplecil"]),
        ValueError,
        ("'tii'", "'til'"),
    ),
    (
        "scenario",
        lambda p: tosca_heads.scenario(p["store"], "fscil", ["simplecil"], shots=0),
        ValueError,
        ("shots",),
    ),
    (
        "scenario",
        lambda p: tosca_heads.scenario(p["store"], "cil", ["tosca"], routers=["lda", "oracle"]),
        ValueError,
        ("routers oracle is a reference, never a scenario's result",),
    ),
    (
        "scenario",
        lambda p: tosca_heads.scenario(p["store"], "dil", ["tosca"], recurring="merge"),
        ValueError,
        ("recurring must be one of task_rows, first_task, got 'merge'",),
    ),
    (
        "scenario",
        lambda p: tosca_heads.scenario(p["store"], "cil", ["tosca"], later_modules="last"),
        ValueError,
        ("later_modules must be one of train, first, got 'last'",),
    ),
    (  # issue 56 point 1: baselines under a scenario, in Python's words
        "baselines",
        lambda p: tosca_heads.baselines(p["store"], ["simplecil"], scenario="tii", out=p["root"] / "b"),
        ValueError,
        ("unknown scenario 'tii'", "did you mean 'til'?"),
    ),
    (
        "baselines",
        lambda p: tosca_heads.baselines(
            p["store"], ["simplecil"], scenario="fscil", scenario_values={"shots": 0}, out=p["root"] / "b"
        ),
        ValueError,
        ("fscil shots must be at least 1, got 0",),
    ),
    (
        "baselines",
        lambda p: tosca_heads.baselines(
            p["store"], ["simplecil"], scenario="til", scenario_values="shots=5", out=p["root"] / "b"
        ),
        TypeError,
        ("scenario_values must be a mapping of names to values",),
    ),
    (
        "baselines",
        lambda p: tosca_heads.baselines(
            p["store"], ["simplecil"], scenario="til", device="cuda", out=p["root"] / "b"
        ),
        ValueError,
        ("scenario til runs on the CPU", "leave out device cuda"),
    ),
    (  # an infinite parameter (issue 57, point 1)
        "baselines",
        lambda p: tosca_heads.baselines(p["store"], ["klda"], klda_sigma=float("inf"), out=p["root"] / "b"),
        ValueError,
        ("klda_sigma must be a finite number more than 0, got inf",),
    ),
    (  # issue 57, point 10: a class's hint in flags ("lower --klda-dim"), said in the API's words
        "baselines",
        lambda p: tosca_heads.baselines(p["store"], ["klda"], klda_dim=400_000, out=p["root"] / "b"),
        ValueError,
        ("KLDA with D = 400,000", "lower klda_dim (or klda_members)"),
    ),
    (
        "baselines",
        lambda p: tosca_heads.baselines(p["store"], ["ranpac"], val_fraction=0.9, out=p["root"] / "b"),
        ValueError,
        ("val_fraction must be in [0, 0.5]",),
    ),
    ("evaluate", lambda p: tosca_heads.evaluate(3), TypeError, ("evaluate() keyword run=3 must be a path",)),
    (
        "evaluate",
        lambda p: tosca_heads.evaluate(p["run"], router="fcam"),
        ValueError,
        ("unknown router 'fcam'", "did you mean 'fecam'?"),
    ),
    (
        "load_run",
        lambda p: tosca_heads.load_run(p["run"], device="gpu"),
        ValueError,
        ("unknown device 'gpu'",),
    ),
    (
        "predict",
        lambda p: tosca_heads.predict(p["run"], p["x"], router="ldaa"),
        ValueError,
        ("unknown router 'ldaa'", "did you mean 'lda'?"),
    ),
    (
        "predict",
        lambda p: tosca_heads.predict(p["run"], p["x"].astype(str), router="lda"),
        TypeError,
        ("features of dtype <U",),
    ),
    ("predict", lambda p: tosca_heads.predict(p["run"], p["x"], router=3), TypeError, ("router=3",)),
    (
        "validation_split",
        lambda p: tosca_heads.validation_split(p["store"], val_fraction=3),
        ValueError,
        ("val_fraction must be in [0, 0.5]",),
    ),
    (
        "register_metric",
        lambda p: tosca_heads.register_metric("m", better="hihger"),
        ValueError,
        ("better 'hihger'", "did you mean 'higher'?"),
    ),
    (
        "register_metric",
        lambda p: tosca_heads.register_metric("m", 3),
        TypeError,
        ("label=3 must be text or None",),
    ),
    (
        "register_router",
        lambda p: tosca_heads.register_router(NotARouter),
        TypeError,
        ("register_router() keyword cls=", "must be a subclass of Router"),
    ),
    (
        "register_baseline",
        lambda p: tosca_heads.register_baseline("lacking")(Lacking),
        TypeError,
        ("baseline 'lacking' lacks partial_fit",),
    ),
    ("register_baseline", lambda p: tosca_heads.register_baseline(3), TypeError, ("name=3 must be text",)),
    (
        "register_logger",
        lambda p: tosca_heads.register_logger(NotARouter),
        TypeError,
        ("register_logger() keyword cls=", "must be a subclass of Logger"),
    ),
    (
        "run_suite",
        lambda p: tosca_heads.run_suite({}, p["root"] / "suite"),
        TypeError,
        ("run_suite() keyword spec",),
    ),
    (
        "run_suite",
        lambda p: tosca_heads.run_suite(
            tosca_heads.parse_suite({"stores": [{"name": "A", "path": str(p["store"])}]}, p["root"]), jobs=0
        ),
        ValueError,
        ("jobs must be at least 1",),
    ),
    (
        "parse_suite",
        lambda p: tosca_heads.parse_suite({"seedz": [0]}, p["root"]),
        ValueError,
        ("unknown key 'seedz'", "did you mean 'seeds'?"),
    ),
    (
        "parse_suite",
        lambda p: tosca_heads.parse_suite([], p["root"]),
        TypeError,
        ("parse_suite() keyword data",),
    ),
    (
        "load_suite",
        lambda p: tosca_heads.load_suite(3),
        TypeError,
        ("load_suite() keyword path=3 must be a path",),
    ),
    (
        "TOSCAClassifier",
        lambda p: tosca_heads.TOSCAClassifier(epoch=2),
        TypeError,
        ("TOSCAClassifier() got an unknown keyword argument 'epoch'", "did you mean 'epochs'?"),
    ),
    (
        "TOSCAClassifier",
        lambda p: tosca_heads.TOSCAClassifier(router="ldaa", epochs=1).fit(
            p["x"], np.repeat(np.arange(4), 4)
        ),
        ValueError,
        ("unknown router 'ldaa'", "did you mean 'lda'?"),
    ),
    (  # the class's hint said in the estimator's words: its `params` keys
        "BaselineClassifier",
        lambda p: tosca_heads.BaselineClassifier("klda", {"dim": 400_000}).fit(
            p["x"], np.repeat(np.arange(4), 4)
        ),
        ValueError,
        ("KLDA with D = 400,000", "lower params key dim (or params key members)"),
    ),
    (
        "BaselineClassifier",
        lambda p: tosca_heads.BaselineClassifier("ranpc").fit(p["x"], np.repeat(np.arange(4), 4)),
        ValueError,
        ("unknown method 'ranpc'", "did you mean 'ranpac'?"),
    ),
    (
        "BaselineClassifier",
        lambda p: tosca_heads.BaselineClassifier("ranpac", {"projection_dm": 64}).fit(
            p["x"], np.repeat(np.arange(4), 4)
        ),
        TypeError,
        ("got an unknown keyword argument 'projection_dm'", "did you mean 'projection_dim'?"),
    ),
    (
        "open_store",
        lambda p: featcache.open_store(3),
        TypeError,
        ("open_store() keyword path=3 must be a path",),
    ),
    (
        "extract",
        lambda p: featcache.extract(
            "test_efficientnet", "imagefolder", p["root"], store=p["root"] / "e.zarr", view=2
        ),
        TypeError,
        ("extract() got an unknown keyword argument 'view'", "did you mean 'views'?"),
    ),
    (
        "extract",
        lambda p: featcache.extract(
            "test_efficientnet", "imagefolder", p["root"], store=p["root"] / "e.zarr", views=-1
        ),
        ValueError,
        ("views must be 0 or more, got -1",),
    ),
    ("embed", lambda p: featcache.embed(p["store"], 3), TypeError, ("embed() keyword images=3",)),
    (
        "embed",
        lambda p: featcache.embed(p["store"], [p["root"]], device="gpu"),
        ValueError,
        ("unknown device 'gpu'",),
    ),
    (
        "register_backbone",
        lambda p: featcache.register_backbone(3),
        TypeError,
        ("spec=3 must be a BackboneSpec",),
    ),
    (
        "register_dataset",
        lambda p: featcache.register_dataset("odd", 5, "five classes", featcache.Split(2, 2)),
        ValueError,
        ("5 classes do not split into a first task of 2 and tasks of 2",),
    ),
    (
        "check_baseline",
        lambda p: tosca_heads.check_baseline(tosca_heads.BASELINES["simplecil"], params=[1]),
        TypeError,
        ("params",),
    ),
    ("check_baseline", lambda p: tosca_heads.check_baseline("simplecil"), TypeError, ("got str",)),
    (
        "check_baseline",
        lambda p: tosca_heads.check_baseline(tosca_heads.BASELINES["ranpac"], {"projection_dim": 0}),
        ValueError,
        ("check_baseline's projection_dim must be at least 1, got 0",),
    ),
    (
        "check_router",
        lambda p: tosca_heads.check_router(type(tosca_heads.ROUTERS["entropy"]), learner=[("dim", 8)]),
        TypeError,
        ("learner",),
    ),
    ("check_router", lambda p: tosca_heads.check_router(int), ValueError, ("router int: is not a subclass",)),
    (
        "register_dataset",
        lambda p: featcache.register_dataset(3, 3, "x"),
        TypeError,
        ("name=3 must be text",),
    ),
]


@pytest.mark.parametrize(
    ("name", "call", "kind", "said"),
    MISTAKES,
    ids=[f"{name}-{i}" for i, (name, *_) in enumerate(MISTAKES)],
)
def test_a_mistake_is_one_line_in_pythons_words(
    place: dict[str, Any],
    name: str,
    call: Callable[[dict[str, Any]], Any],
    kind: type[Exception],
    said: tuple[str, ...],
) -> None:
    with pytest.raises(kind) as caught:
        call(place)
    error = caught.value
    assert isinstance(error, UserError), f"{name}: {type(error).__name__}: {error}"
    assert isinstance(error, UserTypeError if kind is TypeError else UserValueError)
    message = str(error)
    assert len(message.splitlines()) == 1, message
    assert not re.search(r"--[a-z]", message), f"{name} speaks of a flag: {message}"
    for words in said:
        assert words in message, f"{name}: {words!r} not in {message!r}"


def test_every_public_function_and_estimator_has_a_mistake_tested() -> None:
    tested = {name for name, *_ in MISTAKES}
    public = {
        name
        for module in (stage1, stage2)
        for name in module.__all__
        if inspect.isfunction(getattr(module, name))
    } | {"TOSCAClassifier", "BaselineClassifier"}
    assert public - TAKE_NOTHING <= tested, f"no mistake tested for {sorted(public - TAKE_NOTHING - tested)}"
    assert not inspect.signature(stage2.default_baselines).parameters  # it takes nothing to get wrong


def test_the_classes_are_exported_and_the_command_line_still_catches_them() -> None:
    assert featcache.UserError is tosca_heads.UserError is UserError
    assert issubclass(tosca_heads.UserValueError, UserError) and issubclass(
        tosca_heads.UserValueError, ValueError
    )
    assert issubclass(tosca_heads.UserTypeError, UserError) and issubclass(
        tosca_heads.UserTypeError, TypeError
    )
    assert not issubclass(UserError, (ValueError, TypeError))  # a missing file is neither


def test_the_command_line_still_names_its_flags(tmp_path: Path) -> None:
    """The same shared checks, asked by the command line: its flags, exit code 2."""
    from typer.testing import CliRunner

    from tosca_cli.app import app

    store = synthetic_store(tmp_path / "s.zarr", classes=4)
    said = CliRunner().invoke(
        app, ["fit", "--store", str(store.path), "--epochs", "0", "--run", str(tmp_path / "r")]
    )
    assert said.exit_code == 2 and "--epochs must be at least 1, got 0" in said.output, said.output
    said = CliRunner().invoke(app, ["sweep", "--store", str(store.path), "--r", "8", "--rank-by", "entropi"])
    assert said.exit_code == 2 and "unknown --rank-by 'entropi' (did you mean 'entropy'?)" in said.output


def test_a_numpy_grid_sweeps_the_points_the_command_line_names() -> None:
    """Python's grid values are values: numpy's integers are integers, 0 for a number is 0.0."""
    from tosca_heads.studies.sweeps import parse_values

    assert parse_values("r", np.array([8, 16])) == parse_values("r", "8,16") == [8, 16]
    assert parse_values("l1", [0, np.float32(5e-4)]) == parse_values("l1", "0,5e-4") == [0.0, 0.0005]
    assert type(parse_values("l1", [0])[0]) is float
    assert parse_values("r", [8.0]) == [8.0]  # kept, for the point's check to refuse as r's


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(
            lambda p: tosca_heads.fit(p["store"], run=p["root"] / "tight", epochs=1, **SPLIT), id="fit"
        ),
        pytest.param(
            lambda p: tosca_heads.sweep(
                p["store"], out=p["root"] / "tight-sweep", grid={"r": [4]}, epochs=1, **SPLIT
            ),
            id="sweep",
        ),
    ],
)
def test_a_fit_over_the_memory_budget_names_what_to_lower_in_pythons_words(
    place: dict[str, Any], monkeypatch: pytest.MonkeyPatch, call: Callable[[dict[str, Any]], Any]
) -> None:
    """Issue 57, point 10: TOSCA's own memory refusal said "lower --r, --s or --batch-size" to a
    Python caller; it names the keywords and the setting, as a UserValueError, and claims nothing."""
    monkeypatch.setattr("tosca_heads.engine.memory.memory_budget", lambda: 1)  # below any task
    with pytest.raises(UserValueError) as caught:
        call(place)
    message = str(caught.value)
    assert len(message.splitlines()) == 1 and not re.search(r"--[a-z]", message), message
    assert "TOSCA_MEMORY_BUDGET" in message and ("r, s or batch_size" in message or "increment" in message), (
        message
    )
    assert not (place["root"] / "tight").exists() and not (place["root"] / "tight-sweep").exists()
