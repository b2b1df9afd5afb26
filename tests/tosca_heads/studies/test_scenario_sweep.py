"""`tosca sweep --scenario NAME` (issue 56 point 1): each point is the scenario's TOSCA with its
recipe (the same figures as `tosca scenario` where nothing is held out), ranked on the validation
split read the same way, each router's answers a cell reused when asked the same; the folder is
its own kind."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pandas as pd
import pytest
from support.stores import synthetic_store
from typer.testing import CliRunner

import tosca_heads
from cli import app
from featcache.store import FeatureStore
from tosca_foundation.errors import UserError
from tosca_heads.applied.scenario_runs import run_scenario, store_labels
from tosca_heads.method.uncertainty import plus_four_se
from tosca_heads.records import cell

FSCIL = {"base_classes": 2, "ways": 2, "shots": 5, "sessions": 2}
FAST = {"epochs": 2, "batch_size": 8}
runner = CliRunner()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> FeatureStore:
    return synthetic_store(
        tmp_path_factory.mktemp("s") / "s.zarr", classes=6, per_class=20, test_per_class=10, spread=1.6
    )


def _sweep(store: FeatureStore, out: Path, grid: dict, **given) -> pd.DataFrame:
    given = {"jobs": 1, "scenario": "fscil", "scenario_values": FSCIL, **FAST, **given}
    return tosca_heads.sweep(store.path, grid, out, **given)


def test_a_point_without_validation_is_the_scenarios_tosca_with_its_recipe(store, tmp_path: Path) -> None:
    frame = _sweep(store, tmp_path / "sw", {"r": [2, 4]}, val_fraction=0.0)
    assert set(frame["split"]) == {"test"} and set(frame["r"]) == {2, 4}
    for r in (2, 4):
        tosca = {**FAST, "r": r, "routers": ("lda", "ncm")}
        results = run_scenario(store, "fscil", ("tosca",), FSCIL, {"tosca": tosca})
        for result in results:
            row = frame[(frame["r"] == r) & (frame["router"] == result.router)].iloc[0]
            assert {k: row[k] for k in result.figures} == result.figures


def test_points_are_ranked_on_validation_and_the_simplest_of_the_ties_is_chosen(
    store, tmp_path: Path
) -> None:
    frame = _sweep(store, tmp_path / "sw", {"r": [2, 4, 8], "l1": [0.0, 5e-3]}, rank_by="ncm")
    assert set(frame["split"]) == {"validation", "test"}
    ranked = frame[(frame["router"] == "ncm") & (frame["split"] == "validation")].reset_index(drop=True)
    best = ranked["A_last"].max()
    images = 6 * 4  # the last session answers every class's 4 held-out images
    floor = best - plus_four_se(best, images)
    tied = ranked[ranked["A_last"] >= floor]
    simplest = tied.sort_values(["r", "l1"], ascending=[True, False], kind="stable").iloc[0]
    results = (tmp_path / "sw" / "results.md").read_text()
    assert "ranked by ncm's A_last on the validation split" in results
    rows = [line for line in results.splitlines() if line.startswith("| ") and not line.startswith("| rank")]
    assert rows[0].startswith("| 1") and f"| {100 * best:.2f} ± " in rows[0]
    (chosen,) = [line for line in rows if line.split("|")[1].strip().rstrip("=").endswith("*")]
    assert chosen.split("|")[2:4] == [f" {simplest['r']} ", f" {simplest['l1']} "]
    assert sum(line.split("|")[1].strip().endswith("=") for line in rows) == len(tied)
    # six points, five honest routers computed by default, two splits
    assert len(frame) == 6 * 5 * 2 and frame["point"].nunique() == 6


def test_a_second_sweep_reuses_every_cell_and_a_grown_grid_runs_only_its_new_point(
    store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "sw"
    first = _sweep(store, out, {"r": [2, 4]})
    from tosca_heads.applied import scenario_point

    ran: list[int] = []
    original = scenario_point.ScenarioPoint.run
    monkeypatch.setattr(scenario_point.ScenarioPoint, "run", lambda self: ran.append(1) or original(self))
    again = _sweep(store, out, {"r": [2, 4]})
    assert not ran
    pd.testing.assert_frame_equal(first, again)
    grown = _sweep(store, out, {"r": [2, 4, 8]})
    assert len(ran) == 1 and grown["point"].nunique() == 3
    pd.testing.assert_frame_equal(grown[grown["r"] != 8].reset_index(drop=True), first)


def test_another_scenario_value_is_another_point(store, tmp_path: Path) -> None:
    out = tmp_path / "sw"
    five = _sweep(store, out, {"r": [2]})
    three = _sweep(store, out, {"r": [2]}, scenario_values={**FSCIL, "shots": 3})
    assert set(five["point"]).isdisjoint(three["point"])
    assert len([p for p in out.iterdir() if p.is_dir()]) == 2 * 5  # two points, five routers each


def test_each_seed_is_its_own_point(store, tmp_path: Path) -> None:
    """The recipe's seed and the validation split's are two values of a point's identity (they
    shared one name once, and two seeds were one point: the last seed's)."""
    frame = _sweep(store, tmp_path / "sw", {"seed": [0, 1]}, val_fraction=0.0)
    assert frame["point"].nunique() == 2 and set(frame["seed"]) == {0, 1}
    for seed in (0, 1):
        tosca = {**FAST, "seed": seed, "routers": ("lda",)}
        (alone,) = run_scenario(store, "fscil", ("tosca",), FSCIL, {"tosca": tosca})
        row = frame[(frame["seed"] == seed) & (frame["router"] == "lda")].iloc[0]
        assert {k: row[k] for k in alone.figures} == alone.figures


