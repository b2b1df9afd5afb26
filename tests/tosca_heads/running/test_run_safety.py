"""Stage 2 under faults: a killed fit resumes from its last finished task to the uninterrupted
result, run files appear whole or not at all, and NaN or inf stops training with the task and epoch
named instead of a metrics file of zeros."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from support.crash_harness import PauseAt, start
from support.messages import after_the_plan
from support.stores import synthetic_store
from typer.testing import CliRunner

from cli import app
from featcache.store import chunk_checksum
from tosca_foundation import atomic
from tosca_foundation.errors import UserError
from tosca_heads.records.run_cell import read_run

RUNNER = CliRunner()


def _fit_cmd(store: Path, run: Path, epochs: int = 40, *extra: str) -> list[str]:
    return [
        "fit",
        "--store",
        str(store),
        "--run",
        str(run),
        "--init-cls",
        "2",
        "--increment",
        "2",
        "--epochs",
        str(epochs),
        "--batch-size",
        "4",
        "--device",
        "cpu",
        *extra,
    ]


def test_killed_fit_resumes_to_the_uninterrupted_run(tmp_path: Path) -> None:
    """Killed as it is about to save task 2 (tasks 0 and 1 on disk): the rerun reuses those two and
    ends with the files and metrics of a run never killed."""
    store = synthetic_store(tmp_path / "s.zarr", classes=10, per_class=40, spread=1.0)
    run = tmp_path / "killed"
    pause = PauseAt(function="tosca_heads.records.run_folder:save_task", occurrence=3)
    child = start(_fit_cmd(store.path, run), tmp_path / "child", pause)
    child.wait_paused()
    child.kill()
    finished = sorted(p.name for p in run.glob("state/task_*.safetensors"))
    assert finished == ["task_000.safetensors", "task_001.safetensors"], finished
    for name in finished:  # every file that is there loads whole
        assert "luca.down.weight" in load_file(str(run / "state" / name))
    assert not (run / "done.json").exists()  # killed mid-task: never read as finished
    with pytest.raises(UserError, match=r"is not finished \(no done.json"):
        read_run(run)
    routers = RUNNER.invoke(app, ["routers", str(run)])
    assert routers.exit_code == 2 and "is not finished" in routers.output
    resumed = RUNNER.invoke(app, _fit_cmd(store.path, run))
    assert resumed.exit_code == 0, resumed.output
    assert resumed.output.count("reused") == len(finished) and resumed.output.count("trained") >= 5 - len(
        finished
    )
    fresh = RUNNER.invoke(app, _fit_cmd(store.path, tmp_path / "fresh"))
    assert fresh.exit_code == 0, fresh.output
    for task in range(5):
        a = load_file(str(run / "state" / f"task_{task:03d}.safetensors"))
        b = load_file(str(tmp_path / "fresh" / "state" / f"task_{task:03d}.safetensors"))
        for key in a:
            torch.testing.assert_close(a[key], b[key], rtol=0, atol=0, msg=key)
    assert read_run(run).metrics["routers"] == read_run(tmp_path / "fresh").metrics["routers"]
    assert not list(run.rglob(".*.tmp"))  # no temporary file left behind


def test_an_interrupted_write_leaves_the_previous_file(tmp_path: Path) -> None:
    path = tmp_path / "metrics.json"
    atomic.write_text(path, '{"A_last": 0.5}\n')
    with pytest.raises(RuntimeError), atomic.writing(path) as fh:
        fh.write('{"A_la')  # a writer that dies half-way
        raise RuntimeError("killed")
    assert json.loads(path.read_text()) == {"A_last": 0.5}
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]


def test_nan_features_stop_fit_naming_their_chunk(tmp_path: Path) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=4)
    features = np.asarray(store.group["train/features"][:])
    features[50, 3] = np.nan  # a row of task 1 (classes 2 and 3 come second in the class order)
    store.group["train/features"][:] = features
    chunk = 50 // store.chunk_size  # vouched for by its checksum, as a writer without the NaN check would
    rows = store.layout("train").chunk_slice(chunk)
    store.group["train/checksums"][chunk] = chunk_checksum(features[rows])
    result = RUNNER.invoke(app, _fit_cmd(store.path, tmp_path / "run", 2))
    assert result.exit_code == 2, result.output
    # the store's read refuses it before task 0 (issue 57, point 4: one check for every reader)
    assert f"train chunk {chunk}: NaN or inf in a chunk marked done" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "run" / "metrics.json").exists()


def test_a_diverging_loss_stops_with_the_task_and_epoch(tmp_path: Path) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=4)
    result = RUNNER.invoke(app, _fit_cmd(store.path, tmp_path / "run", 3, "--lr", "1e38"))
    assert result.exit_code == 2, result.output
    assert "the loss or the weights became NaN or inf at task 0, epoch" in result.output
    lines = result.output.strip().splitlines()  # the protocol and the run folder, then the one-line error
    assert lines[0].startswith("protocol: ") and lines[-1].startswith("error: training diverged")
    assert sum(line.startswith("error") for line in lines) == 1 and len(lines) <= 4
    assert not (tmp_path / "run" / "metrics.json").exists()


def test_one_writer_per_run_and_per_sweep_folder(tmp_path: Path) -> None:
    """While a process writes a run or a sweep folder, a second one is refused in one line; once the
    holder is gone (its lock dies with it) the same command runs."""
    from tosca_foundation.locks import acquire

    store = synthetic_store(tmp_path / "s.zarr", classes=4)
    run, sweep = tmp_path / "run", tmp_path / "sweep"
    held = [acquire(run, "run"), acquire(sweep, "sweep folder")]  # as a running fit and sweep would
    fit = RUNNER.invoke(app, _fit_cmd(store.path, run, 1))
    assert fit.exit_code == 2 and f"run {run} is being written by another tosca process" in fit.output
    assert "pass another --run" in fit.output and len(after_the_plan(fit.output)) == 1
    cmd = ["sweep", "--store", str(store.path), "--r", "2", "--epochs", "1", "--init-cls", "2"]
    cmd += ["--increment", "2", "--device", "cpu", "--jobs", "1", "--out", str(sweep)]
    second = RUNNER.invoke(app, cmd)
    assert second.exit_code == 2 and f"sweep folder {sweep} is being written" in second.output
    for lock in held:
        lock.release()
    assert RUNNER.invoke(app, _fit_cmd(store.path, run, 1)).exit_code == 0
    assert RUNNER.invoke(app, cmd).exit_code == 0


def test_fit_with_a_lower_task_keeps_the_run_folder_consistent(tmp_path: Path) -> None:
    """`--task 0` on a run that finished 3 tasks trains nothing and describes all 3: metrics,
    router statistics and task files agree (predict reads them together)."""
    from safetensors.torch import load_file

    store = synthetic_store(tmp_path / "s.zarr", classes=6)
    run = tmp_path / "run"
    assert RUNNER.invoke(app, _fit_cmd(store.path, run, 2)).exit_code == 0
    before = (run / "state" / "task_002.safetensors").stat().st_mtime_ns
    again = RUNNER.invoke(app, [*_fit_cmd(store.path, run, 2), "--task", "0", "--json"])
    assert again.exit_code == 0, again.output
    metrics = read_run(run).metrics  # finished again, every file whole
    assert len(metrics["routers"]["entropy"]["A_t"]) == 3 and metrics["finished_tasks"] == 3
    assert load_file(str(run / "state" / "router.safetensors"))["counts"].shape[0] == 6
    assert (run / "state" / "task_002.safetensors").stat().st_mtime_ns == before


def test_predict_refuses_router_statistics_that_do_not_match_the_classifier(tmp_path: Path) -> None:
    """A fit killed after a task file but before router.safetensors leaves them out of step."""
    from tosca_heads.applied.predict import RunPredictor
    from tosca_heads.records.run_folder import ROUTER_FILE

    store = synthetic_store(tmp_path / "s.zarr", classes=6)
    run, short = tmp_path / "run", tmp_path / "short"
    assert RUNNER.invoke(app, _fit_cmd(store.path, run, 2)).exit_code == 0
    assert RUNNER.invoke(app, [*_fit_cmd(store.path, short, 2), "--task", "0"]).exit_code == 0
    (run / ROUTER_FILE).write_bytes((short / ROUTER_FILE).read_bytes())  # 2 classes, classifier 6
    with pytest.raises(UserError, match=r"router\.safetensors is not the file that was written"):
        RunPredictor(run, 6).load()  # a finished run: its digests refuse the file first
    (run / "done.json").unlink()  # as the killed fit left it: not finished, each state file checked
    with pytest.raises(UserError, match=r"router\.safetensors covers 2 classes but the classifier"):
        RunPredictor(run, 6).load()
    assert RUNNER.invoke(app, ["eval", str(run), "--device", "cpu"]).exit_code == 0
    assert RunPredictor(run, 6).load().statistics_.classes == 6  # eval rebuilt them


def test_a_damaged_config_is_one_line_and_eval_works_from_inside_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=4)
    run = tmp_path / "run"
    assert RUNNER.invoke(app, _fit_cmd(store.path, run, 2)).exit_code == 0
    monkeypatch.chdir(run)
    inside = RUNNER.invoke(app, ["eval", ".", "--device", "cpu"])
    assert inside.exit_code == 0, inside.output
    (run / "asked.json").write_text('{"store": ')
    for argv in (["eval", "."], ["routers", "."], ["predict", ".", "x.jpg"]):
        result = RUNNER.invoke(app, argv)
        assert result.exit_code == 2 and "is not valid JSON" in result.output, (argv, result.output)
        assert "Traceback" not in result.output


def test_baselines_leave_a_run_of_another_store_alone(tmp_path: Path) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=4)
    other = synthetic_store(tmp_path / "o.zarr", classes=4, seed=5)
    run = tmp_path / "run"
    assert RUNNER.invoke(app, _fit_cmd(store.path, run, 2)).exit_code == 0
    files = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    result = RUNNER.invoke(
        app,
        [
            "baselines",
            "--store",
            str(other.path),
            "--run",
            str(run),
            "--init-cls",
            "2",
            "--increment",
            "2",
            "--methods",
            "simplecil",
            "--out",
            str(tmp_path / "b"),
            "--device",
            "cpu",
        ],
    )
    assert result.exit_code == 2 and "was fitted on another store" in result.output, result.output
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == files


def test_one_writer_per_baselines_folder(tmp_path: Path) -> None:
    """`tosca baselines` holds its folder's lock while it writes (the one claim, as a run's and a
    sweep's): a second one into the same folder is refused naming the holder, before anything is
    written there; once the holder is gone the same command runs."""
    from tosca_foundation.locks import acquire

    store = synthetic_store(tmp_path / "s.zarr", classes=4)
    out = tmp_path / "cmp"
    cmd = ["baselines", "--store", str(store.path), "--init-cls", "2", "--increment", "2"]
    cmd += ["--methods", "simplecil", "--no-tosca", "--device", "cpu", "--out", str(out)]
    held = acquire(out, "baselines folder")  # as a running `tosca baselines` would
    busy = RUNNER.invoke(app, cmd)
    assert (
        busy.exit_code == 2
        and f"baselines folder {out} is being written by another tosca process" in busy.output
    )
    assert f"(pid {os.getpid()} on " in busy.output and "pass another --out" in busy.output
    assert not (out / "simplecil").exists()
    held.release()
    done = RUNNER.invoke(app, cmd)
    assert done.exit_code == 0, done.output
    assert (out / "simplecil" / "metrics.json").is_file() and (out / "comparison.csv").is_file()
