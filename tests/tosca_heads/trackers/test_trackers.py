"""Runs, sweeps, suites and comparisons sent to the trackers a lab uses (`--log`), read back through
each tracker's own reader (MLflow's client on a local sqlite store, TensorBoard's event-file
reader), and a plug-in logger that receives exactly the same events; the numbers are the same with
and without --log; the training curves are kept in the run's files."""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
from support.stores import synthetic_store
from typer.testing import CliRunner

import tosca_heads
from cli import app
from tosca_heads.engine.optim import cosine_lrs
from tosca_heads.records.run_cell import read_run
from tosca_heads.records.run_folder import CURVES_FILE
from tosca_heads.studies.suite.spec import parse_suite
from tosca_heads.trackers import LOGGERS, Logger, Metric, register_logger

pytestmark = pytest.mark.heavy  # Dask workers, MLflow's sqlite store, TensorBoard's reader

mlflow_tracking = pytest.importorskip("mlflow.tracking")
event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")

RUNNER = CliRunner()
QUICK = {"epochs": 3, "batch_size": 8, "r": 4, "s": 4}
SPLIT = {"init_cls": 2, "increment": 2}


class Recorder(Logger):
    """A lab's own logger, as a plug-in registers it: it keeps every event it is told."""

    name = "recorder"
    summary = "keeps every event (tests)"
    runs: ClassVar[dict[str, dict[str, Any]]] = {}

    def start(self, name: str, parent: Any | None) -> str:
        handle = f"{len(self.runs)}:{name}"
        self.runs[handle] = {
            "name": name,
            "parent": parent,
            "params": {},
            "metrics": [],
            "files": [],
            "ok": None,
        }
        return handle

    def params(self, run: Any, params: dict[str, Any]) -> None:
        self.runs[run]["params"].update(params)

    def metrics(self, run: Any, metrics: Sequence[Metric]) -> None:
        self.runs[run]["metrics"] += list(metrics)

    def artifacts(self, run: Any, files: Sequence[Path]) -> None:
        self.runs[run]["files"] += [Path(f).name for f in files]

    def end(self, run: Any, ok: bool) -> None:
        self.runs[run]["ok"] = ok


@pytest.fixture
def recorder() -> Iterator[type[Recorder]]:
    register_logger(Recorder)
    Recorder.runs = {}
    yield Recorder
    del LOGGERS["recorder"]


@pytest.fixture(scope="module")
def mlflow_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One local sqlite store for the module (making one takes seconds); each test its own experiment."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


