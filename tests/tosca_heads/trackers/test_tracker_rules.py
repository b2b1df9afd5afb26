"""Trackers held to the rules every other write follows, read back with MLflow's client, MLflow's
own UI server and TensorBoard's own server:

- a killed logged sweep, resumed, leaves one finished parent holding every point (the cut child
  discarded, nothing left running); a finished suite rerun logs no empty parent, and a tracker added
  on a rerun gets every cell;
- two commands creating one new sqlite store at once: the second waits, both log (crash harness);
- a tracker that fails after the run started is one line and costs nothing (a plug-in that raises,
  a server answering 503 with MLflow's retries bounded to seconds);
- dry runs and refusals write nothing and print one line (no MLflow INFO lines);
- `--log mlflow` alone writes runs/mlflow/ (never mlflow.db or mlruns/ in the working folder), and
  `mlflow ui` as the docs give it serves those runs and their files;
- TensorBoard's HParams tab lists every point's settings with its final test and validation
  figures; a link planted at a run folder's name is never followed.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd
import pytest
from support.crash_harness import PauseAt, start
from support.stores import synthetic_store
from typer.testing import CliRunner

import tosca_heads
from cli import app
from tosca_heads.studies.suite.spec import parse_suite
from tosca_heads.trackers import LOGGERS, Logger, Metric, register_logger

pytestmark = pytest.mark.heavy  # commands in child processes, MLflow's store and UI, TensorBoard's server

mlflow_tracking = pytest.importorskip("mlflow.tracking")
pytest.importorskip("tensorboard")

RUNNER = CliRunner()
SPLIT = ["--init-cls", "2", "--increment", "2"]
QUICK = ["--epochs", "2", "--batch-size", "8", "--r", "4", "--s", "4", "--device", "cpu"]


def _runs(uri: str, experiment: str = "tosca") -> list[Any]:
    """Every run of the experiment, deleted ones too, through MLflow's client."""
    from mlflow.entities import ViewType

    client = mlflow_tracking.MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    return client.search_runs([found.experiment_id], run_view_type=ViewType.ALL)


def _history(uri: str, run_id: str, key: str) -> list[tuple[int, float]]:
    client = mlflow_tracking.MlflowClient(tracking_uri=uri)
    return [(m.step, m.value) for m in client.get_metric_history(run_id, key)]


