"""Every figure with its uncertainty and every verdict a test (issue 35, points 1-3; issue 36, items
1-3): on hand-made answers and tables, a sweep names its ties and chooses among them by its rule,
says what test would have chosen only when test disagrees beyond noise, and its running line never
shows a test figure as the best; a suite bolds every entry not distinguishable from the best; and on
small synthetic stores, runs, baselines, sweeps and the routers table carry their intervals, kept
from the answers, and set side by side only figures of one protocol."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from support.stores import synthetic_store
from typer.testing import CliRunner

from cli import app
from tosca_cli.views import running_best
from tosca_foundation import atomic
from tosca_foundation.errors import UserError
from tosca_heads.method import uncertainty
from tosca_heads.method.metrics import resampled
from tosca_heads.method.protocol import StreamConfig
from tosca_heads.method.recipe import TrainConfig
from tosca_heads.method.uncertainty import Outcomes
from tosca_heads.records import FORMAT
from tosca_heads.records.outcomes import read_outcomes, write_outcomes
from tosca_heads.records.run_cell import read_run
from tosca_heads.studies.results import choice_lines, choices, summarise_points, with_noise
from tosca_heads.studies.suite.claims import Evidence
from tosca_heads.studies.suite.tables import BOLD_COLUMNS, TABLE_COLUMNS, _mark_best

RUNNER = CliRunner()
SPLIT = ["--init-cls", "2", "--increment", "2", "--device", "cpu"]


def exactly(accuracy: float, n: int = 600, seed: int = 0) -> Outcomes:
    """Answers on n images (6 classes, 3 tasks) with exactly `accuracy` of each class right at every
    task, which images chosen by `seed`."""
    labels = np.repeat(np.arange(6), n // 6)
    task = labels // 2
    rng = np.random.default_rng(seed)
    right = np.zeros(n, dtype=bool)
    for c in range(6):
        rows = np.flatnonzero(labels == c)
        right[rng.permutation(rows)[: round(accuracy * len(rows))]] = True
    seen = task[None, :] <= np.arange(3)[:, None]
    return Outcomes(np.repeat(right[None], 3, 0) & seen, labels, task, np.arange(n))


# ------------------------------------------------------------------------------------------ sweeps, by hand


def _points(configs: dict[str, tuple[int, float, float, float]]) -> tuple[pd.DataFrame, dict]:
    """A sweep's points (one seed each) and their kept answers: key -> (r, l1, validation A_last,
    test A_last) of the entropy router."""
    base = {**asdict(TrainConfig()), **asdict(StreamConfig(2, 2))}
    rows, answers = [], {}
    for i, (key, (r, l1, val, test)) in enumerate(configs.items()):
        rows.append(
            {
                **base,
                "key": key,
                "r": r,
                "s": 4,
                "l1": l1,
                "dataset": "hand",
                "backbone": "made",
                "params_per_task": 100 * r,
                "train_seconds": 1.0,
                "val_A_last_entropy": val,
                "A_last_entropy": test,
                "A_bar_entropy": test,
                "routing_entropy": 1.0,
            }
        )
        answers[key] = {
            "validation": {"entropy": exactly(val, seed=i)},
            "test": {"entropy": exactly(test, seed=10 + i)},
        }
    return pd.DataFrame(rows), answers


def _chosen(configs: dict[str, tuple[int, float, float, float]]) -> tuple[pd.DataFrame, dict]:
    points, answers = _points(configs)
    summary = with_noise(summarise_points(points, "entropy", ["entropy"]), answers, "validation", "entropy")
    return summary, choices(points, summary, "entropy", lambda config: "tosca fit ...", None, answers)


def test_a_sweep_names_its_ties_and_chooses_the_simplest() -> None:
    """Three points within one standard error on 600 validation images (SE about 1.6 points), one
    far below: the three are ties, and the rule takes the fewest parameters (r=8), then the largest
    L1 (sparsest modules), not the highest figure (r=16)."""
    summary, chosen = _chosen(
        {
            "a": (16, 0.0, 0.800, 0.78),
            "b": (8, 0.0, 0.795, 0.78),
            "c": (8, 5e-4, 0.790, 0.78),
            "d": (4, 0.0, 0.600, 0.60),
        }
    )
    assert list(summary["tie"]) == [True, True, True, False]
    assert (
        summary.loc[summary["chosen"], "r"].item() == 8
        and summary.loc[summary["chosen"], "l1"].item() == 5e-4
    )
    se = summary["val_A_last_entropy_se"]
    assert (se > 0.015).all() and (se < 0.02).all()  # sqrt(0.8 * 0.2 / 600) = 0.0163
    assert chosen["best"]["flags"] == {"r": 16, "l1": 0.0} and chosen["chosen"]["flags"] == {
        "r": 8,
        "l1": 5e-4,
    }
    assert [t["r"] for t in chosen["ties"]] == [16, 8, 8] and "fewest parameters" in chosen["rule"]
    lines = "\n".join(choice_lines(chosen))
    assert "Tied within one standard error of the best (3)" in lines and "r=8, l1=0.0005" in lines
    assert "would have chosen" not in lines  # test agrees (all 78%): nothing tuned on test to say


def test_test_would_have_chosen_is_said_only_beyond_noise() -> None:
    near = {"a": (16, 0.0, 0.80, 0.700), "b": (8, 0.0, 0.60, 0.705)}  # test: 0.5 points the other way
    _, chosen = _chosen(near)
    lines = "\n".join(choice_lines(chosen))
    assert chosen["chosen"]["flags"]["r"] == 16 and not chosen["test_check"]["disagrees"]
    assert "would have chosen" not in lines
    assert "no configuration is better than the chosen one beyond noise" in lines
    beyond = {"a": (16, 0.0, 0.80, 0.60), "b": (8, 0.0, 0.60, 0.90)}  # test: 30 points the other way
    _, chosen = _chosen(beyond)
    check = chosen["test_check"]
    assert check["disagrees"] and check["verdict"] == uncertainty.HOLDS and check["images"] == 600
    lines = "\n".join(choice_lines(chosen))
    assert "Test disagrees beyond noise: the test split would have chosen r=8 (test A_last 90.00)" in lines
    assert "600 images, 1 vs 1 seed(s)" in lines and "tuning on test" in lines


def test_the_running_line_shows_the_ranking_split_never_a_test_best() -> None:
    """Issue 36.1: `best A_last(entropy) 78.12% at r=16` was the best single-seed TEST figure while
    the sweep chose on validation."""
    best: dict = {}

    def rows(r: int, val: float, test: float) -> list[dict]:
        return [
            {"router": "entropy", "split": "test", "A_last": test, "r": r},
            {"router": "entropy", "split": "validation", "A_last": val, "r": r},
        ]

    running_best(best, rows(8, 0.80, 0.70), "entropy", ["r"])
    note = running_best(best, rows(16, 0.75, 0.7812), "entropy", ["r"])
    assert note == "best single run so far on validation: A_last(entropy) 80.00% at r=8"
    plain: dict = {}
    note = running_best(plain, rows(16, 0.75, 0.7812)[:1], "entropy", ["r"])
    assert "on TEST (no validation split: tuned on test): A_last(entropy) 78.12% at r=16" in note


# ------------------------------------------------------------------------------------------ suites, by hand


def test_bold_marks_every_honest_entry_not_distinguishable_from_the_best() -> None:
    """On validation: lda 80%, entropy 79.5% (tied), ncm 70% (below, clearly), SimpleCIL 80.5% (the
    best), the oracle 99% (a reference: never bold)."""
    val = {
        "tosca:lda": 0.80,
        "tosca:entropy": 0.795,
        "tosca:ncm": 0.70,
        "simplecil": 0.805,
        "tosca:oracle": 0.99,
    }
    evidence, rows = Evidence(), []
    for i, (method, accuracy) in enumerate(val.items()):
        runs = [exactly(accuracy, seed=i)]
        evidence.answers[("S", method)] = {"validation": runs, "test": runs}
        rows.append(
            dict.fromkeys(TABLE_COLUMNS[:-BOLD_COLUMNS], np.nan)
            | {
                "method": method,
                "honest": method != "tosca:oracle",
                "store": "S",
                "metric": "A_last",
                "mean": accuracy,
                "n": 1,
                "val_mean": accuracy,
                "val_n": 1,
            }
        )
    table = pd.DataFrame(rows)
    split, tested = _mark_best(table, evidence)
    bold = dict(zip(table["method"], table["bold"], strict=True))
    assert split == "validation" and tested
    assert bold == {
        "tosca:lda": True,
        "tosca:entropy": True,
        "tosca:ncm": False,
        "simplecil": True,
        "tosca:oracle": False,
    }
    ncm = table[table["method"] == "tosca:ncm"].iloc[0]
    assert ncm["bold_verdict"] == "below the best" and ncm["bold_low"] > 0.04
    # a column where one entry's cells kept no answers: the best figure alone, said
    evidence.answers[("S", "tosca:entropy")] = {"validation": None, "test": None}
    split, tested = _mark_best(table, evidence)
    assert not tested and table.loc[table["method"] == "tosca:entropy", "bold_verdict"].item().startswith(
        "not tested"
    )


# ------------------------------------------------------------------------------------------ the outcomes file


def test_an_outcomes_file_is_read_back_and_a_damaged_one_is_one_line(tmp_path: Path) -> None:
    a, b = exactly(0.8, seed=1), exactly(0.6, seed=2)
    path = tmp_path / "outcomes.safetensors"
    write_outcomes(path, {"test": {"x": a, "y": b}})
    back = read_outcomes(path, "fix it")
    assert back is not None and np.array_equal(back["test"]["x"].correct, a.correct)
    assert np.array_equal(back["test"]["y"].classes, b.classes) and np.array_equal(
        back["test"]["y"].rows, b.rows
    )
    with pytest.raises(UserError, match=r"none\.safetensors is missing \(deleted\?\).*; fix it"):
        read_outcomes(tmp_path / "none.safetensors", "fix it")  # every folder tosca writes keeps one
    path.write_bytes(b"garbage")
    with pytest.raises(UserError, match=r"outcomes.safetensors: it is not a safetensors file .*; fix it"):
        read_outcomes(path, "fix it")
    mixed = Outcomes(
        a.correct, a.classes, np.where(np.arange(600) == 0, 2, a.task), a.rows
    )  # one image moved
    write_outcomes(path, {"test": {"x": mixed}})
    with pytest.raises(UserError, match="images of one class come in different tasks"):
        read_outcomes(path, "fix it")
    tensors = {
        "test/rows": torch.from_numpy(a.rows.astype(np.int64)),
        "test/classes": torch.from_numpy(a.classes.astype(np.int64)),  # no test/task
        "test/right/x": torch.from_numpy(np.packbits(a.correct, axis=1)),
    }
    atomic.write_safetensors(path, tensors, {"format": "1", "tasks": str(a.tasks)})
    with pytest.raises(UserError, match="a split lacks its image lists; fix it"):
        read_outcomes(path, "fix it")


# ------------------------------------------------------------------------------------------ on stores


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("verdicts")
    return synthetic_store(root / "s.zarr", classes=6, per_class=24, test_per_class=10, spread=1.5).path


def _run(*args: object) -> str:
    result = RUNNER.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.slow
def test_every_figure_of_a_run_and_a_baseline_carries_its_interval(store: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shown = _run("fit", "--store", store, "--run", run, "--epochs", "1", "--val-fraction", "0.25", *SPLIT)
    assert "[low, high]: 95% interval over the 60 samples of the split" in shown
    metrics = read_run(run).metrics
    assert metrics["format"] == FORMAT and metrics["uncertainty"]["level"] == 0.95
    answers = read_run(run).answers
    assert answers is not None and set(answers) == {"test", "validation"}
    for split, blocks in (("test", metrics["routers"]), ("validation", metrics["validation"])):
        for name, block in blocks.items():
            expected = uncertainty.intervals([answers[split][name]])
            for metric in (m.name for m in resampled()):
                low, high = block["intervals"][metric]
                assert low <= block[metric] <= high, (split, name, metric)
                assert [low, high] == expected[metric].record(), (split, name, metric)
            assert block["images"] == (60 if split == "test" else 36)
    rows = pd.read_csv(run / "results.csv")
    assert (rows["A_t_low"] <= rows["A_t"]).all() and (rows["A_t"] <= rows["A_t_high"]).all()
    assert set(rows.loc[rows["task"] == 0, "images"]) == {20, 12}  # the classes seen after task 0
    before = (run / "state" / "task_000.safetensors").read_bytes()
    _run("eval", run, "--device", "cpu")  # rewritten from the kept modules, nothing trained
    assert read_run(run).metrics["routers"] == metrics["routers"]
    assert (run / "state" / "task_000.safetensors").read_bytes() == before
    base = tmp_path / "base"
    compared = _run(
        "baselines",
        "--store",
        store,
        "--run",
        run,
        "--out",
        base,
        "--val-fraction",
        "0.25",
        "--ranpac-projection-dim",
        "64",
        *SPLIT,
    )
    assert "[low, high]" in compared
    table = pd.read_csv(base / "comparison.csv")
    assert {"A_last_low", "A_last_high", "A_bar_low", "forgetting_high", "images", "val_A_last_low"} <= set(
        table
    )
    assert (table["A_last_low"] <= table["A_last"]).all() and (table["A_last"] <= table["A_last_high"]).all()
    assert "[" in (base / "comparison.md").read_text().split("| simplecil |")[1]


@pytest.mark.slow
def test_the_routers_table_sets_beside_the_run_only_baselines_of_its_protocol(
    store: Path, tmp_path: Path
) -> None:
    """Issue 36.3: a run holding out 25% listed SimpleCIL three times, with validation columns of 8
    and 16 images mixed."""
    runs = tmp_path / "runs"
    run = runs / "run"
    _run("fit", "--store", store, "--run", run, "--epochs", "1", "--val-fraction", "0.25", *SPLIT)
    simple = ["baselines", "--store", store, "--no-tosca", "--methods", "simplecil", "--device", "cpu"]
    _run(*simple, *SPLIT, "--val-fraction", "0.25", "--out", runs / "same")
    _run(*simple, *SPLIT, "--val-fraction", "0.1", "--out", runs / "tenth")
    _run(*simple, *SPLIT, "--out", runs / "none")
    _run(*simple, "--init-cls", "3", "--increment", "3", "--val-fraction", "0.25", "--out", runs / "split")
    rows = json.loads(_run("routers", run, "--json"))
    baselines = [r for r in rows if r["kind"] == "baseline"]
    assert len(baselines) == 1 and "same" in baselines[0]["summary"]
    assert baselines[0]["val_images"] == 36 and baselines[0]["val_A_last_low"] is not None
    shown = _run("routers", run)
    said = " ".join(shown.split())
    assert (
        "left out: simplecil in" in said and said.count("(another protocol, never set beside the run)") == 3
    )
    assert "another validation split than the run's" in said and "another task split than the run's" in said
    assert "= not distinguishable from" in said or "* the best honest router" in said


def test_the_trackers_get_each_final_figure_with_its_interval() -> None:
    """Through the one event mapping every logger shares (`trackers.events.block_metrics`)."""
    from tosca_heads.records import with_intervals
    from tosca_heads.trackers.events import block_metrics

    run = exactly(0.8)
    found = uncertainty.intervals([run])
    block = with_intervals({"A_last": 0.8, "A_bar": found["A_bar"].value, "forgetting": 0.0}, found)
    logged = {m.key: m.value for m in block_metrics(block, "test", "entropy", 2)}
    assert logged["A_last/test/entropy"] == 0.8
    assert [logged["A_last_low/test/entropy"], logged["A_last_high/test/entropy"]] == block["intervals"][
        "A_last"
    ]
    assert logged["A_bar_low/test/entropy"] <= block["A_bar"] <= logged["A_bar_high/test/entropy"]
    assert "forgetting_high/test/entropy" in logged
