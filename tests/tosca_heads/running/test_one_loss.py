"""One loss (issue 35): the console, metrics.json, results.csv and curves.csv give a task's training
loss as the same two named parts and their sum (the trackers: test_trackers), and runs written
before (format 3: curves.csv's `loss` was the cross-entropy alone, the stats' `loss` the sum) are
read back with their parts unknown, never mislabelled."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file
from support.stores import synthetic_store
from typer.testing import CliRunner

from cli import app
from tosca_foundation.errors import UserError
from tosca_heads.records.run_cell import read_run
from tosca_heads.records.run_folder import CURVES_FILE, task_file
from tosca_heads.running.group import evaluate_run

RUNNER = CliRunner()
L1 = 2e-3


def _fit(tmp_path: Path, batch: int) -> tuple[Path, str]:
    store = synthetic_store(tmp_path / "s.zarr", classes=4, per_class=12, spread=1.0)
    run = tmp_path / "run"
    args = ["fit", "--store", str(store.path), "--run", str(run), "--init-cls", "2", "--increment", "2"]
    args += [
        "--epochs",
        "3",
        "--batch-size",
        str(batch),
        "--r",
        "4",
        "--s",
        "4",
        "--l1",
        str(L1),
        "--device",
        "cpu",
    ]
    done = RUNNER.invoke(app, args)
    assert done.exit_code == 0, done.output
    return run, done.output


def test_each_task_has_one_ce_one_l1_term_and_their_sum_everywhere(tmp_path: Path) -> None:
    run, output = _fit(tmp_path, batch=64)  # one step per epoch: the L1 term is the module's after it
    tasks = json.loads((run / "metrics.json").read_text())["tasks"]
    curves = read_run(run).curves  # measured.json's, what curves.csv shows
    with (run / "results.csv").open() as fh:
        rows = [r for r in csv.DictReader(fh) if r["split"] == "test"]
    assert "ce = mean cross-entropy per training sample" in output
    for stats in tasks:
        t = stats["task"]
        assert stats["loss"] == pytest.approx(stats["ce"] + stats["l1_term"], rel=1e-12)
        # curves.csv's last epoch is the task's figures, to the digit
        assert curves[t]["ce"][-1] == stats["ce"] and curves[t]["l1_term"][-1] == stats["l1_term"]
        # the L1 term is l1 x |module|_1 of the module the task file keeps
        module = {k: v for k, v in load_file(task_file(run, t)).items() if k.startswith("luca.")}
        assert stats["l1_term"] == pytest.approx(
            L1 * sum(float(v.abs().sum()) for v in module.values()), rel=1e-5
        )
        assert 0 < stats["ce"] < stats["loss"]
        for row in (r for r in rows if int(r["task"]) == t):
            assert [float(row[k]) for k in ("ce", "l1_term", "loss")] == pytest.approx(
                [stats["ce"], stats["l1_term"], stats["loss"]], abs=1e-6
            )
        # the console's row says the same three figures, in the same order
        line = next(x for x in output.splitlines() if re.match(rf"\s*{t}\s+trained\s", x))
        shown = [float(v) for v in line.split()[2:5]]
        assert shown == pytest.approx([stats["ce"], stats["l1_term"], stats["loss"]], abs=6e-5)
    rows = list(csv.reader((run / CURVES_FILE).read_text().splitlines()))
    assert rows[0] == ["format", "task", "epoch", "ce", "l1_term", "loss", "lr"]
    for row in rows[1:]:
        assert float(row[5]) == pytest.approx(float(row[3]) + float(row[4]), rel=1e-12)


def test_several_steps_per_epoch_weigh_each_image_once(tmp_path: Path) -> None:
    """12 training images per task in batches of 5 (5, 5, 2): the cross-entropy is per image."""
    run, _ = _fit(tmp_path, batch=5)
    tasks = json.loads((run / "metrics.json").read_text())["tasks"]
    curves = read_run(run).curves  # measured.json's, what curves.csv shows
    for stats in tasks:
        assert curves[stats["task"]]["ce"][-1] == stats["ce"]
        assert stats["loss"] == pytest.approx(stats["ce"] + stats["l1_term"], rel=1e-12)


def _without_loss_parts(run: Path) -> None:
    """Rewrite a run's task files as the builds before tosca's first release wrote them: stats with
    only the sum `loss`, the curve's `loss` the cross-entropy; and its curves.csv with their header."""
    for t in range(2):
        path = task_file(run, t)
        from safetensors import safe_open

        with safe_open(str(path), "pt") as fh:
            meta = dict(fh.metadata())
        stats, curve = json.loads(meta["stats"]), json.loads(meta["curve"])
        meta["stats"] = json.dumps({k: stats[k] for k in ("task", "loss", "train_acc", "seconds")})
        meta["curve"] = json.dumps({"loss": curve["ce"], "lr": curve["lr"]})
        save_file(load_file(path), str(path), meta)
    (run / "done.json").unlink()  # state files with no digest vouching for them: each checked as read


def test_task_files_and_curves_without_the_loss_parts_are_refused(tmp_path: Path) -> None:
    """No reader of the unreleased formats is kept: a task file without the loss's parts is one
    line naming the file, never a table with parts made up or left empty (curves.csv is a view,
    never read back)."""
    run, _ = _fit(tmp_path, batch=64)
    _without_loss_parts(run)
    with pytest.raises(
        UserError, match=r"task_000\.safetensors is damaged \(its training stats are unreadable\)"
    ):
        evaluate_run(run)
    shown = RUNNER.invoke(app, ["eval", str(run)])
    assert shown.exit_code == 2 and "task_000.safetensors is damaged" in shown.output, shown.output