@pytest.fixture
def experiment(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> str:
    name = request.node.name[:60]
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", name)
    return name


def _mlflow_runs(uri: str, experiment: str) -> dict[str, Any]:
    """name -> (run, {key: [(step, value)]}, artifact names), read back through MLflow's client."""
    client = mlflow_tracking.MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    runs = {}
    for run in client.search_runs([found.experiment_id]):
        rid = run.info.run_id
        series = {k: [(m.step, m.value) for m in client.get_metric_history(rid, k)] for k in run.data.metrics}
        files = sorted(f.path for f in client.list_artifacts(rid))
        runs[run.info.run_name] = (run, series, files)
    return runs


def _tensorboard(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series of one event folder, through TensorBoard's own reader."""
    acc = event_accumulator.EventAccumulator(str(folder), size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _series(metrics: Sequence[Metric]) -> dict[str, list[tuple[int, float]]]:
    series: dict[str, list[tuple[int, float]]] = {}
    for m in metrics:
        series.setdefault(m.key, []).append((m.step, m.value))
    return series


def _close(a: dict[str, list[tuple[int, float]]], b: dict[str, list[tuple[int, float]]]) -> bool:
    """The same series; values equal as float32 (TensorBoard keeps scalars as float32)."""
    return a.keys() == b.keys() and all(
        [s for s, _ in a[k]] == [s for s, _ in b[k]]
        and all(abs(x - y) <= 1e-6 * max(1.0, abs(x)) for (_, x), (_, y) in zip(a[k], b[k], strict=True))
        for k in a
    )


def _numbers(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metrics.items() if k != "tasks"}


def test_a_fit_reads_back_from_mlflow_and_tensorboard_as_a_plugin_logger_received_it(
    tmp_path: Path, mlflow_db: str, experiment: str, recorder: type[Recorder]
) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=6, per_class=20, spread=1.5)
    board = tmp_path / "tb"
    logged = tosca_heads.fit(
        store,
        run=tmp_path / "logged",
        val_fraction=0.2,
        log=[f"mlflow={mlflow_db}", f"tensorboard={board}", "recorder"],
        **SPLIT,
        **QUICK,
    )
    plain = tosca_heads.fit(store, run=tmp_path / "plain", val_fraction=0.2, **SPLIT, **QUICK)
    assert _numbers(logged.metrics()) == _numbers(plain.metrics())  # the same numbers with and without --log

    (recorded,) = recorder.runs.values()
    assert recorded["name"] == "logged" and recorded["parent"] is None and recorded["ok"] is True
    series = _series(recorded["metrics"])
    # the per-epoch curves, per task, as curves.csv keeps them
    curves = read_run(tmp_path / "logged").curves
    assert sorted(curves) == [0, 1, 2]
    for task, curve in curves.items():
        for name in ("ce", "l1_term", "lr"):
            assert series[f"{name}/task_{task:03d}"] == list(enumerate(curve[name]))
        total = [(e, ce + l1) for e, (ce, l1) in enumerate(zip(curve["ce"], curve["l1_term"], strict=True))]
        assert series[f"loss/task_{task:03d}"] == total
        stats = logged.stages[task].stats  # the task's figures are its curve's last epoch, by the same names
        for name in ("ce", "l1_term", "loss"):
            assert series[f"train/{name}"][task] == (task, stats[name])
        assert stats["loss"] == total[-1][1] and stats["ce"] == curve["ce"][-1] > 0
        assert stats["l1_term"] == curve["l1_term"][-1] > 0
        train = logged.config["train"]
        assert curve["lr"] == cosine_lrs(train["lr"], train["eta_min"], train["epochs"])
    metrics = logged.metrics()
    for split, block in (("test", metrics["routers"]), ("validation", metrics["validation"])):
        for router, m in block.items():
            assert series[f"A_t/{split}/{router}"] == list(enumerate(m["A_t"]))
            assert series[f"A_last/{split}/{router}"] == [(2, m["A_last"])]
    assert {"curves.csv", "curves.png", "metrics.json", "asked.json", "task_002.safetensors"} <= set(
        recorded["files"]
    )
    assert recorded["params"]["train.lr"] == 0.025 and recorded["params"]["validation.fraction"] == 0.2

    # MLflow's own client reads back the same run: params, every series, the files
    (run, mlflow_series, files) = _mlflow_runs(mlflow_db, experiment)["logged"]
    assert run.info.status == "FINISHED"
    assert run.data.params["train.lr"] == "0.025" and run.data.params["command"] == "fit"
    assert mlflow_series == series
    assert set(recorded["files"]) == set(files)
    # TensorBoard's event reader too (float32 values)
    assert _close(_tensorboard(board / "logged"), series)


def test_a_sweep_on_dask_workers_is_one_parent_run_with_a_child_per_point(
    tmp_path: Path, mlflow_db: str, experiment: str, recorder: type[Recorder]
) -> None:
    """Points computed in two worker processes are logged by the command's process as they arrive
    (a logger registered only here hears them all): one parent, one child per point, the child's
    figures those of results.csv; the modules of each point kept as a loadable run folder; the same
    numbers as the sweep without --log and --keep-modules."""
    store = synthetic_store(tmp_path / "s.zarr", classes=6, per_class=20, spread=1.5)
    board, keep = tmp_path / "tb", tmp_path / "kept"
    grid = {"r": [2, 4], "seed": [0, 1]}
    fixed = {"epochs": 2, "batch_size": 8, "s": 4}
    frame = tosca_heads.sweep(
        store,
        grid,
        tmp_path / "sweep",
        jobs=2,
        device="cpu",
        keep_modules=keep,
        log=[f"mlflow={mlflow_db}", f"tensorboard={board}", "recorder"],
        **SPLIT,
        **fixed,
    )
    bare = tosca_heads.sweep(store, grid, tmp_path / "bare", jobs=1, device="cpu", **SPLIT, **fixed)
    columns = ["key", "split", "router", "A_last", "A_t"]
    assert (
        frame[columns].sort_values(columns[:3]).values.tolist()
        == bare[columns].sort_values(columns[:3]).values.tolist()
    )

    runs = _mlflow_runs(mlflow_db, experiment)
    (parent_name,) = [n for n, (r, _, _) in runs.items() if "mlflow.parentRunId" not in r.data.tags]
    parent = runs[parent_name][0]
    assert parent_name == "sweep sweep" and parent.data.params["grid.r"] == "2,4"
    assert {"summary.md", "results.csv", "sweep.json"} <= set(runs[parent_name][2])
    children = {n: v for n, v in runs.items() if n != parent_name}
    assert sorted(children) == ["r=2, seed=0", "r=2, seed=1", "r=4, seed=0", "r=4, seed=1"]
    test = frame[(frame["split"] == "test") & (frame["router"] == "entropy")]
    for name, (run, series, files) in children.items():
        assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
        key = run.data.params["key"]
        row = test[test["key"] == key].iloc[0]
        assert series["A_last/test/entropy"] == [(2, row["A_last"])]
        assert [a for _, a in series["A_t/test/entropy"]] == pytest.approx(json.loads(row["A_t"]), abs=1e-6)
        assert len(series["loss/task_000"]) == 2 and "A_t/validation/entropy" in series
        assert "task_000.safetensors" in files  # the kept modules as artifacts
        # the kept folder is a run: re-evaluated from its modules, it gives results.csv's figure
        again = tosca_heads.evaluate(keep / f"point-{key}", device="cpu")
        assert again.metrics()["routers"]["entropy"]["A_last"] == row["A_last"]
        events = _tensorboard(board / "sweep_sweep" / name.replace(", ", ","))
        assert _close(events, series)
    # the plug-in logger heard the same events as MLflow stored
    by_name = {r["name"]: r for r in recorder.runs.values()}
    assert _series(by_name["r=4, seed=1"]["metrics"]) == children["r=4, seed=1"][1]
    chosen = json.loads((tmp_path / "sweep" / "sweep.json").read_text())["chosen"]["chosen"]
    assert (
        Path(chosen["modules"]).parent == keep
        and "Its modules" in (tmp_path / "sweep" / "summary.md").read_text()
    )


def test_a_comparison_and_a_suite_are_a_parent_with_a_child_per_method_and_cell(
    tmp_path: Path, recorder: type[Recorder]
) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=6, per_class=20, spread=1.5)
    tosca_heads.fit(store, run=tmp_path / "run", **SPLIT, **QUICK)
    tosca_heads.baselines(
        store,
        ["simplecil", "ranpac"],
        run=tmp_path / "run",
        ranpac_projection_dim=64,
        out=tmp_path / "base",
        log=["recorder"],
        **SPLIT,
    )
    runs = list(recorder.runs.values())
    parent = runs[0]
    assert parent["name"] == "baselines base" and parent["parent"] is None and parent["ok"]
    assert [r["name"] for r in runs[1:]] == ["tosca", "simplecil", "ranpac"]
    assert all(r["parent"] == next(iter(recorder.runs)) and r["ok"] for r in runs[1:])
    simple = _series(runs[2]["metrics"])
    base = json.loads((tmp_path / "base" / "simplecil" / "metrics.json").read_text())
    assert [a for _, a in simple["A_t/test/simplecil"]] == base["routers"]["none"]["A_t"]
    assert "comparison.md" in parent["files"] and "loss/task_000" in _series(runs[1]["metrics"])

    recorder.runs.clear()
    spec = parse_suite(
        {
            "seeds": [0],
            "tosca": {"flags": {"epochs": 1, "batch_size": 8, "r": 4, "s": 4}},
            "baselines": {"methods": ["simplecil"]},
            "stores": [{"name": "tiny", "path": str(store.path), **SPLIT}],
        },
        tmp_path,
    )
    result = tosca_heads.run_suite(spec, tmp_path / "suite", device="cpu", jobs=1, log=["recorder"])
    runs = list(recorder.runs.values())
    assert runs[0]["name"] == "suite " + spec.name and runs[0]["ok"] and "table.md" in runs[0]["files"]
    assert sorted(r["name"] for r in runs[1:]) == sorted(c.cell.key for c in result.cells)
    assert all(r["ok"] and r["files"] for r in runs[1:])


def test_a_tracker_that_is_not_installed_or_not_known_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=4, per_class=10)
    args = [
        "fit",
        "--store",
        str(store.path),
        "--epochs",
        "1",
        "--device",
        "cpu",
        "--run",
        str(tmp_path / "r"),
    ]
    monkeypatch.setitem(sys.modules, "mlflow.tracking", None)  # as if tosca[mlflow] were not installed
    done = RUNNER.invoke(app, [*args, "--log", "mlflow"])
    assert done.exit_code == 2 and "pip install 'tosca[mlflow]'" in done.output
    assert len(done.output.strip().splitlines()) == 1 and not (tmp_path / "r").exists()
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    done = RUNNER.invoke(app, [*args, "--log", "tensorboard"])
    assert done.exit_code == 2 and "pip install 'tosca[tensorboard]'" in done.output
    done = RUNNER.invoke(app, [*args, "--log", "wandb"])
    assert (
        done.exit_code == 2
        and "unknown --log 'wandb'" in done.output
        and "mlflow, tensorboard" in done.output
    )
    (tmp_path / "file").write_text("x")
    monkeypatch.delitem(sys.modules, "tensorboard")
    done = RUNNER.invoke(app, [*args, "--log", f"tensorboard={tmp_path / 'file'}"])
    assert done.exit_code == 2 and "is a file" in done.output


