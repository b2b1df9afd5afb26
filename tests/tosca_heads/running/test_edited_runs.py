"""A run whose files were edited, copied between runs or made from a diverged fit never
gives a number: every file is checked against the run's recipe and split when it is read."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from support.stores import synthetic_store

import tosca_heads
from tosca_foundation.errors import UserError
from tosca_heads.records.run_folder import read_metrics
from tosca_heads.running.group import evaluate_run

SPLIT = {"init_cls": 2, "increment": 2, "epochs": 1, "batch_size": 8}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A store, a finished tosca run and a finished tosca_r run of it (read-only: copied by tests)."""
    root = tmp_path_factory.mktemp("runs")
    store = synthetic_store(root / "s.zarr", classes=4, per_class=8, test_per_class=4)
    tosca_heads.fit(store, run=root / "tosca", **SPLIT)
    tosca_heads.fit(store, run=root / "tosca_r", flow="tosca_r", **SPLIT)
    return {"store": store.path, "tosca": root / "tosca", "tosca_r": root / "tosca_r"}


def test_a_huge_learning_rate_stops_before_a_non_finite_classifier_is_saved(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    """The module's weights stay finite but its outputs overflow: the prototypes (the classifier's
    new rows) were NaN and the fit printed accuracies with exit code 0."""
    with pytest.raises(UserError, match=r"training diverged.*task 0"):
        tosca_heads.fit(runs["store"], run=tmp_path / "run", lr=1e30, **SPLIT)
    assert not list((tmp_path / "run").glob("task_*.safetensors"))


def _edit_task(name: str, change: Callable[[dict[str, torch.Tensor]], None]) -> Callable[[Path], None]:
    def edit(run: Path) -> None:
        path = run / name
        tensors = load_file(str(path))
        with safe_open(str(path), "pt") as fh:
            meta = fh.metadata()
        change(tensors)
        save_file(tensors, str(path), meta)

    return edit


def _nan(tensors: dict[str, torch.Tensor]) -> None:
    tensors["luca.down.weight"][0, 0] = float("nan")


def _half(tensors: dict[str, torch.Tensor]) -> None:
    tensors["head.weight"] = tensors["head.weight"].half()


def _edit_config(change: Callable[[dict], None]) -> Callable[[Path], None]:
    def edit(run: Path) -> None:
        config = json.loads((run / "config.json").read_text())
        change(config)
        (run / "config.json").write_text(json.dumps(config))

    return edit


EDITS: dict[str, tuple[Callable[[Path], None], str]] = {
    "task 0's file as task 1": (
        lambda run: shutil.copy(run / "task_000.safetensors", run / "task_001.safetensors"),
        "written for task 0",
    ),
    "a module weight made NaN": (_edit_task("task_001.safetensors", _nan), "holds NaN or inf"),
    "a classifier in float16": (_edit_task("task_001.safetensors", _half), "not float32"),
    "another flow's task file": (None, "written under another config.json"),  # type: ignore[dict-item]
    "the class order edited": (
        _edit_config(lambda c: c["stream"].update(order_seed=7)),
        "written under another config.json",
    ),
    "a task file too many": (
        lambda run: shutil.copy(run / "task_001.safetensors", run / "task_002.safetensors"),
        r"holds 3 task files but its split \(config.json\) has 2 tasks",
    ),
}


@pytest.mark.parametrize("case", list(EDITS))
def test_an_edited_or_mixed_run_is_refused_by_eval_and_predict(
    runs: dict[str, Path], tmp_path: Path, case: str
) -> None:
    run = tmp_path / "run"
    shutil.copytree(runs["tosca"], run)
    edit, said = EDITS[case]
    if edit is None:
        shutil.copy(runs["tosca_r"] / "task_001.safetensors", run / "task_001.safetensors")
    else:
        edit(run)
    with pytest.raises(UserError, match=said):
        evaluate_run(run)
    with pytest.raises(UserError, match=said):  # the predictor reads the same files
        tosca_heads.load_run(run)


@pytest.mark.parametrize(
    "change",
    [
        lambda m: m.pop("finished_tasks"),
        lambda m: m.update(finished_tasks=-3),
        lambda m: m["routers"]["entropy"].update(A_last=7.5),
        lambda m: m["routers"]["entropy"].update(A_last=True),
        lambda m: m["routers"]["entropy"].update(A_last=float("nan")),
        lambda m: m["routers"]["entropy"].update(routing_accuracy="x"),
        lambda m: m["routers"]["entropy"].update(A_t=[0.5, 2.0]),
    ],
)
def test_edited_metrics_are_refused(
    runs: dict[str, Path], tmp_path: Path, change: Callable[[dict], None]
) -> None:
    run = tmp_path / "run"
    shutil.copytree(runs["tosca"], run)
    metrics = json.loads((run / "metrics.json").read_text())
    change(metrics)
    (run / "metrics.json").write_text(json.dumps(metrics))
    with pytest.raises(UserError, match="were edited or damaged"):
        read_metrics(run)


def test_a_store_replaced_while_a_fit_or_baseline_reads_it_gives_no_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Readers take no lock: an `extract --overwrite` by another process mid-fit gave training
    features of one store and test features of the other (A_last 0.00 %, exit 0)."""
    from support.stores import synthetic_store as make

    from tosca_heads.running import baseline_runs, group

    a = make(tmp_path / "a.zarr", classes=4, per_class=8, test_per_class=4, seed=0)
    b = make(tmp_path / "b.zarr", classes=4, per_class=8, test_per_class=4, seed=1)

    def replace_a() -> None:
        shutil.rmtree(a.path)
        shutil.copytree(b.path, a.path)

    real_train = group.GroupFit.train_task

    def train_then_replace(self: group.GroupFit, task: int) -> None:
        real_train(self, task)
        if task == 0:
            replace_a()

    monkeypatch.setattr(group.GroupFit, "train_task", train_then_replace)
    with pytest.raises(UserError, match="was replaced or changed while this fit read it"):
        tosca_heads.fit(a.path, run=tmp_path / "run", **SPLIT)
    monkeypatch.undo()
    shutil.rmtree(a.path)
    make(tmp_path / "a.zarr", classes=4, per_class=8, test_per_class=4, seed=0)
    real_blocks = baseline_runs.block_accuracies

    def blocks_then_replace(*args: object) -> object:  # after the first task's test predictions
        if not (tmp_path / "replaced").exists():
            (tmp_path / "replaced").touch()
            replace_a()
        return real_blocks(*args)

    monkeypatch.setattr(baseline_runs, "block_accuracies", blocks_then_replace)
    with pytest.raises(UserError, match="while baseline 'simplecil' read it"):
        tosca_heads.baselines(a.path, ["simplecil"], init_cls=2, increment=2)


def test_routers_of_a_partial_run_leave_out_baselines_measured_on_more_tasks(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from cli import app

    runner = CliRunner()
    split = ["--init-cls", "2", "--increment", "2", "--device", "cpu"]
    store = str(runs["store"])
    for args in (
        [
            "fit",
            "--store",
            store,
            "--run",
            str(tmp_path / "runs" / "part"),
            "--task",
            "0",
            "--epochs",
            "1",
            *split,
        ],
        ["fit", "--store", store, "--run", str(tmp_path / "runs" / "whole"), "--epochs", "1", *split],
        [
            "baselines",
            "--store",
            store,
            "--no-tosca",
            "--methods",
            "simplecil",
            "--out",
            str(tmp_path / "runs" / "bl"),
            *split,
        ],
    ):
        assert runner.invoke(app, args).exit_code == 0
    kinds = {}
    for run in ("part", "whole"):
        done = runner.invoke(app, ["routers", str(tmp_path / "runs" / run), "--json"])
        assert done.exit_code == 0, done.output
        kinds[run] = {row["kind"] for row in json.loads(done.stdout)}
    assert kinds == {"part": {"router"}, "whole": {"router", "baseline"}}


@pytest.mark.parametrize("gone", ["task_001.safetensors", "task_000.safetensors"])
def test_eval_refuses_a_run_that_lost_a_task_file_and_rewrites_nothing(
    runs: dict[str, Path], tmp_path: Path, gone: str
) -> None:
    """A deleted task file (the last one, or one before others) is one line naming it: evaluating
    what is left would rewrite metrics.json, results.csv and the answers with tasks dropped."""
    run = tmp_path / "run"
    shutil.copytree(runs["tosca"], run)
    (run / gone).unlink()
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    with pytest.raises(UserError, match=f"{gone} is missing") as refused:
        evaluate_run(run)
    assert "\n" not in str(refused.value) and "tosca fit --run" in str(refused.value)
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
