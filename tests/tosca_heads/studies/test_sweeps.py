"""Sweeps: a grid point is exactly a `tosca fit` run; a killed sweep resumes without duplicates."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from support.crash_harness import PauseAt, start
from support.stores import synthetic_store
from typer.testing import CliRunner

from cli import app
from tosca_foundation.errors import UserError
from tosca_heads.method.protocol import StreamConfig, ValidationConfig
from tosca_heads.method.recipe import TrainConfig
from tosca_heads.records import FORMAT, cell
from tosca_heads.records.sweep_points import POINTS_FOLDER
from tosca_heads.routers import resolve_routers
from tosca_heads.studies.results import by_point
from tosca_heads.studies.sweeps import grid_points, parse_values

COMPUTED = resolve_routers(None)  # the routers a run computes unless others are named

RUNNER = CliRunner()


def _points(csv_path: Path) -> pd.DataFrame:
    """results.csv as one row per point, a `{metric}_{router}` column per router and metric."""
    return by_point(pd.read_csv(csv_path, keep_default_na=False, na_values=[""]))


COMMON = ["--epochs", "3", "--batch-size", "8", "--init-cls", "2", "--increment", "2", "--device", "cpu"]
HELD = ["--val-fraction", "0.1"]  # a sweep's default validation split, given to `fit` to match it


def test_parse_values_and_grid() -> None:
    assert parse_values("r", "8, 16,8,32") == [8, 16, 32]
    assert parse_values("l1", "0,1e-4") == [0.0, 1e-4]
    with pytest.raises(UserError, match="--r: '8x' is not an integer"):
        parse_values("r", "8x")
    with pytest.raises(UserError, match="--l1 is empty"):
        parse_values("l1", " , ")
    points = grid_points(
        {"r": [4, 8], "l1": [0.0, 1e-3], "seed": [0, 1, 2]}, TrainConfig(), StreamConfig(2, 2), 32, 6
    )
    assert len(points) == 12 and len({p.key for p in points}) == 12
    assert {p.train.s for p in points} == {2}  # s resolved to d/16, as `fit` resolves it
    # an unswept r resolves to d/16 and keys the same point as an explicit r = d/16
    implicit = grid_points({"l1": [0.0]}, TrainConfig(), StreamConfig(2, 2), 32, 6)[0]
    explicit = grid_points({"l1": [0.0], "r": [2]}, TrainConfig(), StreamConfig(2, 2), 32, 6)[0]
    assert implicit.key == explicit.key
    with pytest.raises(UserError, match="unknown --flow"):
        grid_points({"flow": ["tosca", "nope"]}, TrainConfig(), StreamConfig(2, 2), 32, 6)
    with pytest.raises(UserError, match="do not split"):
        grid_points({"increment": [2, 3]}, TrainConfig(), StreamConfig(2, 2), 32, 6)


@pytest.mark.heavy
def test_two_by_two_sweep_equals_four_fit_runs(tmp_path: Path) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=8, views=2, spread=1.2)
    out = tmp_path / "sweep"
    result = RUNNER.invoke(
        app,
        [
            "sweep",
            "--store",
            str(store.path),
            "--r",
            "4,8",
            "--l1",
            "0,1e-2",
            *COMMON,
            "--jobs",
            "2",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    long = pd.read_csv(out / "results.csv")
    assert len(long) == 4 * 2 * len(COMPUTED) and set(long["router"]) == set(COMPUTED)
    assert set(long["format"]) == {FORMAT} and "rows" not in long
    assert set(long["split"]) == {"test", "validation"} and set(long["val_fraction"]) == {0.1}
    rows = _points(out / "results.csv")
    assert len(rows) == 4 and rows["key"].is_unique
    assert set(rows["feature_loads"]) == {1}  # each worker read the store once, for all its points
    assert {"results.parquet", "summary.md", "heatmap_A_last.png", "best_curves.png"} <= {
        p.name for p in out.iterdir()
    }
    pd.testing.assert_frame_equal(pd.read_parquet(out / "results.parquet"), long, check_dtype=False)
    spread = set()
    for r in (4, 8):
        for l1 in ("0", "1e-2"):
            run = tmp_path / f"fit-{r}-{l1}"
            fit = RUNNER.invoke(
                app,
                [
                    "fit",
                    "--store",
                    str(store.path),
                    "--r",
                    str(r),
                    "--l1",
                    l1,
                    *COMMON,
                    *HELD,
                    "--run",
                    str(run),
                ],
            )
            assert fit.exit_code == 0, fit.output
            metrics = json.loads((run / "metrics.json").read_text())
            row = rows[(rows["r"] == r) & (rows["l1"] == float(l1))].iloc[0]
            assert set(metrics["routers"]) == set(COMPUTED) == set(metrics["validation"])
            for router in COMPUTED:
                for prefix, block in (
                    ("", metrics["routers"][router]),
                    ("val_", metrics["validation"][router]),
                ):
                    assert row[f"{prefix}A_last_{router}"] == block["A_last"], (r, l1, router, prefix)
                    assert row[f"{prefix}A_bar_{router}"] == pytest.approx(block["A_bar"], abs=1e-12)
                    assert row[f"{prefix}routing_{router}"] == block["routing_accuracy"]
                    assert json.loads(row[f"{prefix}A_t_{router}"]) == pytest.approx(block["A_t"], abs=1e-6)
            assert row["params_per_task"] == metrics["params_per_task"]
            spread.add(row["A_last_entropy"])
    assert len(spread) > 1  # the four points really differ: the comparison is not vacuous


def _sweep_cmd(store: Path, out: Path) -> list[str]:
    grid = ["--r", "2,4,8", "--l1", "0,1e-3", "--epochs", "6", "--batch-size", "8"]
    return [
        "sweep",
        "--store",
        str(store),
        *grid,
        "--init-cls",
        "2",
        "--increment",
        "2",
        "--jobs",
        "1",
        "--device",
        "cpu",
        "--out",
        str(out),
    ]


@pytest.mark.heavy  # 6 s of kills and reruns
def test_killed_sweep_resumes_without_duplicates(tmp_path: Path) -> None:
    """Killed as it writes its third point's cell, after its asked.json and measured.json and before
    its answers and done.json: the rerun reuses the two finished points as they were, computes the
    cut one and the other three, and ends with an undisturbed sweep's numbers."""
    store = synthetic_store(tmp_path / "s.zarr", classes=10, per_class=40, views=2, spread=1.0)
    out = tmp_path / "sweep"
    pause = PauseAt(function="tosca_heads.records.cell:write_outcomes", occurrence=3)
    child = start(_sweep_cmd(store.path, out), tmp_path / "child", pause)
    child.wait_paused()
    child.kill()
    points = out / POINTS_FOLDER
    finished = {
        p.name: (p / cell.MEASURED).read_bytes() for p in points.iterdir() if (p / cell.DONE).exists()
    }
    (cut,) = [p for p in points.iterdir() if p.name not in finished]
    assert sorted(f.name for f in cut.iterdir()) == [cell.ASKED, cell.MEASURED]  # its cell cut short
    assert len(finished) == 2  # results.csv, a view written as points finish, holds no other
    assert set(pd.read_csv(out / "results.csv")["key"]) <= set(finished)
    resumed = RUNNER.invoke(app, _sweep_cmd(store.path, out))
    assert resumed.exit_code == 0, resumed.output
    assert "2 already done" in resumed.output
    after = pd.read_csv(out / "results.csv")
    assert len(after) == 6 * 2 * len(COMPUTED) and after["key"].nunique() == 6
    assert sorted(f.name for f in cut.iterdir()) == sorted(cell.CELL_FILES)  # computed again, whole
    for key, measured in finished.items():  # the finished points reused as they were
        assert (points / key / cell.MEASURED).read_bytes() == measured
    again = RUNNER.invoke(app, _sweep_cmd(store.path, out))
    assert "0 run(s)" in again.output and len(pd.read_csv(out / "results.csv")) == len(after)
    fresh = RUNNER.invoke(app, _sweep_cmd(store.path, tmp_path / "fresh"))
    assert fresh.exit_code == 0, fresh.output
    by_key = _points(tmp_path / "fresh" / "results.csv").set_index("key")
    resumed_by_key = _points(out / "results.csv").set_index("key").loc[by_key.index]
    for router in COMPUTED:
        assert (resumed_by_key[f"A_last_{router}"] == by_key[f"A_last_{router}"]).all()