def test_curves_survive_a_resume(tmp_path: Path) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=6, per_class=20, spread=1.5)
    whole = tosca_heads.fit(store, run=tmp_path / "whole", **SPLIT, **QUICK)
    tosca_heads.fit(store, run=tmp_path / "parts", task=0, **SPLIT, **QUICK)
    parts = tosca_heads.fit(store, run=tmp_path / "parts", **SPLIT, **QUICK)
    assert (
        read_run(tmp_path / "parts").curves == read_run(tmp_path / "whole").curves
    )  # task 0's from its file
    assert [s.curve for s in parts.stages] == [s.curve for s in whole.stages]
    rows = list(csv.reader((tmp_path / "whole" / CURVES_FILE).read_text().splitlines()))
    assert len(rows) == 1 + 3 * QUICK["epochs"] and (tmp_path / "whole" / "curves.png").is_file()
    done = RUNNER.invoke(
        app,
        [
            "fit",
            "--store",
            str(store.path),
            "--run",
            str(tmp_path / "cli"),
            "--device",
            "cpu",
            "--init-cls",
            "2",
            "--increment",
            "2",
            "--epochs",
            "1",
        ],
    )
    assert (
        done.exit_code == 0
        and f"training curves: {tmp_path / 'cli' / 'curves.png'}" in done.output.replace("\n", "")
    )


