"""A TOSCA run is a cell (issue 54): asked.json, measured.json (nothing a reader could derive),
the answers, state/ and done.json written last. Every figure, the routing confusion, the finished
tasks and the parameter count are computed when read, and equal what the fit itself had; a run
written again is not finished until its done.json is written again (a resumed fit that dies, or a
full disk, leaves none: refused as not finished, then finished by the same command)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from support.stores import synthetic_store

import tosca_heads
from tosca_foundation.errors import UserError
from tosca_heads.engine.layout import ParamLayout
from tosca_heads.records.run_cell import MEASURED_KEYS, read_run
from tosca_heads.running import group

SPLIT = {"init_cls": 2, "increment": 2, "epochs": 1, "batch_size": 8}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthetic_store(
        tmp_path_factory.mktemp("cell") / "s.zarr", classes=6, per_class=12, test_per_class=6
    ).path


def test_a_run_keeps_what_was_asked_measured_and_answered_and_computes_the_rest(
    store: Path, tmp_path: Path
) -> None:
    result = tosca_heads.fit(store, run=tmp_path / "run", val_fraction=0.25, r=4, s=4, **SPLIT)
    run = tmp_path / "run"
    asked = json.loads((run / "asked.json").read_text())
    assert asked["train"]["r"] == 4 and set(asked["versions"]) >= {"tosca", "torch", "numpy"}
    measured = json.loads((run / "measured.json").read_text())
    assert set(measured) == {"format", "seconds", "machine", "tasks", "curves"}  # no figure to edit
    assert [set(row) for row in measured["tasks"]] == [{"task", *MEASURED_KEYS}] * 3
    assert measured["seconds"] == pytest.approx(
        sum(r["seconds"] + r["eval_seconds"] for r in measured["tasks"])
    )
    done = json.loads((run / "done.json").read_text())["sha256"]
    assert {"asked.json", "measured.json", "outcomes.safetensors", "state/router.safetensors"} <= set(done)
    assert {f"state/task_{t:03d}.safetensors" for t in range(3)} <= set(done)
    assert "metrics.json" not in done and "results.csv" not in done  # views, never read back

    read = read_run(run)
    assert read.finished_tasks == 3
    assert (
        read.params_per_task
        == ParamLayout(asked["feature_dim"], 4, 4, "tosca").size
        == result.params_per_task
    )
    assert read.metrics == json.loads(json.dumps(result.metrics()))  # what the fit had, computed anew
    last = result.stages[-1]
    for split, routers in (("test", last.routers), ("validation", last.validation or {})):
        assert read.confusion[split] == {n: s["confusion"] for n, s in routers.items()}  # the evaluator's
    assert read.curves == {s.task: s.curve for s in result.stages}


def test_a_resumed_fit_that_dies_leaves_no_finished_run_and_the_same_command_finishes_it(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    tosca_heads.fit(store, run=run, task=1, **SPLIT)
    assert read_run(run).finished_tasks == 2
    real = group.GroupFit.train_task

    def dies_at_task_2(self: group.GroupFit, task: int) -> None:
        if task == 2:
            raise KeyboardInterrupt  # killed mid-task
        real(self, task)

    with monkeypatch.context() as killed:
        killed.setattr(group.GroupFit, "train_task", dies_at_task_2)
        with pytest.raises(KeyboardInterrupt):
            tosca_heads.fit(store, run=run, **SPLIT)
    assert not (run / "done.json").exists()  # removed first: never read as the 2-task run it was
    with pytest.raises(UserError, match="is not finished") as refused:
        read_run(run)
    assert "\n" not in str(refused.value)
    resumed = tosca_heads.fit(store, run=run, **SPLIT)
    assert resumed.trained == [2]  # tasks 0 and 1 from their state files
    assert read_run(run).finished_tasks == 3


def test_a_run_stopped_by_a_full_disk_is_finished_again_never_read_half_written(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills as done.json is synced (as `test_disk_full` injects it): every other file is
    written, yet the run is not finished; the same fit writes it again."""
    run = tmp_path / "run"
    real_fsync = os.fsync

    def full_at_done(fd: int) -> None:
        if "done.json" in os.path.basename(os.readlink(f"/proc/self/fd/{fd}")):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    with monkeypatch.context() as full:
        full.setattr(os, "fsync", full_at_done)
        with pytest.raises((OSError, UserError), match="No space left on device"):
            tosca_heads.fit(store, run=run, **SPLIT)
    assert (run / "measured.json").is_file() and not (run / "done.json").exists()
    with pytest.raises(UserError, match="is not finished"):
        read_run(run)
    again = tosca_heads.fit(store, run=run, **SPLIT)
    assert again.trained == []  # every task's state was whole: evaluated again, the cell written
    assert read_run(run).metrics["routers"] == json.loads(json.dumps(again.metrics()))["routers"]


def test_a_finished_run_edited_since_is_never_written_over_by_a_fit(store: Path, tmp_path: Path) -> None:
    """A resumed or repeated `tosca fit` on a finished run whose state was edited since (a task
    file of another run copied in) is one line after the plan, before done.json is removed or any
    file written: the run is never rewritten from a file it did not make."""
    from support.messages import after_the_plan
    from typer.testing import CliRunner

    from cli import app

    run, other = tmp_path / "run", tmp_path / "other"
    tosca_heads.fit(store, run=run, **SPLIT)
    tosca_heads.fit(store, run=other, r=8, s=8, **SPLIT)
    (run / "state" / "task_001.safetensors").write_bytes(
        (other / "state" / "task_001.safetensors").read_bytes()
    )
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    args = ["fit", "--store", str(store), "--run", str(run), "--init-cls", "2", "--increment", "2"]
    done = CliRunner().invoke(app, [*args, "--epochs", "1", "--batch-size", "8", "--device", "cpu"])
    lines = after_the_plan(done.output)
    assert done.exit_code == 2 and len(lines) == 1, done.output
    assert "state/task_001.safetensors is not the file that was written" in lines[0]
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"} == before