def test_an_edited_cell_is_refused_in_one_line_before_any_work(store, tmp_path: Path) -> None:
    out = tmp_path / "sw"
    _sweep(store, out, {"r": [2]})
    kept = next(p for p in sorted(out.iterdir()) if p.is_dir())
    answers = kept / cell.STEP_ANSWERS
    data = bytearray(answers.read_bytes())
    data[-1] ^= 1
    answers.write_bytes(bytes(data))
    with pytest.raises(UserError, match=r"edited or damaged|changed since|does not match"):
        _sweep(store, out, {"r": [2]})


def test_told_the_task_ranks_the_told_module(store, tmp_path: Path) -> None:
    frame = _sweep(
        store, tmp_path / "til", {"r": [2, 4]}, scenario="til", scenario_values={}, init_cls=2, increment=2
    )
    assert set(frame["router"]) == {"told task"} and len(frame) == 2 * 2


def test_a_scenario_sweep_and_a_class_incremental_sweep_never_share_a_folder(store, tmp_path: Path) -> None:
    out = tmp_path / "sw"
    _sweep(store, out, {"r": [2]})
    with pytest.raises(UserError, match=r"not a sweep folder|is a tosca scenario-sweep folder"):
        tosca_heads.sweep(store.path, {"r": [2]}, out, jobs=1, init_cls=2, increment=2, **FAST)