def test_grouped_sweep_equals_one_point_per_engine_run(tmp_path: Path) -> None:
    """--group 4 trains the 2 x 2 grid as one engine run: the same results table as --group 1 within
    0.1 points, each row recording its group size."""
    store = synthetic_store(tmp_path / "s.zarr", classes=8, views=2, spread=2.0)
    tables = {}
    for group in (1, 4):
        out = tmp_path / f"g{group}"
        cmd = ["sweep", "--store", str(store.path), "--r", "4,8", "--l1", "0,1e-2", "--seeds", "0"]
        result = RUNNER.invoke(app, [*cmd, *COMMON, "--jobs", "1", "--group", str(group), "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert f"up to {group} per engine run" in result.output
        tables[group] = _points(out / "results.csv").set_index("key").sort_index()
    assert set(tables[1]["group_size"]) == {1} and set(tables[4]["group_size"]) == {4}
    assert len(tables[4]) == 4 and list(tables[4].index) == list(tables[1].index)
    for router in COMPUTED:
        for metric in ("A_bar", "A_last", "routing"):
            column = f"{metric}_{router}"
            assert (tables[4][column] - tables[1][column]).abs().max() <= 1e-3, column
    assert tables[1]["A_last_entropy"].nunique() > 1  # the points differ: the comparison is not vacuous


def test_groups_hold_only_compatible_points() -> None:
    from tosca_heads.studies.sweeps import make_groups

    points = grid_points(
        {"r": [2, 4, 8], "epochs": [2, 3], "seed": [0, 1]}, TrainConfig(), StreamConfig(2, 2), 32, 6
    )
    groups = make_groups(points, 4)
    assert sorted(len(g) for g in groups) == [2, 2, 4, 4]  # 6 points per epochs value, in runs of <= 4
    for members in groups:
        assert len({p.train.epochs for p in members}) == 1
    assert sorted(p.key for g in groups for p in g) == sorted(p.key for p in points)


def test_sweep_json_is_one_row_per_point(tmp_path: Path) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=4)
    args = ["sweep", "--store", str(store.path), "--r", "2,4", *COMMON, "--jobs", "1"]
    result = RUNNER.invoke(app, [*args, "--out", str(tmp_path / "sw"), "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert sorted(row["r"] for row in rows) == [2, 4]


def test_sweep_folder_belongs_to_one_store(tmp_path: Path) -> None:
    a = synthetic_store(tmp_path / "a.zarr", classes=4, seed=0)
    b = synthetic_store(tmp_path / "b.zarr", classes=4, seed=1)
    cmd = ["--r", "2", *COMMON, "--jobs", "1", "--out", str(tmp_path / "sw")]
    assert RUNNER.invoke(app, ["sweep", "--store", str(a.path), *cmd]).exit_code == 0
    other = RUNNER.invoke(app, ["sweep", "--store", str(b.path), *cmd])
    assert other.exit_code == 2 and "holds results of another store" in other.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--r", "8x"], "--r: '8x' is not an integer"),
        (["--flow", "tosca,nope"], "unknown --flow 'nope'"),
        (["--jobs", "0"], "--jobs must be at least 1"),
        (["--rank-by", "best"], "unknown --rank-by 'best'"),
        (["--lr", "0"], "--lr must be > 0"),
        (["--group", "0"], "--group must be at least 1"),
        (["--device", "tpu"], "unknown --device 'tpu'"),
    ],
)
def test_sweep_flag_errors_are_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=4)
    result = RUNNER.invoke(app, ["sweep", "--store", str(store.path), *args, "--out", str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    assert message in result.output and len(result.output.strip().splitlines()) == 1


def test_sweep_on_a_given_scheduler(tmp_path: Path) -> None:
    """--scheduler takes any Dask scheduler address (here an in-process cluster's, on loopback)."""
    from distributed import LocalCluster

    store = synthetic_store(tmp_path / "s.zarr", classes=4)
    with LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, protocol="tcp", dashboard_address=None
    ) as cluster:
        result = RUNNER.invoke(
            app,
            [
                "sweep",
                "--store",
                str(store.path),
                "--r",
                "2,4",
                *COMMON,
                "--scheduler",
                cluster.scheduler_address,
                "--out",
                str(tmp_path / "sw"),
            ],
        )
    assert result.exit_code == 0, result.output
    rows = _points(tmp_path / "sw" / "results.csv")
    assert sorted(rows["r"]) == [2, 4] and set(rows["feature_loads"]) == {1}


@pytest.mark.parametrize(("asked", "sent"), [("auto", "auto"), ("cuda:1", "cuda"), ("cpu", "cpu")])
def test_a_remote_sweep_lets_each_worker_decide_its_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, asked: str, sent: str
) -> None:
    """On an address the workers own the GPUs: `auto` reaches them as `auto` (not this head
    node's cpu), and a client's cuda:N as cuda (each worker's own GPU list)."""
    from distributed import LocalCluster

    from tosca_heads.running import executor

    seen: list[str] = []

    def run_here(self: executor.Executor, works: list, on_done: Callable, progress: object = None) -> None:
        seen.append(self.device)
        for work in works:
            on_done(work, executor.run_work(work, "cpu", True))

    monkeypatch.setattr(executor.Executor, "run", run_here)
    store = synthetic_store(tmp_path / "s.zarr", classes=4)
    args = ["sweep", "--store", str(store.path), "--r", "2", *COMMON, "--device", asked]
    with LocalCluster(n_workers=0, processes=False, protocol="tcp", dashboard_address=None) as cluster:
        result = RUNNER.invoke(
            app, [*args, "--scheduler", cluster.scheduler_address, "--out", str(tmp_path / "sw")]
        )
    assert result.exit_code == 0, result.output
    assert seen == [sent]
    assert f"remote worker(s) on --device {asked} (each worker decides)" in result.output


