"""Files on disk carry a format version, and what tosca 0.1 wrote still opens: the store, run, sweep
and baselines in tests/data/tosca-0.1 (made by its make.py with that version) are verified,
re-evaluated, resumed and read by this one. Results' columns do not depend on the router registry,
so adding a router does not stop an older sweep from resuming."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch
from support import ROOT
from support.stores import synthetic_store
from typer.testing import CliRunner

from cli import app
from featcache.store import FeatureStore
from tosca_heads import records
from tosca_heads.experiments.results import by_point
from tosca_heads.records import baseline as baseline_record
from tosca_heads.records import run as run_record
from tosca_heads.records import sweep as sweep_record
from tosca_heads.records.run import read_metrics
from tosca_heads.routers import ROUTERS, Router, StageView

RUNNER = CliRunner()
SPLIT = ["--init-cls", "1", "--increment", "1", "--device", "cpu"]
OLD_ROUTERS = ["entropy", "batch", "batch_shuffled", "oracle", "energy", "ncm", "lda", "fusion"]


@pytest.fixture
def old(tmp_path: Path) -> Path:
    """A copy of the 0.1 files, their @FIXTURE@ paths pointing at the copy."""
    root = tmp_path / "tosca-0.1"
    shutil.copytree(ROOT / "tests" / "data" / "tosca-0.1", root)
    for path in root.rglob("*"):
        if path.suffix in (".json", ".csv", ".md") and path.is_file():
            path.write_text(path.read_text().replace("@FIXTURE@", str(root)))
    return root


def _run(*args: object) -> str:
    result = RUNNER.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


def _digest(folder: Path) -> dict[str, str]:
    """File -> sha256 of its bytes, for every file under folder."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_an_old_store_verifies_and_is_described(old: Path) -> None:
    assert "OK" in _run("cache", "verify", old / "store.zarr")
    info = _run("cache", "info", old / "store.zarr")
    assert "test_vit" in info and "imagefolder" in info


def test_an_old_run_reevaluates_to_its_recorded_numbers_and_resumes(old: Path) -> None:
    recorded = json.loads((old / "run" / "metrics.json").read_text())
    assert "modes" in recorded and "format" not in recorded  # as 0.1 wrote it
    upgraded = read_metrics(old / "run")  # read in this version's form
    assert upgraded["format"] == run_record.FORMAT and upgraded["routers"] == recorded["modes"]
    before = _digest(old / "run")
    resumed = _run("fit", "--store", old / "store.zarr", "--run", old / "run", *_fit_flags())
    assert resumed.count("reused") == 2 and "0 task(s) trained" in resumed
    evaluated = json.loads(_run("eval", old / "run", "--device", "cpu", "--json"))
    assert list(evaluated["routers"]) == list(ROUTERS)
    for name, block in recorded["modes"].items():
        assert evaluated["routers"][name]["A_t"] == pytest.approx(block["A_t"], abs=1e-6), name
    after = _digest(old / "run")
    assert all(after[name] == before[name] for name in before if name.startswith("task_"))  # reused
    assert json.loads((old / "run" / "metrics.json").read_text())["format"] == run_record.FORMAT
    assert json.loads((old / "run" / "config.json").read_text()).get("format", 1) in (1, run_record.FORMAT)


def _fit_flags() -> list[str]:
    return ["--epochs", "1", "--r", "4", "--s", "4", *SPLIT]


def test_an_old_sweep_resumes_and_is_rewritten_in_the_current_format(old: Path) -> None:
    wide = pd.read_csv(old / "sweep" / "results.csv")
    assert len(wide) == 2 and "A_last_entropy" in wide  # format 1: one wide row per point
    sweep = ["sweep", "--store", old / "store.zarr", "--epochs", "1", "--jobs", "1", "--out", old / "sweep"]
    refused = RUNNER.invoke(
        app, [str(a) for a in (*sweep, "--r", "2,4", *SPLIT)]
    )  # the default holds one out
    assert refused.exit_code == 2 and "pass --val-fraction 0 to resume it" in refused.output
    sweep += ["--val-fraction", "0"]  # its points hold out no validation split
    again = _run(*sweep, "--r", "2,4", *SPLIT)
    assert "0 run(s)" in again and "2 already done" in again and "Chosen on test" in again
    long = pd.read_csv(old / "sweep" / "results.csv", keep_default_na=False, na_values=[""])
    assert list(long.columns) == sweep_record.COLUMNS and set(long["format"]) == {records.FORMAT}
    assert len(long) == 2 * len(OLD_ROUTERS) and set(long["router"]) == set(OLD_ROUTERS)
    points = by_point(long).set_index("key")
    for _, row in wide.iterrows():  # every recorded number kept
        for name in OLD_ROUTERS:
            assert points.loc[row["key"], f"A_last_{name}"] == row[f"A_last_{name}"]
    grown = _run(*sweep, "--r", "2,4,8", *SPLIT)
    assert "1 run(s)" in grown and "2 already done" in grown
    assert json.loads((old / "sweep" / "sweep.json").read_text())["format"] == records.FORMAT


