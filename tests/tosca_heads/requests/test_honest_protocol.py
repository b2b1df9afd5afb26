"""The honest protocol: a validation split that never trains and is scored beside test, choices made
on it and said, answers in the dataset's terms, and honesty that is structural, not declared."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from support.stores import synthetic_store
from typer.testing import CliRunner

import tosca_heads
from cli import app
from featcache.store import FeatureStore
from tosca_heads.method.protocol import StreamConfig, ValidationConfig
from tosca_heads.requests.plan import FitPlan
from tosca_heads.routers import ROUTERS, Router, StageView, register_router, resolve_routers

COMPUTED = resolve_routers(None)  # the routers a run computes unless others are named

RUNNER = CliRunner()
QUICK = {"epochs": 2, "batch_size": 8, "r": 4, "s": 4}


def _without_rows(store: FeatureStore, rows: np.ndarray, path: Path) -> FeatureStore:
    """The same store with these training rows left out (what training on a store without the
    validation images would see)."""
    keep = np.setdiff1d(np.arange(store.layout("train").n), rows)
    labels = {"train": store.labels("train")[keep], "test": store.labels("test")}
    ids = {"train": [str(i) for i in store.ids("train")[keep]], "test": [str(i) for i in store.ids("test")]}
    identity = {
        **store.identity,
        "dataset": {**store.identity["dataset"], "samples": {k: len(v) for k, v in labels.items()}},
    }
    copy = FeatureStore.create(path, identity, {}, ids, labels, store.dim, 0, 16, "float32")
    features = {"train": store.features("train")[keep], "test": store.features("test")}
    for split, x in features.items():
        for chunk in range(copy.layout(split).n_chunks):
            copy.write_chunk(split, chunk, x[copy.layout(split).chunk_slice(chunk)])
    return copy


def test_validation_images_never_train_and_are_scored_beside_test(tmp_path: Path) -> None:
    """A fit holding out a validation split gives exactly the test figures of a fit on the store
    without those images (they make no gradient, no prototype, no router statistic), and scores
    every router after every task on them too; their ids are recorded in the run."""
    store = synthetic_store(tmp_path / "s.zarr", classes=6, per_class=20, spread=1.5)
    validation = ValidationConfig(0.2, seed=3)
    held = validation.carve(store.labels("train"))
    held_run = tosca_heads.fit(
        store, run=tmp_path / "held", init_cls=2, increment=2, val_fraction=0.2, val_seed=3, **QUICK
    )
    plain = tosca_heads.fit(
        _without_rows(store, held, tmp_path / "rest.zarr"), init_cls=2, increment=2, **QUICK
    )
    metrics = held_run.metrics()
    for name, block in plain.metrics()["routers"].items():
        assert metrics["routers"][name]["A_t"] == block["A_t"], name  # bit for bit
    assert set(metrics["validation"]) == set(COMPUTED)
    assert all(len(b["A_t"]) == 3 for b in metrics["validation"].values())  # after every task
    assert metrics["validation"]["entropy"]["A_t"] != metrics["routers"]["entropy"]["A_t"]
    recorded = json.loads((tmp_path / "held" / "state" / "validation.json").read_text())
    plan = FitPlan.build(store, StreamConfig(2, 2), validation)
    assert recorded["ids"] == list(plan.held_ids) == [str(store.ids("train")[r]) for r in held]
    config = json.loads((tmp_path / "held" / "asked.json").read_text())
    assert (
        config["validation"]["samples"] == len(held) == 24
        and config["protocol"]["validation"]["held_out"] == 24
    )
    results = pd.read_csv(tmp_path / "held" / "results.csv")
    assert set(results["split"]) == {"test", "validation"}
    again = tosca_heads.evaluate(tmp_path / "held").metrics()  # re-evaluated from the files: same split
    assert again["validation"] == metrics["validation"]


def test_a_sweep_chooses_on_validation_says_so_and_gives_the_command_that_refits_it(tmp_path: Path) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=6, per_class=20, spread=1.5)
    out = tmp_path / "sweep"
    cmd = ["sweep", "--store", str(store.path), "--r", "2,8", "--l1", "0,1e-2", "--epochs", "2"]
    cmd += ["--batch-size", "8", "--init-cls", "2", "--increment", "2", "--jobs", "1", "--device", "cpu"]
    result = RUNNER.invoke(app, [*cmd, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "on validation; test A_last beside" in " ".join(result.output.split())
    assert "Chosen on validation (entropy)" in result.output
    meta = json.loads((out / "sweep.json").read_text())
    chosen = meta["chosen"]
    assert meta["validation"]["fraction"] == 0.1 and chosen["split"] == "validation"
    summary = pd.read_csv(out / "results.csv")
    points = tosca_heads_points(summary)
    top = points.loc[points["val_A_last_entropy"].idxmax()]
    assert chosen["best"]["flags"] == {"r": int(top["r"]), "l1": float(top["l1"])}  # ranked on validation
    configurations = pd.read_csv(out / "summary.csv")  # chosen among the ties by the rule
    tied = configurations[configurations["tie"]]
    rule = tied.sort_values(
        ["params_per_task", "l1", "val_A_last_entropy_mean"], ascending=[True, False, False]
    )
    assert chosen["chosen"]["flags"] == {"r": int(rule["r"].iloc[0]), "l1": float(rule["l1"].iloc[0])}
    assert configurations["chosen"].sum() == 1 and len(chosen["ties"]) == len(tied)
    check = chosen["test_check"]  # "would have chosen" only when test disagrees beyond noise
    assert ("would have chosen" in result.output) == bool(check and check["disagrees"])
    assert "Chosen on validation" in (out / "summary.md").read_text()
    best = points[(points["r"] == rule["r"].iloc[0]) & (points["l1"] == rule["l1"].iloc[0])].iloc[0]
    refit = shlex.split(chosen["chosen"]["command"])
    assert refit[:2] == ["tosca", "fit"] and "--val-fraction=0.1" in refit
    run = tmp_path / "refit"
    done = RUNNER.invoke(app, [*refit[1:], "--run", str(run), "--device", "cpu"])
    assert done.exit_code == 0, done.output
    refitted = json.loads((run / "metrics.json").read_text())
    assert refitted["routers"]["entropy"]["A_last"] == best["A_last_entropy"]  # the same point, exactly
    assert refitted["validation"]["entropy"]["A_last"] == best["val_A_last_entropy"]
    # without a validation split the sweep ranks on test, and says so in the table and the files
    plain = RUNNER.invoke(app, [*cmd, "--val-fraction", "0", "--out", str(tmp_path / "plain")])
    assert plain.exit_code == 0, plain.output
    assert "TEST (no validation split: tuned on test)" in " ".join(plain.output.split())
    assert json.loads((tmp_path / "plain" / "sweep.json").read_text())["chosen"]["split"] == "test"
    assert "**on the test split**" in (tmp_path / "plain" / "summary.md").read_text()
    mixed = RUNNER.invoke(app, [*cmd, "--val-fraction", "0", "--out", str(out)])  # one folder, one split
    assert mixed.exit_code == 2 and "pass --val-fraction 0.1 --val-seed 0 to resume it" in mixed.output


def tosca_heads_points(frame: pd.DataFrame) -> pd.DataFrame:
    from tosca_heads.studies.results import by_point

    return by_point(frame)


def test_predict_answers_in_the_dataset_labels_and_says_where_its_router_was_chosen(tmp_path: Path) -> None:
    """The obvious accuracy check against store.labels("test") equals the run's A_last for that
    router (the class order permutes the labels: incremental ids would score near chance)."""
    store = synthetic_store(tmp_path / "s.zarr", classes=6, per_class=20, spread=1.0)
    run = tmp_path / "run"
    tosca_heads.fit(store, run=run, init_cls=2, increment=2, **QUICK)
    metrics = json.loads((run / "metrics.json").read_text())
    x, y = store.features("test"), store.labels("test")
    for router in ("lda", "entropy", "ncm"):
        found = tosca_heads.predict(run, x, router=router)
        assert float((found.classes == y).mean()) == metrics["routers"][router]["A_last"], router
        assert (found.incremental_classes != found.classes).any()  # the two numberings differ here
        assert found.chosen_on == "given" and found.router == router
    default = tosca_heads.predict(run, x)
    assert default.chosen_on == "test"  # no validation split: chosen on test, and said
    held = tmp_path / "held"
    tosca_heads.fit(store, run=held, init_cls=2, increment=2, val_fraction=0.2, **QUICK)
    chosen = tosca_heads.predict(held, x)
    validation = json.loads((held / "metrics.json").read_text())["validation"]
    honest = {n: b["A_last"] for n, b in validation.items() if ROUTERS[n].honest}
    assert chosen.chosen_on == "validation" and validation[chosen.router]["A_last"] == max(honest.values())
    shown = RUNNER.invoke(app, ["routers", str(run)])
    assert "on the TEST split" in shown.output and "tuned on test" in " ".join(shown.output.split())


def test_a_store_keeps_the_absolute_path_it_was_opened_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synthetic_store(tmp_path / "a" / "s.zarr", classes=4, seed=0)
    synthetic_store(tmp_path / "b" / "s.zarr", classes=4, seed=1)
    monkeypatch.chdir(tmp_path / "a")
    store = FeatureStore.open("s.zarr")
    first = store.features("test").copy()
    monkeypatch.chdir(tmp_path / "b")  # another folder's store of the same name
    assert store.path == tmp_path / "a" / "s.zarr" and store.path.is_absolute()
    assert np.array_equal(store.features("test"), first)
    result = tosca_heads.fit(store, init_cls=2, increment=2, epochs=1, batch_size=8)
    assert Path(result.config["store"]) == tmp_path / "a" / "s.zarr"


class Cheat(Router):
    name = "cheat"
    summary = "reads the true task (an honest router may not)"

    def route(self, view: StageView) -> torch.Tensor:
        return view.true_task.long().expand(view.groups, -1)  # type: ignore[attr-defined]


class ToldTask(Router):
    name = "told_task"
    reference = "told the task"
    summary = "the oracle again, registered as a reference"

    def route(self, view: StageView) -> torch.Tensor:
        return view.true_task.long().expand(view.groups, -1)  # type: ignore[attr-defined]


def test_honesty_is_structural_an_honest_router_cannot_read_the_task(tmp_path: Path) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=4)
    register_router(Cheat)
    try:
        result = RUNNER.invoke(
            app,
            [
                "fit",
                "--store",
                str(store.path),
                "--init-cls",
                "2",
                "--increment",
                "2",
                "--epochs",
                "1",
                "--device",
                "cpu",
            ],
        )
        assert result.exit_code == 2
        assert "router 'cheat' read view.true_task, which only reference routers see" in result.output
        assert "register it with `reference = True`" in result.output
    finally:
        del ROUTERS["cheat"]
    register_router(ToldTask)
    try:
        run = tmp_path / "run"
        tosca_heads.fit(store, run=run, init_cls=2, increment=2, epochs=1, batch_size=8)
        metrics = json.loads((run / "metrics.json").read_text())
        assert metrics["routers"]["told_task"]["routing_accuracy"] == 1.0  # it saw the task: a reference
        assert not ROUTERS["told_task"].honest
        with pytest.raises(Exception, match="is a reference"):
            tosca_heads.predict(run, store.features("test"), router="told_task")
        assert tosca_heads.predict(run, store.features("test")).router != "told_task"  # never a default
    finally:
        del ROUTERS["told_task"]


@pytest.mark.heavy  # 5 s: the README's commands on an image folder
def test_the_readme_image_folder_split_is_never_one_class_per_task(tmp_path: Path) -> None:
    """A store of an image folder without --init-cls/--increment: the same stated default in fit,
    sweep, suite and the API, said in the header (10 classes: B0 Inc2, 5 tasks)."""
    store = synthetic_store(tmp_path / "s.zarr", classes=10, per_class=6, test_per_class=3)
    assert store.identity["dataset"]["name"] not in ("cifar10", "eurosat")
    fit = RUNNER.invoke(
        app, ["fit", "--store", str(store.path), "--epochs", "1", "--device", "cpu", "--json"]
    )
    assert fit.exit_code == 0 and json.loads(fit.stdout)["finished_tasks"] == 5
    assert "B0 Inc2: 5 tasks of 2 classes (the default without a paper split" in " ".join(fit.output.split())
    sweep = RUNNER.invoke(
        app,
        [
            "sweep",
            "--store",
            str(store.path),
            "--r",
            "2",
            "--epochs",
            "1",
            "--device",
            "cpu",
            "--jobs",
            "1",
            "--out",
            str(tmp_path / "sw"),
        ],
    )
    assert sweep.exit_code == 0 and "B0 Inc2: 5 tasks of 2 classes" in " ".join(sweep.output.split())
    assert set(pd.read_csv(tmp_path / "sw" / "results.csv")["tasks"]) == {5}
    assert tosca_heads.fit(store, epochs=1).metrics()["finished_tasks"] == 5
    suite_file = tmp_path / "suite.toml"
    suite_file.write_text(
        f'seeds = [0]\n[tosca]\nflags = {{ epochs = 1 }}\n[baselines]\nmethods = ["simplecil"]\n'
        f'[[stores]]\nname = "s"\npath = "{store.path}"\n'
    )
    command = ["suite", str(suite_file), "--out", str(tmp_path / "suite"), "--device", "cpu", "--jobs", "1"]
    suite = RUNNER.invoke(app, command)
    assert suite.exit_code == 0, suite.output
    assert "store s: protocol: synthetic, B0 Inc2: 5 tasks of 2 classes" in " ".join(suite.output.split())
    result = tosca_heads.run_suite(tosca_heads.load_suite(suite_file), tmp_path / "suite", device="cpu")
    assert all(
        json.loads((c.folder / "asked.json").read_text())["stream"]["increment"] == 2
        for c in result.cells
        if c.cell.kind == "tosca"
    )
    warned = RUNNER.invoke(
        app,
        [
            "fit",
            "--store",
            str(store.path),
            "--epochs",
            "1",
            "--device",
            "cpu",
            "--run",
            str(tmp_path / "r2"),
        ],
    )
    assert "fewer than the 48 of a `batch` routing batch" in " ".join(warned.output.split())
    assert "has 3 test sample(s)" in warned.output


@pytest.mark.heavy
def test_bold_entries_say_on_which_split_they_were_chosen(tmp_path: Path) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=4, per_class=20, spread=1.5)
    base = {
        "seeds": [0],
        "tosca": {"flags": {"epochs": 1, "batch_size": 8}, "routers": ["entropy", "lda", "oracle"]},
        "baselines": {"methods": ["simplecil", "joint_probe"]},
        "stores": [{"name": "s", "path": str(store.path), "init_cls": 2, "increment": 2}],
    }
    for fraction, split in ((0.0, "test"), (0.2, "validation")):
        spec = tosca_heads.parse_suite({**base, "val_fraction": fraction}, tmp_path)
        out = tmp_path / f"suite-{split}"
        result = tosca_heads.run_suite(spec, out, device="cpu")
        table = result.tables.table
        assert set(table["chosen_on"]) == {split}
        bold = table[table["bold"]]
        assert bold["honest"].all()  # honest only
        assert not table.loc[table["method"].isin(["tosca:oracle", "joint_probe"]), "bold"].any()
        column = "val_mean" if split == "validation" else "mean"
        for _, part in table[table["honest"]].groupby(["store", "metric"]):
            assert part.loc[part[column] == part[column].max(), "bold"].any()  # the best is bold
            # and every entry the paired test cannot tell from it
            assert (part["bold"] == (part["bold_verdict"] != "below the best")).all()
        text = (out / "table.md").read_text()
        said = (
            "on the validation split (its figures below)"
            if split == "validation"
            else "on these test figures"
        )
        assert said in text and "joint linear probe †" in text and "paired bootstrap" in text
        assert ("what decided the bold entries" in text) == (split == "validation")
        saved = pd.read_csv(out / "table.csv")
        assert set(saved["chosen_on"]) == {split} and saved["bold"].sum() == len(bold)
        assert "val_fraction" in (out / "manifest.json").read_text()
    assert os.path.exists(tmp_path / "suite-validation" / "cells")