def test_sweep_workers_keep_freed_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dask's default MALLOC_TRIM_THRESHOLD_=65536 doubles the cost of a tiny SGD step (page faults)."""
    from tosca_foundation.scheduler import SchedulerChoice, dask_client
    from tosca_heads.running import executor

    with (
        executor._local_workers_keep_freed_memory(),
        dask_client(SchedulerChoice("local", workers=1)) as client,
    ):
        seen = client.run(
            lambda: (os.environ.get("MALLOC_TRIM_THRESHOLD_"), os.environ.get("OMP_NUM_THREADS"))
        )
    assert list(seen.values()) == [(None, "1")]
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "65536")  # a remote worker's: raised in-process
    executor.keep_freed_memory()
    assert os.environ["MALLOC_TRIM_THRESHOLD_"] == str(executor.KEEP_FREED_BYTES)


@pytest.mark.heavy
def test_same_command_without_out_resumes_its_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    store = synthetic_store(tmp_path / "s.zarr", classes=4)
    cmd = ["sweep", "--store", str(store.path), "--r", "2,4", *COMMON, "--jobs", "1"]
    first = RUNNER.invoke(app, cmd)
    assert first.exit_code == 0, first.output
    (folder,) = (tmp_path / "runs").glob("sweep-*")
    again = RUNNER.invoke(app, cmd)
    assert f"resuming {Path('runs') / folder.name}" in again.output and "0 run(s)" in again.output
    grown = RUNNER.invoke(app, [*cmd[:4], "2,4,8", *cmd[5:]])  # another grid: a new folder
    assert grown.exit_code == 0 and "resuming" not in grown.output, grown.output
    assert len(list((tmp_path / "runs").glob("sweep-*"))) == 2
    # a grid grown into the first folder with --out: the grown command without --out finds it there
    wider = [*cmd[:4], "2,4,16", *cmd[5:]]
    assert RUNNER.invoke(app, [*wider, "--out", str(folder)]).exit_code == 0
    found = RUNNER.invoke(app, wider)
    assert f"resuming {Path('runs') / folder.name}" in found.output and "0 run(s)" in found.output
    assert len(list((tmp_path / "runs").glob("sweep-*"))) == 2