def test_a_scenario_table_is_a_parent_with_a_child_per_method_and_its_steps_as_a_series(
    tmp_path: Path, recorder: type[Recorder]
) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=6, per_class=20, spread=1.5)
    frame = tosca_heads.baselines(
        store, ["simplecil"], scenario="til", out=tmp_path / "til", log=["recorder"], **SPLIT
    )
    runs = list(recorder.runs.values())
    parent = runs[0]
    assert parent["name"] == "baselines til" and parent["ok"] and "comparison.md" in parent["files"]
    assert parent["params"]["scenario"] == "til" and parent["params"]["scenario.init_cls"] == 2
    assert [r["name"] for r in runs[1:]] == ["tosca (told task)", "simplecil"]  # til: no router
    assert all(r["parent"] == next(iter(recorder.runs)) and r["ok"] and r["files"] for r in runs[1:])
    simple = _series(runs[2]["metrics"])
    a_last = float(frame.loc[frame["method"] == "simplecil", "A_last"].iloc[0])
    assert simple["A_last/test/simplecil"] == [(2, a_last)]  # the last of 3 tasks
    assert len(simple["A_t/test/simplecil"]) == 3 and simple["A_t/test/simplecil"][-1][1] == a_last
    recorder.runs.clear()  # the same command again: every cell reused, and logged as before
    tosca_heads.baselines(
        store, ["simplecil"], scenario="til", out=tmp_path / "til", log=["recorder"], **SPLIT
    )
    assert [r["name"] for r in recorder.runs.values()] == [r["name"] for r in runs]