def test_old_baselines_are_read_and_rewritten_in_the_current_format(old: Path) -> None:
    old_blocks = {}
    for name in ("simplecil", "ranpac", "joint_probe"):
        payload = baseline_record.read_baseline(old / "baselines" / name / "metrics.json")
        assert payload is not None and "format" not in payload, name  # 0.1's form, read
        old_blocks[name] = payload["routers"]["none"]
    shown = json.loads(_run("routers", old / "run", "--json"))
    assert {r["router"] for r in shown if r["kind"] == "baseline"} == set(old_blocks)
    _run(
        "baselines",
        *("--store", old / "store.zarr", "--run", old / "run", "--out", old / "baselines"),
        *("--ranpac-projection-dim", "64", *SPLIT),
    )
    for name, block in old_blocks.items():
        written = json.loads((old / "baselines" / name / "metrics.json").read_text())
        assert written["format"] == records.FORMAT and "modes" not in written
        assert written["routers"]["none"]["A_t"] == pytest.approx(block["A_t"]), name


class FirstModule(Router):
    name = "first_module"
    summary = "always task 0's module (a router added after the sweep began)"

    def route(self, view: StageView) -> torch.Tensor:
        return torch.zeros(view.entropy.shape[0], view.entropy.shape[2], dtype=torch.long)


def test_adding_a_router_does_not_stop_an_older_sweep_from_resuming(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=4)
    sweep = ["sweep", "--store", store.path, "--epochs", "1", "--jobs", "1", "--out", tmp_path / "sw"]
    _run(*sweep, "--r", "2,4", "--init-cls", "2", "--increment", "2", "--device", "cpu")
    monkeypatch.setitem(ROUTERS, FirstModule.name, FirstModule())
    grown = _run(*sweep, "--r", "2,4,8", "--init-cls", "2", "--increment", "2", "--device", "cpu")
    assert "1 run(s)" in grown and "2 already done" in grown
    long = pd.read_csv(tmp_path / "sw" / "results.csv", keep_default_na=False, na_values=[""])
    per_point = long.groupby("r")["router"].apply(set)
    assert per_point[8] == set(ROUTERS) and FirstModule.name not in per_point[2] | per_point[4]
    assert (long.groupby("key")["router"].count() == long.groupby("key")["rows"].first()).all()
    assert "| 8 |" in (tmp_path / "sw" / "summary.md").read_text()  # the tables are rebuilt with it


@pytest.mark.parametrize(
    ("path", "field"),
    [("run/metrics.json", "format"), ("run/config.json", "format"), ("sweep/sweep.json", "format")],
)
def test_a_file_of_a_newer_format_is_refused_in_one_line(old: Path, path: str, field: str) -> None:
    target = old / path
    data = json.loads(target.read_text())
    data[field] = 99
    target.write_text(json.dumps(data))
    command = (
        ["routers", str(old / "run")]
        if path.startswith("run/metrics")
        else ["eval", str(old / "run"), "--device", "cpu"]
        if path.startswith("run/")
        else [
            "sweep",
            "--store",
            str(old / "store.zarr"),
            "--r",
            "2",
            "--out",
            str(old / "sweep"),
            *SPLIT,
            "--val-fraction",
            "0",
        ]
    )
    result = RUNNER.invoke(app, command)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "newer tosca" in lines[0] and "upgrade tosca" in lines[0], lines


# ------------------------------------------------------------------------------------------ format 2