def test_worker_memory_limit_caps_the_in_memory_store(monkeypatch: pytest.MonkeyPatch) -> None:
    from distributed import Client, LocalCluster

    from tosca_heads.running import executor

    monkeypatch.setenv("TOSCA_MEMORY_BUDGET", "4GiB")
    assert executor._memory_budget() == 4 << 30  # not on a worker: the budget
    with (
        LocalCluster(n_workers=1, processes=False, memory_limit="200MB", dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        assert client.submit(executor._memory_budget).result() == 100_000_000


@pytest.mark.heavy
def test_sweep_survives_a_killed_worker(tmp_path: Path, planted_working_folder: Path) -> None:
    """--scheduler local:2 and one worker process SIGKILLed as the first point lands: the sweep still
    finishes, every point recorded exactly once, with the numbers of an undisturbed sweep."""
    from tosca_heads.requests.command_requests import SweepRequest
    from tosca_heads.studies.sweeps import sweep

    store = synthetic_store(tmp_path / "s.zarr", classes=8, per_class=30, spread=1.5)
    grid = {
        "r": "2,4",
        "l1": "0,1e-3",
        "seed": "0,1",
        "epochs": "8",
        "batch_size": "8",
        "init_cls": "2",
        "increment": "2",
    }
    points = grid_points(
        {"r": [2, 4], "l1": [0.0, 1e-3], "seed": [0, 1]},
        TrainConfig(epochs=8, batch_size=8),
        StreamConfig(2, 2),
        store.dim,
        8,
        ValidationConfig(0.1),
    )
    killed: list[int] = []

    def kill_first_worker(rows: list[dict], finished: int, total: int) -> None:
        if not killed:
            killed.append(int(rows[0]["worker_pid"]))
            os.kill(killed[0], signal.SIGKILL)

    def request(out: str, **how: object) -> SweepRequest:
        return SweepRequest(store=store.path, out=tmp_path / out, device="cpu", grid=grid, **how)  # type: ignore[arg-type]

    hit = sweep(request("hit", scheduler="local:2"), on_point=kill_first_worker)
    calm = sweep(request("calm", jobs=1))
    rows = _points(tmp_path / "hit" / "results.csv")
    assert killed and len(rows) == len(points) and rows["key"].is_unique
    assert set(rows["key"]) == {p.key for p in points}
    assert len(set(rows["worker_pid"])) >= 2  # work went on after the kill, in other processes
    a, b = rows.set_index("key").sort_index(), by_point(calm.frame).set_index("key").sort_index()
    for router in COMPUTED:
        assert (a[f"A_last_{router}"] == b[f"A_last_{router}"]).all(), router
    assert hit.ran == len(points)
    # the workers imported nothing from the working folder (a planted multiprocessing.py)
    assert not planted_working_folder.exists(), planted_working_folder.read_text()