def _artifacts(uri: str, run_id: str) -> list[str]:
    return sorted(f.path for f in mlflow_tracking.MlflowClient(tracking_uri=uri).list_artifacts(run_id))


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_a_killed_logged_sweep_resumes_into_one_finished_parent_holding_every_point(tmp_path: Path) -> None:
    """Killed as its tracker logs the third point (that child started, no metrics yet: what a kill
    -9 leaves), then resumed: one parent (the same), finished, holding the six points once each,
    every child finished with results.csv's figures and its own files; the cut child discarded;
    nothing running; TensorBoard's parent folder holds the six points too."""
    store = synthetic_store(tmp_path / "s.zarr", classes=6, per_class=20, spread=1.5)
    uri, board, out = f"sqlite:///{tmp_path / 'm.db'}", tmp_path / "tb", tmp_path / "sweep"
    args = [
        "sweep", "--store", str(store.path), "--r", "2,4,8", "--seeds", "0,1", "--val-fraction", "0.25",
        *SPLIT, "--epochs", "2", "--batch-size", "8", "--jobs", "1", "--device", "cpu",
        "--out", str(out), "--log", f"mlflow={uri}", "--log", f"tensorboard={board}",
    ]  # fmt: skip
    pause = PauseAt(function="tosca_heads.trackers.mlflow_logger:MlflowLogger.metrics", occurrence=3)
    child = start(args, tmp_path / "child", pause)
    child.wait_paused()
    child.kill()
    before = _runs(uri)
    (parent,) = [r for r in before if "mlflow.parentRunId" not in r.data.tags]
    assert parent.info.status == "RUNNING" and len(before) == 4  # the parent and three children
    cut = [r for r in before if r.data.tags.get("mlflow.parentRunId") and not r.data.metrics]
    assert len(cut) == 1 and cut[0].info.status == "RUNNING"
    assert len([p for p in (out / "points").iterdir() if (p / "done.json").is_file()]) == 3  # finished cells

    resumed = RUNNER.invoke(app, args)
    assert resumed.exit_code == 0, resumed.output
    results = pd.read_csv(out / "results.csv")
    assert results["key"].nunique() == 6
    after = _runs(uri)
    assert not [r for r in after if r.info.status == "RUNNING"]
    live = [r for r in after if r.info.lifecycle_stage == "active"]
    (again,) = [r for r in live if "mlflow.parentRunId" not in r.data.tags]
    assert again.info.run_id == parent.info.run_id and again.info.status == "FINISHED"
    children = [r for r in live if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(r.data.params["key"] for r in children) == sorted(results["key"].unique())
    assert [r.info.lifecycle_stage for r in after if r.info.run_id == cut[0].info.run_id] == ["deleted"]
    for run in children:
        assert run.info.status == "FINISHED"
        rows = results[(results["key"] == run.data.params["key"]) & (results["router"] == "entropy")]
        for split in ("test", "validation"):
            figure = rows[rows["split"] == split]["A_last"].iloc[0]
            assert _history(uri, run.info.run_id, f"A_last/{split}/entropy") == [
                (2, pytest.approx(figure, abs=1e-6))
            ]
        assert "results.csv" in _artifacts(uri, run.info.run_id)
    points = [p for p in (board / "sweep_sweep").iterdir() if p.is_dir()]
    assert len(points) == 6


def test_a_finished_suite_rerun_logs_no_empty_parent_and_a_new_tracker_gets_every_cell(
    tmp_path: Path,
) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=6, per_class=20, spread=1.5)
    spec = parse_suite(
        {
            "seeds": [0],
            "tosca": {"flags": {"epochs": 1, "batch_size": 8, "r": 4, "s": 4}},
            "baselines": {"methods": ["simplecil"]},
            "stores": [{"name": "tiny", "path": str(store.path), "init_cls": 2, "increment": 2}],
        },
        tmp_path,
    )
    uri, board = f"sqlite:///{tmp_path / 'm.db'}", tmp_path / "tb"
    first = tosca_heads.run_suite(spec, tmp_path / "suite", device="cpu", jobs=1, log=[f"mlflow={uri}"])
    cells = sorted(c.cell.key for c in first.cells)
    logged = _runs(uri)
    tosca_heads.run_suite(
        spec, tmp_path / "suite", device="cpu", jobs=1, log=[f"mlflow={uri}", f"tensorboard={board}"]
    )
    again = _runs(uri)
    assert [(r.info.run_id, r.info.status, r.info.end_time) for r in again] == [
        (r.info.run_id, r.info.status, r.info.end_time) for r in logged
    ]  # nothing told to MLflow: it held every cell
    (parent,) = [r for r in again if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in again if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert parent.info.status == "FINISHED" and sorted(r.info.run_name for r in children) == cells
    (folder,) = board.iterdir()  # TensorBoard, asked for on the rerun only, got every finished cell
    assert len([p for p in folder.iterdir() if p.is_dir()]) == len(cells)
    baseline = next(r for r in children if "simplecil" in r.info.run_name)
    assert "A_last/test/simplecil" in baseline.data.metrics  # a reused cell's block under its method


def _fit(tmp_path: Path, store: Path, name: str, *log: str) -> list[str]:
    return [
        "fit",
        "--store",
        str(store),
        *SPLIT,
        *QUICK,
        "--run",
        str(tmp_path / name),
        *(f"--log={v}" for v in log),
    ]


def test_two_commands_creating_one_new_store_at_once_both_log(tmp_path: Path) -> None:
    """The first is paused inside MLflow's table creation (its initial tables made, their
    migrations not yet run: where a second command used to crash with `duplicate column name` or
    find half-made tables); the second waits for it, says so, and both runs are logged."""
    store = synthetic_store(tmp_path / "s.zarr", classes=6, per_class=10).path
    uri = f"sqlite:///{tmp_path / 'new' / 'm.db'}"
    first = start(
        _fit(tmp_path, store, "a", f"mlflow={uri}"),
        tmp_path / "first",
        PauseAt(function="mlflow.store.db.utils:_upgrade_db", resumable=True),
    )
    first.wait_paused()
    second = start(_fit(tmp_path, store, "b", f"mlflow={uri}"), tmp_path / "second")
    second.wait_for("stderr", "waiting for")
    first.resume()
    assert first.finish() == 0, first.text("stderr")[-2000:]
    assert second.finish() == 0, second.text("stderr")[-2000:]
    runs = _runs(uri)
    assert sorted((r.info.run_name, r.info.status) for r in runs) == [("a", "FINISHED"), ("b", "FINISHED")]
    assert all("A_last/test/entropy" in r.data.metrics for r in runs)


class Flaky(Logger):
    """A tracker whose server goes away after its first batch of metrics."""

    name = "flaky"
    calls: ClassVar[list[str]] = []

    def start(self, name: str, parent: Any | None) -> str:
        self.calls.append("start")
        return name

    def params(self, run: Any, params: dict[str, Any]) -> None:
        self.calls.append("params")

    def metrics(self, run: Any, metrics: Sequence[Metric]) -> None:
        self.calls.append("metrics")
        if self.calls.count("metrics") == 2:
            raise ConnectionError("the server went away\nand a second line nobody needs")

    def artifacts(self, run: Any, files: Sequence[Path]) -> None:
        self.calls.append("artifacts")

    def end(self, run: Any, ok: bool) -> None:
        self.calls.append("end")


@pytest.fixture
def flaky() -> Iterator[type[Flaky]]:
    register_logger(Flaky)
    Flaky.calls = []
    yield Flaky
    del LOGGERS["flaky"]


@pytest.fixture
def server_503() -> Iterator[str]:
    """A tracking server that says it is healthy and answers every request with 503."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.send_response(200 if self.path.startswith("/health") else 503)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST = _answer

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_tracker_failing_mid_run_is_one_line_and_costs_nothing(
    tmp_path: Path, flaky: type[Flaky], server_503: str
) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=6, per_class=10).path
    plain = RUNNER.invoke(app, _fit(tmp_path, store, "plain"))
    assert plain.exit_code == 0, plain.output
    logged = RUNNER.invoke(app, _fit(tmp_path, store, "flaky", "flaky"))
    assert logged.exit_code == 0, logged.output
    warnings = [line for line in _lines(logged.output) if "--log flaky" in line]
    assert warnings == [
        "warning: --log flaky stopped (ConnectionError: the server went away); the results are all written "
        "as usual, the tracker keeps what it had before (run the same command again to log it whole)"
    ]
    assert Flaky.calls == ["start", "params", "metrics", "metrics"]  # nothing told after the failure
    expected = json.loads((tmp_path / "plain" / "metrics.json").read_text())
    got = json.loads((tmp_path / "flaky" / "metrics.json").read_text())
    assert {k: v for k, v in got.items() if k != "tasks"} == {
        k: v for k, v in expected.items() if k != "tasks"
    }

    began = time.monotonic()
    served = RUNNER.invoke(app, _fit(tmp_path, store, "served", f"mlflow={server_503}"))
    assert served.exit_code == 0, served.output
    assert time.monotonic() - began < 120  # MLflow alone retries for minutes
    (line,) = [line for line in _lines(served.output) if "--log mlflow" in line]
    assert line.startswith("warning: --log mlflow stopped (") and "Traceback" not in served.output
    assert (tmp_path / "served" / "metrics.json").is_file()


def test_dry_runs_and_refusals_write_nothing_and_say_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=6, per_class=10).path
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    dry = RUNNER.invoke(
        app,
        ["sweep", "--store", str(store), "--r", "2,4", *SPLIT, "--dry-run", "--log", "mlflow=sqlite:///d/m.db",
         "--log", "tensorboard=tb", "--log", "mlflow"],
    )  # fmt: skip
    assert dry.exit_code == 0, dry.output
    assert sorted(os.listdir(work)) == []  # no d/m.db, no tb/, no runs/mlflow/
    refused = start(  # a child of the fork server: paths absolute
        [*_fit(tmp_path, store, "r", f"mlflow=sqlite:///{tmp_path}/d/m.db"), "--task", "99"],
        tmp_path / "refused",
    )
    assert refused.finish() == 2
    said = _lines(refused.text("stdout") + refused.text("stderr"))
    assert len(said) == 1 and "--task 99 is past the last task" in said[0], said
    assert not (tmp_path / "d").exists() and not (tmp_path / "r").exists()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as answer:
        return answer.read()


def test_mlflow_alone_writes_under_runs_and_mlflow_ui_shows_the_runs_and_their_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--log mlflow` in a fresh folder writes runs/mlflow/ only; `mlflow ui --backend-store-uri
    sqlite:///runs/mlflow/mlflow.db` (the docs' command, run from that folder) serves MLflow's own
    page, lists the run and hands out its files."""
    store = synthetic_store(tmp_path / "s.zarr", classes=6, per_class=10).path
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    done = RUNNER.invoke(
        app, ["fit", "--store", str(store), *SPLIT, *QUICK, "--run", "runs/one", "--log", "mlflow"]
    )
    assert done.exit_code == 0, done.output
    assert sorted(os.listdir(work)) == ["runs"] and sorted(os.listdir(work / "runs")) == ["mlflow", "one"]
    assert sorted(os.listdir(work / "runs" / "mlflow")) == ["mlartifacts", "mlflow.db"]

    port = _free_port()
    command = [
        str(Path(sys.executable).parent / "mlflow"),
        "ui",
        "--backend-store-uri",
        "sqlite:///runs/mlflow/mlflow.db",
    ]
    server = subprocess.Popen(  # --workers 1: one process to start on a busy machine (default 4)
        [*command, "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        cwd=work,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"},
    )
    guard = threading.Timer(600, server.kill)  # a server that never says it is up ends the wait
    guard.start()
    try:
        seen = []
        assert server.stderr is not None
        for line in server.stderr:  # it says when it serves: uvicorn's "running on" comes once the
            seen.append(line)  # port is bound ("Application startup complete" comes before the bind)
            if "Uvicorn running on" in line:
                break
        assert server.poll() is None, "".join(seen)
        base = f"http://127.0.0.1:{port}"
        assert b"<title>MLflow</title>" in _get(base + "/")
        found = json.loads(_get(base + "/ajax-api/2.0/mlflow/experiments/get-by-name?experiment_name=tosca"))[
            "experiment"
        ]
        runs = json.loads(
            urllib.request.urlopen(
                urllib.request.Request(
                    base + "/ajax-api/2.0/mlflow/runs/search",
                    data=json.dumps({"experiment_ids": [found["experiment_id"]]}).encode(),
                    headers={"Content-Type": "application/json"},
                ),
                timeout=60,
            ).read()
        )["runs"]
        (run,) = runs
        assert run["info"]["run_name"] == "one" and run["info"]["status"] == "FINISHED"
        shown = _get(f"{base}/get-artifact?path=metrics.json&run_uuid={run['info']['run_id']}")
        assert json.loads(shown) == json.loads((work / "runs" / "one" / "metrics.json").read_text())
    finally:
        guard.cancel()
        server.terminate()
        server.wait(60)


def test_tensorboard_hparams_lists_every_point_with_its_final_figures(tmp_path: Path) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=6, per_class=20, spread=1.5)
    board = tmp_path / "tb"
    frame = tosca_heads.sweep(
        store, {"r": [2, 4], "l1": [0.0, 1e-3]}, tmp_path / "sweep", jobs=1, device="cpu", val_fraction=0.25,
        epochs=2, batch_size=8, init_cls=2, increment=2, log=[f"tensorboard={board}"],
    )  # fmt: skip
    (board / "planted-target").mkdir()
    (board / "one").symlink_to(board / "planted-target")  # a link at the next run's folder name
    tosca_heads.fit(
        store,
        run=tmp_path / "one",
        epochs=2,
        batch_size=8,
        init_cls=2,
        increment=2,
        log=[f"tensorboard={board}"],
    )
    assert not any((board / "planted-target").iterdir()) and (board / "one-2").is_dir()

    from tensorboard import program

    server = program.TensorBoard()
    server.configure(
        argv=[None, "--logdir", str(board), "--host", "127.0.0.1", "--port", "0", "--load_fast", "false",
              "--reload_task", "blocking", "--reload_interval", "0"]
    )  # fmt: skip
    url = server.launch()

    def post(path: str, body: dict[str, Any]) -> Any:
        request = urllib.request.Request(
            url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        return json.loads(urllib.request.urlopen(request, timeout=60).read())

    experiment = post("data/plugin/hparams/experiment", {"experimentName": ""})
    settings = {h["name"] for h in experiment["hparamInfos"]}
    assert {"r", "l1", "key", "train.lr"} <= settings  # the points' and the fit's, side by side
    figures = {m["name"]["tag"] for m in experiment["metricInfos"]}
    assert {"A_last/test/entropy", "A_last/validation/entropy", "A_bar/test/entropy"} <= figures
    groups = post(
        "data/plugin/hparams/session_groups",
        {
            "experimentName": "",
            "allowedStatuses": ["STATUS_SUCCESS"],
            "colParams": [],
            "startIndex": 0,
            "sliceSize": 100,
        },
    )["sessionGroups"]
    points = {g["hparams"]["key"]: g for g in groups if "key" in g["hparams"]}
    assert len(points) == 4 and len(groups) == 5  # four points and the fit; no parent row
    for key, group in points.items():
        for split in ("test", "validation"):
            (value,) = [
                m["value"] for m in group["metricValues"] if m["name"]["tag"] == f"A_last/{split}/entropy"
            ]
            row = frame[(frame["key"] == key) & (frame["split"] == split) & (frame["router"] == "entropy")]
            assert value == pytest.approx(float(row["A_last"].iloc[0]), abs=1e-6)