def _fixture_copy(tmp_path: Path, name: str) -> Path:
    """A copy of tests/data/NAME with the 0.1 store its files were made on copied in, their
    @FIXTURE@ paths pointing at the copy."""
    root = tmp_path / name
    shutil.copytree(ROOT / "tests" / "data" / name, root)
    shutil.copytree(ROOT / "tests" / "data" / "tosca-0.1" / "store.zarr", root / "store.zarr")
    for path in root.rglob("*"):
        if path.suffix in (".json", ".csv", ".md", ".tex") and path.is_file():
            path.write_text(path.read_text().replace("@FIXTURE@", str(root)))
    return root


@pytest.fixture
def fmt2(tmp_path: Path) -> Path:
    """The format-2 files (tosca at ec92508: before the validation split)."""
    return _fixture_copy(tmp_path, "format-2")


def test_a_format_2_run_reevaluates_to_its_numbers_resumes_and_predicts(fmt2: Path) -> None:
    recorded = read_metrics(fmt2 / "run")
    assert (
        json.loads((fmt2 / "run" / "metrics.json").read_text())["format"] == 2
        and "validation" not in recorded
    )
    before = _digest(fmt2 / "run")
    resumed = _run("fit", "--store", fmt2 / "store.zarr", "--run", fmt2 / "run", *_fit_flags())
    assert resumed.count("reused") == 2 and "0 task(s) trained" in resumed  # no validation: the same run
    evaluated = json.loads(_run("eval", fmt2 / "run", "--device", "cpu", "--json"))
    for name, block in recorded["routers"].items():
        assert evaluated["routers"][name]["A_t"] == block["A_t"], name  # bit for bit
    after = _digest(fmt2 / "run")
    assert all(after[name] == before[name] for name in before if name.startswith("task_"))
    from tosca_heads.experiments.predict import RunPredictor

    store = FeatureStore.open(fmt2 / "store.zarr")
    found = RunPredictor(fmt2 / "run", store.shape.classes).load().predict(store.features("test"), "lda")
    assert found.chosen_on == "given" and set(found.classes) <= set(store.labels("test").tolist())


def test_a_format_2_sweep_resumes_without_validation_and_is_rewritten(fmt2: Path) -> None:
    old = pd.read_csv(fmt2 / "sweep" / "results.csv")
    assert "routers" in old and "split" not in old and set(old["format"]) == {2}
    sweep = ["sweep", "--store", fmt2 / "store.zarr", "--epochs", "1", "--jobs", "1", "--out", fmt2 / "sweep"]
    again = _run(*sweep, "--r", "2,4", *SPLIT, "--val-fraction", "0")
    assert "0 run(s)" in again and "2 already done" in again
    long = pd.read_csv(fmt2 / "sweep" / "results.csv", keep_default_na=False, na_values=[""])
    assert list(long.columns) == sweep_record.COLUMNS and set(long["format"]) == {records.FORMAT}
    assert set(long["split"]) == {"test"} and set(long["val_fraction"]) == {0}
    merged = long.merge(old, on=["key", "router"], suffixes=("", "_old"))
    assert len(merged) == len(old) and (merged["A_last"] == merged["A_last_old"]).all()
    assert json.loads((fmt2 / "sweep" / "sweep.json").read_text())["chosen"]["split"] == "test"


def test_format_2_baselines_and_suite_cells_are_read_not_recomputed(fmt2: Path) -> None:
    for name in ("simplecil", "ranpac"):
        payload = baseline_record.read_baseline(fmt2 / "baselines" / name / "metrics.json")
        assert payload is not None and payload["format"] == 2, name
    shown = json.loads(_run("routers", fmt2 / "run", "--json"))
    assert {r["router"] for r in shown if r["kind"] == "baseline"} == {"simplecil", "ranpac", "joint_probe"}
    cells = fmt2 / "suite" / "cells"
    before = _digest(cells)
    old_table = pd.read_csv(fmt2 / "suite" / "table.csv")
    _run("suite", fmt2 / "suite.toml", "--out", fmt2 / "suite", "--jobs", "1", "--device", "cpu")
    assert _digest(cells) == before  # every cell was done: read, never recomputed
    table = pd.read_csv(fmt2 / "suite" / "table.csv")
    merged = table.merge(old_table, on=["method", "store", "metric"], suffixes=("", "_old"))
    assert len(merged) == len(old_table) and (merged["mean"] == merged["mean_old"]).all()
    assert set(table["chosen_on"]) == {"test"}  # no validation split: the bold entries were chosen on test


