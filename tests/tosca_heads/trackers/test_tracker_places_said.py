"""A command that logged to a tracker ends with one line per tracker saying where its runs are and
how to open them (issue 49, point 4): the command given there opens the runs just logged."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
from support.stores import synthetic_store
from typer.testing import CliRunner

from cli import app
from tosca_heads.trackers import LOGGERS, Logger, Metric, register_logger
from tosca_heads.trackers.mlflow_logger import shown_uri

RUNNER = CliRunner()
FIT = [
    "--epochs",
    "2",
    "--batch-size",
    "8",
    "--r",
    "4",
    "--init-cls",
    "2",
    "--increment",
    "2",
    "--device",
    "cpu",
]


class Lab(Logger):
    """A plug-in tracker with its own end line; `failing` makes its start raise."""

    name = "lab"
    summary = "a lab's tracker (tests)"
    own_line: ClassVar[bool] = True
    failing: ClassVar[bool] = False
    started: ClassVar[list[str]] = []

    def start(self, name: str, parent: Any | None) -> str:
        if self.failing:
            raise ConnectionError("the lab server went away")
        self.started.append(name)
        return name

    def params(self, run: Any, params: dict[str, Any]) -> None:
        pass

    def metrics(self, run: Any, metrics: Sequence[Metric]) -> None:
        pass

    def artifacts(self, run: Any, files: Sequence[Path]) -> None:
        pass

    def end(self, run: Any, ok: bool) -> None:
        pass

    def opened_by(self) -> str:
        if not self.own_line:
            return super().opened_by()
        return f"lab runs at https://lab.example/{self.where}"


@pytest.fixture
def lab() -> Iterator[type[Lab]]:
    register_logger(Lab)
    Lab.failing, Lab.started, Lab.own_line = False, [], True
    yield Lab
    del LOGGERS["lab"]


def _ending(stderr: str, start: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(start)]


def test_a_plugin_tracker_ends_the_command_with_its_line_once_and_a_dry_run_with_none(
    tmp_path: Path, lab: type[Lab]
) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=4, per_class=10)
    result = RUNNER.invoke(
        app,
        ["fit", "--store", str(store.path), *FIT, "--run", str(tmp_path / "r"), "--log", "lab=x", "--json"],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["run"] == str(tmp_path / "r")  # stdout stays the answer alone
    assert Lab.started == ["r"]
    assert _ending(result.stderr, "lab runs") == ["lab runs at https://lab.example/x"]
    assert result.stderr.rstrip().splitlines()[-1] == "lab runs at https://lab.example/x"  # the last line

    # a dry run logs nothing, and says no such line
    dry = RUNNER.invoke(
        app,
        [
            "sweep",
            "--store",
            str(store.path),
            "--r",
            "2,4",
            "--dry-run",
            "--log",
            "lab=x",
            "--out",
            str(tmp_path / "sw"),
        ],
    )
    assert dry.exit_code == 0, dry.output
    assert "lab runs" not in dry.output and Lab.started == ["r"]

    # a tracker that stopped: its warning is its one line (it says what the tracker holds)
    Lab.failing = True
    stopped = RUNNER.invoke(
        app, ["fit", "--store", str(store.path), *FIT, "--run", str(tmp_path / "r2"), "--log", "lab=y"]
    )
    assert stopped.exit_code == 0, stopped.output
    assert "lab runs" not in stopped.stderr
    assert "--log lab stopped (ConnectionError: the lab server went away)" in stopped.stderr


def test_a_plugin_tracker_without_a_line_of_its_own_says_where_it_was_told(
    tmp_path: Path, lab: type[Lab]
) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=4, per_class=10)
    Lab.own_line = False  # the base class's line
    result = RUNNER.invoke(
        app, ["fit", "--store", str(store.path), *FIT, "--run", str(tmp_path / "r"), "--log", "lab"]
    )
    assert result.exit_code == 0, result.output
    assert result.stderr.rstrip().splitlines()[-1] == "--log lab: the runs went to its default place"


def test_a_password_in_a_tracking_uri_is_not_said() -> None:
    assert (
        shown_uri("postgresql://ann:secret@db.lab:5432/mlflow") == "postgresql://ann:***@db.lab:5432/mlflow"
    )
    assert shown_uri("sqlite:////tmp/mlflow.db") == "sqlite:////tmp/mlflow.db"


@pytest.mark.heavy  # MLflow's sqlite store, TensorBoard's writer
def test_mlflow_and_tensorboard_lines_name_the_place_and_a_command_that_opens_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mlflow_tracking = pytest.importorskip("mlflow.tracking")
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    monkeypatch.chdir(tmp_path)  # the default places: runs/mlflow/mlflow.db and runs/tensorboard
    store = synthetic_store(tmp_path / "s.zarr", classes=4, per_class=10)
    result = RUNNER.invoke(
        app,
        [
            "fit",
            "--store",
            str(store.path),
            *FIT,
            "--run",
            "fitted",
            "--log",
            "mlflow",
            "--log",
            "tensorboard",
        ],
    )
    assert result.exit_code == 0, result.output
    mlflow_line, board_line = result.stderr.rstrip().splitlines()[-2:]
    database = (tmp_path / "runs" / "mlflow" / "mlflow.db").absolute()
    assert mlflow_line.startswith(f"MLflow runs (experiment tosca) in {database}: see them with `mlflow ui")
    command = shlex.split(mlflow_line.split("`")[1])
    assert command[:3] == ["mlflow", "ui", "--backend-store-uri"]
    client = mlflow_tracking.MlflowClient(tracking_uri=command[3])  # what `mlflow ui` would open
    found = client.get_experiment_by_name("tosca")
    (run,) = client.search_runs([found.experiment_id])
    assert run.info.run_name == "fitted" and run.info.status == "FINISHED"

    logdir = (tmp_path / "runs" / "tensorboard").absolute()
    assert board_line == f"TensorBoard runs in {logdir}: see them with `tensorboard --logdir {logdir}`"
    folder = Path(shlex.split(board_line.split("`")[1])[2]) / "fitted"
    acc = event_accumulator.EventAccumulator(str(folder))
    acc.Reload()
    assert "A_last/test/entropy" in acc.Tags()["scalars"]