def test_a_scenario_fit_sweep_and_suite_are_tracked_as_their_class_incremental_kinds(
    tmp_path: Path, recorder: type[Recorder]
) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=6, per_class=20, spread=1.5)
    fscil = {"base_classes": 2, "ways": 2, "shots": 5, "sessions": 2}
    fast = {"epochs": 2, "batch_size": 8}
    made = tosca_heads.fit(
        store.path, run=tmp_path / "run", scenario="fscil", scenario_values=fscil, log=["recorder"], **fast
    )
    (fit,) = recorder.runs.values()
    assert fit["name"] == "run" and fit["ok"] and fit["params"]["scenario.name"] == "fscil"
    assert "run.json" in fit["files"] and "answers.safetensors" in fit["files"]
    series = _series(fit["metrics"])
    assert series["A_last/test/lda"][-1][1] == made.figures["lda"]["A_last"]
    assert [v for _, v in series["A_t/test/ncm"]] == made.curves["ncm"]

    recorder.runs.clear()
    frame = tosca_heads.sweep(
        store.path,
        {"r": [2, 4]},
        tmp_path / "sweep",
        jobs=1,
        scenario="fscil",
        scenario_values=fscil,
        log=["recorder"],
        **fast,
    )
    parent, *points = recorder.runs.values()
    assert parent["name"] == "sweep sweep" and parent["ok"] and parent["params"]["scenario"] == "fscil"
    assert sorted(p["name"] for p in points) == ["r=2", "r=4"] and all(p["ok"] for p in points)
    two = next(p for p in points if p["name"] == "r=2")
    row = frame[(frame["r"] == 2) & (frame["router"] == "lda") & (frame["split"] == "validation")].iloc[0]
    assert _series(two["metrics"])["A_last/validation/lda"][-1][1] == row["A_last"]
    names = sorted(r["name"] for r in recorder.runs.values())
    recorder.runs.clear()  # the same sweep again: every point reused, logged as before (a new parent here:
    # this logger cannot find its runs again, `TrackedGroup`)
    tosca_heads.sweep(
        store.path,
        {"r": [2, 4]},
        tmp_path / "sweep",
        jobs=1,
        scenario="fscil",
        scenario_values=fscil,
        log=["recorder"],
        **fast,
    )
    assert sorted(r["name"] for r in recorder.runs.values()) == names

    spec = parse_suite(
        {
            "scenario": "fscil",
            "scenario_values": fscil,
            "tosca": {"flags": fast, "routers": ["lda"]},
            "baselines": {"methods": ["simplecil"]},
            "stores": [{"name": "syn", "path": str(store.path)}],
        },
        tmp_path,
    )
    recorder.runs.clear()
    tosca_heads.run_suite(spec, tmp_path / "suite", jobs=1, device="cpu", log=["recorder"])
    parent, cell = recorder.runs.values()
    assert parent["name"] == "suite the suite" and cell["name"] == "syn/seed-0" and cell["ok"]
    assert {k for k in _series(cell["metrics"]) if k.startswith("A_last/test/")} == {
        "A_last/test/tosca _lda_",  # a metric key: letters, digits, _-./ and spaces (events.key)
        "A_last/test/simplecil",
    }