# ------------------------------------------------------------------------------------------ format 3


@pytest.fixture
def fmt3(tmp_path: Path) -> Path:
    """The format-3 files (tosca at d73a8da: before per-image answers and intervals), each with a
    validation split of 0.34."""
    return _fixture_copy(tmp_path, "format-3")


VAL3 = ["--val-fraction", "0.34"]


def test_a_format_3_run_is_shown_without_intervals_until_eval_keeps_its_answers(fmt3: Path) -> None:
    recorded = read_metrics(fmt3 / "run")
    assert json.loads((fmt3 / "run" / "metrics.json").read_text())["format"] == 3
    assert "intervals" not in recorded["routers"]["entropy"] and "validation" in recorded
    shown = _run("routers", fmt3 / "run")
    assert "no intervals: these figures were written before tosca kept per-image answers" in " ".join(
        shown.split()
    )
    before = _digest(fmt3 / "run")
    _run("eval", fmt3 / "run", "--device", "cpu")
    metrics = read_metrics(fmt3 / "run")
    assert metrics["format"] == records.FORMAT and (fmt3 / "run" / "outcomes.safetensors").is_file()
    for split in ("routers", "validation"):
        for name, block in recorded[split].items():
            assert metrics[split][name]["A_t"] == block["A_t"], name  # the same numbers, bit for bit
            low, high = metrics[split][name]["intervals"]["A_last"]
            assert low <= block["A_last"] <= high
    after = _digest(fmt3 / "run")
    assert all(after[name] == before[name] for name in before if name.startswith("task_"))  # nothing trained


def test_a_format_3_sweep_resumes_and_is_rewritten_as_format_4(fmt3: Path) -> None:
    old = pd.read_csv(fmt3 / "sweep" / "results.csv")
    assert list(old.columns) == sweep_record.FORMAT_3 and set(old["format"]) == {3}
    sweep = ["sweep", "--store", fmt3 / "store.zarr", "--epochs", "1", "--jobs", "1", "--out", fmt3 / "sweep"]
    again = _run(*sweep, "--r", "2,4", *SPLIT, *VAL3)
    said = " ".join(again.split())
    assert "0 run(s)" in said and "2 already done" in said and "Chosen on validation" in said
    assert "No standard errors: these points were computed before tosca kept per-image answers" in said
    assert "would have chosen" not in said
    long = pd.read_csv(fmt3 / "sweep" / "results.csv", keep_default_na=False, na_values=[""])
    assert list(long.columns) == sweep_record.COLUMNS and set(long["format"]) == {records.FORMAT}
    assert long[sweep_record.INTERVAL_COLUMNS].isna().all().all()  # nothing made up
    merged = long.merge(old, on=["key", "split", "router"], suffixes=("", "_old"))
    assert len(merged) == len(old) and (merged["A_last"] == merged["A_last_old"]).all()
    grown = _run(*sweep, "--r", "2,4,8", *SPLIT, *VAL3)  # the new point keeps its answers
    assert "1 run(s)" in grown
    fresh = pd.read_csv(fmt3 / "sweep" / "results.csv", keep_default_na=False, na_values=[""])
    assert fresh.loc[fresh["r"] == 8, "A_last_low"].notna().all()
    assert len(list((fmt3 / "sweep" / "outcomes").glob("*.safetensors"))) == 1


def test_format_3_suite_cells_are_read_not_recomputed_and_bold_by_the_figure_alone(fmt3: Path) -> None:
    cells = fmt3 / "suite" / "cells"
    before = _digest(cells)
    _run("suite", fmt3 / "suite.toml", "--out", fmt3 / "suite", "--jobs", "1", "--device", "cpu")
    assert _digest(cells) == before  # every cell was done: read, never recomputed
    table = pd.read_csv(fmt3 / "suite" / "table.csv")
    assert set(table["chosen_on"]) == {"validation"} and table["ci_low"].isna().all()
    assert (
        "some cells kept no per-image answers (made before format 4)"
        in (fmt3 / "suite" / "table.md").read_text()
    )
    honest = table[table["honest"]]
    best = honest.groupby(["store", "metric"])["val_mean"].transform("max")
    assert (honest["bold"] == (honest["val_mean"] == best)).all()  # the best figure alone (and its equals)
    assert set(honest["bold_verdict"]) <= {"the best", "not tested (no per-image answers)"}
