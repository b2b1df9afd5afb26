"""A suite of another scenario than `cil` (issue 56 point 1): each store and seed a cell of the
scenario's methods (TOSCA with each router from one training), its figures those of the one
scenario path, kept cells reused, a deterministic baseline run once, and its table beside a
class-incremental suite's without touching it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support.stores import synthetic_store
from typer.testing import CliRunner

from cli import app
from featcache.store import FeatureStore
from tosca_heads.applied.scenario_runs import run_scenario
from tosca_heads.studies.suite import parse_suite, run_suite, scenario_suite

FSCIL = {"base_classes": 2, "ways": 2, "shots": 5, "sessions": 2}
FLAGS = {"epochs": 2, "batch_size": 8}
runner = CliRunner()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> FeatureStore:
    return synthetic_store(
        tmp_path_factory.mktemp("s") / "s.zarr", classes=6, per_class=20, test_per_class=10, spread=1.6
    )


def _spec(store: FeatureStore, seeds: list[int], **more):
    data = {
        "name": "fs",
        "scenario": "fscil",
        "scenario_values": FSCIL,
        "seeds": seeds,
        "tosca": {"flags": FLAGS, "routers": ["lda", "ncm"]},
        "baselines": {"methods": ["simplecil", "ridge"]},
        "stores": [{"name": "syn", "path": str(store.path)}],
        **more,
    }
    return parse_suite(data, store.path.parent)


def test_each_seeds_figures_are_the_scenario_paths(store, tmp_path: Path) -> None:
    result = run_suite(_spec(store, [0, 1]), tmp_path / "suite", jobs=1, device="cpu")
    assert result.missing == [] and result.tables is None
    table = result.table
    for label, method, params in (
        ("tosca (ncm)", "tosca", lambda seed: {**FLAGS, "seed": seed, "routers": ("lda", "ncm")}),
        ("simplecil", "simplecil", lambda seed: {}),
    ):
        runs = [
            next(
                r
                for r in run_scenario(store, "fscil", (method,), FSCIL, {method: params(seed)})
                if r.label == label
            )
            for seed in (0, 1)
        ]
        row = table[(table["method"] == label) & (table["figure"] == "HM")].iloc[0]
        assert row["mean"] == pytest.approx(np.mean([r.figures["HM"] for r in runs]), abs=1e-12)
    ridge = table[(table["method"] == "ridge") & (table["figure"] == "A_last")].iloc[0]
    assert ridge["runs"] == 1 and np.isnan(ridge["std"])  # deterministic: run at the first seed only
    assert not (tmp_path / "suite" / "cells" / "syn" / "seed-1" / "ridge").exists()
    assert "| tosca (lda) | " in (tmp_path / "suite" / "table-fscil.md").read_text()


def test_a_rerun_reuses_every_cell_and_a_new_seed_runs_one(
    store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = run_suite(_spec(store, [0]), tmp_path / "suite", jobs=1, device="cpu")
    ran: list[str] = []
    original = scenario_suite.ScenarioCell.run
    monkeypatch.setattr(
        scenario_suite.ScenarioCell, "run", lambda self: ran.append(self.key) or original(self)
    )
    again = run_suite(_spec(store, [0]), tmp_path / "suite", jobs=1, device="cpu")
    assert ran == [] and [c.status for c in again.cells] == ["reused"]
    pd.testing.assert_frame_equal(first.table.drop(columns="seconds"), again.table.drop(columns="seconds"))
    grown = run_suite(_spec(store, [0, 3]), tmp_path / "suite", jobs=1, device="cpu")
    assert ran == ["syn/seed-3"] and [c.status for c in grown.cells] == ["reused", "ran"]


def test_tables_only_shows_what_is_kept_and_names_the_rest(store, tmp_path: Path) -> None:
    run_suite(_spec(store, [0]), tmp_path / "suite", jobs=1, device="cpu")
    result = run_suite(_spec(store, [0, 1]), tmp_path / "suite", device="cpu", tables_only=True)
    assert result.missing == ["syn/seed-1"]
    assert set(result.table[result.table["method"] == "simplecil"]["runs"]) == {1}


def test_a_class_incremental_suites_tables_in_the_same_folder_are_left_alone(store, tmp_path: Path) -> None:
    out = tmp_path / "suite"
    cil = parse_suite(
        {
            "tosca": {"flags": {"epochs": 1, "batch_size": 8}},
            "baselines": {"methods": ["simplecil"]},
            "stores": [{"name": "syn", "path": str(store.path), "init_cls": 2, "increment": 2}],
        },
        tmp_path,
    )
    run_suite(cil, out, jobs=1, device="cpu")
    before = (out / "table.md").read_bytes()
    run_suite(_spec(store, [0]), out, jobs=1, device="cpu")
    assert (out / "table.md").read_bytes() == before and (out / "table-fscil.md").is_file()


def test_the_command_prints_the_table_and_json_rows(store, tmp_path: Path) -> None:
    suite = tmp_path / "S.toml"
    suite.write_text(
        f'scenario = "til"\nseeds = [0]\n[tosca]\nflags = {{ epochs = 2 }}\n[baselines]\nmethods = ["simplecil"]\n'
        f'[[stores]]\nname = "syn"\npath = "{store.path}"\ninit_cls = 2\nincrement = 2\n'
    )
    out = tmp_path / "out"
    said = runner.invoke(app, ["suite", str(suite), "--out", str(out), "--jobs", "1"])
    assert said.exit_code == 0, said.output
    assert "store syn: scenario til: 3 tasks, 6 classes" in said.output and "tosca (told task)" in said.output
    rows = json.loads(runner.invoke(app, ["suite", str(suite), "--out", str(out), "--json"]).stdout)
    assert {r["method"] for r in rows} == {"tosca (told task)", "simplecil"} and {
        r["runs"] for r in rows
    } == {1}


def test_a_dry_run_says_the_cells_to_run_and_their_time_and_writes_nothing(store, tmp_path: Path) -> None:
    suite = tmp_path / "S.toml"
    suite.write_text(
        f'scenario = "til"\nseeds = [0, 1]\n[tosca]\nflags = {{ epochs = 2 }}\n[baselines]\nmethods = ["simplecil"]\n'
        f'[[stores]]\nname = "syn"\npath = "{store.path}"\ninit_cls = 2\nincrement = 2\n'
        '[[stores]]\nname = "later"\nmodel = "effnet_lite0"\ndataset = "eurosat"\npath = "later.zarr"\n'
    )
    out = tmp_path / "out"
    args = ["suite", str(suite), "--out", str(out), "--jobs", "1", "--dry-run"]
    plan = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    status = {(c["store"], c["cell"], c["status"]) for c in plan["cells"]}
    assert status == {
        ("syn", "seed-0", "missing"),
        ("syn", "seed-1", "missing"),
        ("later", "seed-0", "to extract"),
        ("later", "seed-1", "to extract"),
    }
    assert plan["estimate_seconds"] > 0 and not out.exists()
    said = runner.invoke(app, args)
    assert said.exit_code == 0, said.output
    assert "store later: its cells are not in the estimate until it is extracted" in " ".join(
        said.output.split()
    )
    # seed 0 run: the dry run reuses it, and plans seed 1 alone (its TOSCA; simplecil runs once)
    one = suite.read_text().replace("seeds = [0, 1]", "seeds = [0]").split("[[stores]]")
    (tmp_path / "one.toml").write_text("[[stores]]".join(one[:2]))
    ran = runner.invoke(app, ["suite", str(tmp_path / "one.toml"), "--out", str(out), "--jobs", "1"])
    assert ran.exit_code == 0, ran.output
    again = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    status = {(c["store"], c["cell"]): c["status"] for c in again["cells"]}
    assert status[("syn", "seed-0")] == "reused" and status[("syn", "seed-1")] == "missing"
    assert 0 < again["estimate_seconds"] < plan["estimate_seconds"]  # one training left, not two


@pytest.mark.heavy  # a suite, then each of its 8 cells' commands run again: 30 s, `make test` within 6 min
def test_the_manifests_commands_make_each_cells_answers_alone(
    store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shlex

    spec = _spec(store, [0, 1], baselines={"methods": ["simplecil", "ridge", "acil"]})
    result = run_suite(spec, tmp_path / "suite", jobs=1, device="cpu")
    manifest = json.loads((tmp_path / "suite" / "manifest.json").read_text())
    (stored,) = manifest["stores"].values()
    assert stored["fingerprint"] == store.fingerprint and stored["stream"] == "fscil: 3 tasks, 6 classes"
    assert stored["facts"]["shots_drawn"] and stored["scenario"]["values"] == FSCIL
    monkeypatch.chdir(tmp_path)  # the commands write their own folders under runs/
    for cell, entry in zip(result.cells, manifest["cells"], strict=True):
        assert entry["key"] == cell.key and entry["status"] == "ran"
        for method, command in entry["commands"].items():
            args = shlex.split(command)
            assert args[0] == "tosca"
            said = runner.invoke(app, [*args[1:], "--json"])
            assert said.exit_code == 0, said.output
            if method == "tosca":
                made = json.loads(said.stdout)["routers"]
                for router, figures in made.items():
                    kept = cell.results[f"tosca ({router})"].figures
                    assert {k: figures[k] for k in kept} == kept
            else:
                (row,) = json.loads(said.stdout)
                assert row["figures"] == cell.results[method].figures
    assert "--acil-seed 1" in manifest["cells"][1]["commands"]["acil"]  # each seed's own draw


@pytest.mark.heavy
def test_on_dask_workers_a_scenario_suite_gives_the_serial_numbers(store, tmp_path: Path) -> None:
    spec = _spec(store, [0, 1, 2])
    serial = run_suite(spec, tmp_path / "one", jobs=1, device="cpu").table
    spread = run_suite(spec, tmp_path / "two", jobs=2, device="cpu").table
    pd.testing.assert_frame_equal(serial.drop(columns="seconds"), spread.drop(columns="seconds"))