def test_the_command_says_the_plan_and_the_point_chosen(store, tmp_path: Path) -> None:
    out = tmp_path / "sw"
    args = ["sweep", "--store", str(store.path), "--scenario", "fscil", "--jobs", "1", "--out", str(out)]
    args += [f"--set={k}={v}" for k, v in FSCIL.items()] + [
        "--r",
        "2,4",
        "--epochs",
        "2",
        "--batch-size",
        "8",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    said = result.output
    assert "sweep under scenario fscil: 3 tasks, 6 classes" in said
    assert "ranked on validation (10% of each class held out for validation (seed 0)" in said
    assert "by lda's A_last" in said  # the scenario's TOSCA row, not the class-incremental sweep's entropy
    assert "chosen on validation: r=" in said and "results.csv" in said
    json_args = [*args, "--json"]
    rows = json.loads(runner.invoke(app, json_args).stdout)
    assert len(rows) == 2 * 5 * 2 and all(0 <= row["A_last"] <= 1 for row in rows)


def test_a_dry_run_says_what_would_run_and_for_how_long_and_writes_nothing(store, tmp_path: Path) -> None:
    out = tmp_path / "sw"
    args = ["sweep", "--store", str(store.path), "--scenario", "fscil", "--jobs", "1", "--out", str(out)]
    args += [f"--set={k}={v}" for k, v in FSCIL.items()] + ["--epochs", "2", "--batch-size", "8"]
    said = runner.invoke(app, [*args, "--r", "2,4", "--dry-run"])
    assert said.exit_code == 0, said.output
    assert "sweep under scenario fscil: 3 tasks, 6 classes" in said.output
    assert "2 point(s) to run, 0 in the folder already" in said.output
    assert "estimated: about" in said.output and f"folder {out} (new)" in said.output
    assert not out.exists()  # nothing written, nothing learnt
    _sweep(store, out, {"r": [2, 4]})
    planned = json.loads(runner.invoke(app, [*args, "--r", "2,4,8", "--dry-run", "--json"]).stdout)
    assert planned["points"] == 3 and planned["to_run"] == 1 and planned["ranked_on"] == "validation"
    assert planned["estimate_seconds"] > 0
    again = json.loads(runner.invoke(app, [*args, "--r", "2,4", "--dry-run", "--json"]).stdout)
    assert again["to_run"] == 0 and again["estimate_seconds"] < planned["estimate_seconds"]


def test_a_points_estimate_grows_with_its_stream(store) -> None:
    """More sessions to learn and answer cost more; the class-incremental cost model's step timed once."""
    from tosca_heads.applied import scenario_cost
    from tosca_heads.method.scenarios import scenario

    labels = store_labels(store)
    kind = scenario("fscil", "--scenario")
    seconds = [
        scenario_cost.tosca_seconds(kind.plan(labels, **{**FSCIL, "sessions": n}), FAST, store.dim, True)
        for n in (1, 2)
    ]
    assert 0 < seconds[0] < seconds[1]


@pytest.mark.heavy
def test_on_dask_workers_a_scenario_sweep_gives_the_serial_numbers(store, tmp_path: Path) -> None:
    grid = {"r": [2, 4, 8]}
    serial = _sweep(
        store, tmp_path / "one", grid, scenario="blurry", scenario_values={"tasks": 2, "eval_period": 30}
    )
    spread = _sweep(
        store,
        tmp_path / "two",
        grid,
        jobs=2,
        scenario="blurry",
        scenario_values={"tasks": 2, "eval_period": 30},
    )
    figures = ["point", "router", "split", "A_last", "A_AUC"]
    pd.testing.assert_frame_equal(serial[figures], spread[figures])


def test_the_refit_command_gives_the_chosen_points_figures(store, tmp_path: Path) -> None:
    args = [
        "sweep",
        "--store",
        str(store.path),
        "--scenario",
        "fscil",
        "--jobs",
        "1",
        "--out",
        str(tmp_path / "sw"),
    ]
    args += [f"--set={k}={v}" for k, v in FSCIL.items()] + [
        "--r",
        "2,4",
        "--epochs",
        "2",
        "--batch-size",
        "8",
    ]
    said = runner.invoke(app, args)
    line = next(x for x in said.output.splitlines() if x.startswith("refit it as a scenario run: "))
    refit = [*shlex.split(line.split(": ", 1)[1])[1:], "--run", str(tmp_path / "run"), "--json"]
    fitted = json.loads(runner.invoke(app, refit).stdout)
    frame = pd.read_csv(tmp_path / "sw" / "results.csv")
    r = int(refit[refit.index("--r") + 1])
    for router, figures in fitted["routers"].items():
        row = frame[(frame["r"] == r) & (frame["router"] == router) & (frame["split"] == "test")].iloc[0]
        assert figures["A_last"] == pytest.approx(row["A_last"], abs=1e-12)
        assert fitted["validation"][router]["A_last"] == pytest.approx(
            frame[(frame["r"] == r) & (frame["router"] == router) & (frame["split"] == "validation")].iloc[0][
                "A_last"
            ],
            abs=1e-12,
        )
