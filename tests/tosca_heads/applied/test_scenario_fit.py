"""`tosca fit --scenario NAME` (issue 56 point 1): TOSCA with its recipe under a scenario, the
figures those of the one scenario path, kept as a scenario run that `tosca eval` and `tosca routers`
read from its answers (trained once), another config refused in its folder, and its kept model
predicting what the stream's last step answered."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support.stores import synthetic_store
from typer.testing import CliRunner

import tosca_heads
from cli import app
from featcache.store import FeatureStore
from tosca_foundation.errors import UserError
from tosca_heads.applied import scenario_point
from tosca_heads.applied.scenario_runs import plan_classes, run_scenario, store_labels
from tosca_heads.method.scenarios import scenario
from tosca_heads.records.run_config import read_run_config

FSCIL = {"base_classes": 2, "ways": 2, "shots": 5, "sessions": 2}
FAST = {"epochs": 2, "batch_size": 8}
runner = CliRunner()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> FeatureStore:
    return synthetic_store(
        tmp_path_factory.mktemp("s") / "s.zarr", classes=6, per_class=20, test_per_class=10, spread=1.6
    )


def test_a_scenario_fit_is_the_scenarios_tosca_with_its_recipe(store, tmp_path: Path) -> None:
    made = tosca_heads.fit(
        store.path, run=tmp_path / "run", scenario="fscil", scenario_values=FSCIL, r=4, **FAST
    )
    expected = run_scenario(
        store, "fscil", ("tosca",), FSCIL, {"tosca": {**FAST, "r": 4, "routers": ("lda", "ncm")}}
    )
    for result in expected:
        assert made.figures[result.router] == result.figures
        assert made.curves[result.router] == result.curve
    assert made.validation is None and made.recipe["r"] == 4


def test_eval_and_routers_read_the_kept_answers_and_train_nothing(
    store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    made = tosca_heads.fit(
        store.path, run=run, scenario="fscil", scenario_values=FSCIL, val_fraction=0.2, **FAST
    )
    monkeypatch.setattr(
        scenario_point.ScenarioPoint, "run_keeping", lambda self, keep: pytest.fail("trained again")
    )
    again = tosca_heads.evaluate(run)
    assert again.figures == made.figures and again.validation == made.validation and again.reused
    assert tosca_heads.fit(
        store.path, run=run, scenario="fscil", scenario_values=FSCIL, val_fraction=0.2, **FAST
    ).reused
    said = runner.invoke(app, ["routers", str(run), "--json"])
    rows = json.loads(said.stdout)
    assert {(r["router"], r["split"]) for r in rows} == {
        (r, s) for r in made.figures for s in ("test", "validation")
    }
    shown = runner.invoke(app, ["eval", str(run)])
    assert shown.exit_code == 0 and "val A_last" in shown.output and "kept answers read" in shown.output


def test_another_config_in_the_same_folder_is_refused_in_one_line(store, tmp_path: Path) -> None:
    run = tmp_path / "run"
    tosca_heads.fit(store.path, run=run, scenario="fscil", scenario_values=FSCIL, **FAST)
    with pytest.raises(
        UserError, match=r"made with another config or store \(recipe.r: 2 -> 8\); pass another"
    ):
        tosca_heads.fit(store.path, run=run, scenario="fscil", scenario_values=FSCIL, r=8, **FAST)
    with pytest.raises(
        UserError, match=r"made with another config or store \(scenario.values.shots: 5 -> 3\)"
    ):
        tosca_heads.fit(store.path, run=run, scenario="fscil", scenario_values={**FSCIL, "shots": 3}, **FAST)


@pytest.mark.parametrize(("name", "values"), [("fscil", FSCIL), ("blurry", {"tasks": 2, "eval_period": 30})])
def test_the_kept_model_predicts_what_the_last_step_answered(store, tmp_path: Path, name, values) -> None:
    run = tmp_path / "run"
    made = tosca_heads.fit(store.path, run=run, scenario=name, scenario_values=values, **FAST)
    predictor = tosca_heads.load_run(run, device="cpu")
    result = run_scenario(store, name, ("tosca",), values, {"tosca": {**FAST, "routers": ("lda", "ncm")}})
    plan = scenario(name).plan(store_labels(store), **values)
    order = plan_classes(plan, store_labels(store), store)[0]  # a plan id's store label
    last = plan.steps[-1].eval_rows
    for found in result:
        answered = predictor.predict(store.features("test")[last], found.router)
        tied = found.answers[-1] < 0
        expected = np.where(tied, found.answers[-1], order[np.where(tied, 0, found.answers[-1])])
        assert np.array_equal(answered.classes, expected)
        assert made.figures[found.router]["A_last"] == found.figures["A_last"]
    said = tosca_heads.predict(run, store.features("test")[:3], router="lda")
    assert said.class_names == [str(c) for c in said.classes]  # a store without class names: its label ids


def test_a_class_incremental_reader_says_what_reads_a_scenario_run(store, tmp_path: Path) -> None:
    run = tmp_path / "run"
    tosca_heads.fit(store.path, run=run, scenario="til", init_cls=2, increment=2, **FAST)
    with pytest.raises(
        UserError, match=r"was fit under a scenario: `tosca eval`, `tosca routers` and `tosca predict`"
    ):
        read_run_config(run)
    made = tosca_heads.evaluate(run)
    assert list(made.figures) == ["told task"]


def test_a_damaged_model_is_one_line(store, tmp_path: Path) -> None:
    run = tmp_path / "run"
    tosca_heads.fit(store.path, run=run, scenario="fscil", scenario_values=FSCIL, **FAST)
    model = run / "model" / "state" / "model.safetensors"
    data = bytearray(model.read_bytes())
    data[-1] ^= 1
    model.write_bytes(bytes(data))
    with pytest.raises(UserError, match=r"is not the file that was written"):
        tosca_heads.load_run(run)


def test_an_edited_answer_is_one_line(store, tmp_path: Path) -> None:
    run = tmp_path / "run"
    tosca_heads.fit(store.path, run=run, scenario="fscil", scenario_values=FSCIL, **FAST)
    answers = run / "lda" / "state" / "answers.safetensors"
    data = bytearray(answers.read_bytes())
    data[-1] ^= 1
    answers.write_bytes(bytes(data))
    said = runner.invoke(app, ["eval", str(run)])
    assert said.exit_code == 2 and len(said.output.strip().splitlines()) == 1, said.output


def test_the_command_says_its_plan_then_the_routers(store, tmp_path: Path) -> None:
    args = ["fit", "--store", str(store.path), "--scenario", "fscil", "--run", str(tmp_path / "run")]
    args += [f"--set={k}={v}" for k, v in FSCIL.items()] + ["--epochs", "2", "--router", "lda,ncm"]
    said = runner.invoke(app, args)
    assert said.exit_code == 0, said.output
    assert "scenario fscil: 3 tasks, 6 classes; no validation split; answered by lda, ncm" in said.output
    assert "│ lda " in said.output and "│ ncm " in said.output and f"run {tmp_path / 'run'}" in said.output
