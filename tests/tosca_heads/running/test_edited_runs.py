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
from tosca_heads.records.run_cell import read_run
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
    assert not list((tmp_path / "run").glob("state/task_*.safetensors"))


def _edit_task(name: str, change: Callable[[dict[str, torch.Tensor]], None]) -> Callable[[Path], None]:
    def edit(run: Path) -> None:
        path = run / "state" / name
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
        config = json.loads((run / "asked.json").read_text())
        change(config)
        (run / "asked.json").write_text(json.dumps(config))

    return edit


EDITS: dict[str, tuple[Callable[[Path], None], str]] = {
    "task 0's file as task 1": (
        lambda run: shutil.copy(
            run / "state" / "task_000.safetensors", run / "state" / "task_001.safetensors"
        ),
        "written for task 0",
    ),
    "a module weight made NaN": (_edit_task("task_001.safetensors", _nan), "holds NaN or inf"),
    "a classifier in float16": (_edit_task("task_001.safetensors", _half), "not float32"),
    "another flow's task file": (None, "written under another asked.json"),  # type: ignore[dict-item]
    "the class order edited": (
        _edit_config(lambda c: c["stream"].update(order_seed=7)),
        "written under another asked.json",
    ),
    "a task file too many": (
        lambda run: shutil.copy(
            run / "state" / "task_001.safetensors", run / "state" / "task_002.safetensors"
        ),
        r"holds 3 task files but its split \(asked.json\) has 2 tasks",
    ),
}
WHOLE = {  # what the finished run's digests (done.json) say first, before a state file is read
    "task 0's file as task 1": "task_001.safetensors is not the file that was written",
    "a module weight made NaN": "task_001.safetensors is not the file that was written",
    "a classifier in float16": "task_001.safetensors is not the file that was written",
    "another flow's task file": "task_001.safetensors is not the file that was written",
    "the class order edited": "asked.json is not the file that was written",
    "a task file too many": "holds state/task_002.safetensors, a file its done.json does not name",
}


@pytest.mark.parametrize("case", list(EDITS))
def test_an_edited_or_mixed_run_is_refused_by_eval_and_predict(
    runs: dict[str, Path], tmp_path: Path, case: str
) -> None:
    run = tmp_path / "run"
    shutil.copytree(runs["tosca"], run)
    edit, said = EDITS[case]
    if edit is None:
        shutil.copy(
            runs["tosca_r"] / "state" / "task_001.safetensors", run / "state" / "task_001.safetensors"
        )
    else:
        edit(run)
    for read in (evaluate_run, tosca_heads.load_run, read_run):  # finished: its digests refuse it
        with pytest.raises(UserError, match=WHOLE[case]):
            read(run)
    (run / "done.json").unlink()  # not finished: resumed from its state files, each checked as read
    with pytest.raises(UserError, match=said):
        evaluate_run(run)
    with pytest.raises(UserError, match=said):  # the predictor reads the same files
        tosca_heads.load_run(run)


def test_an_edited_metrics_view_is_never_read(runs: dict[str, Path], tmp_path: Path) -> None:
    """metrics.json is a view (issue 54): an edited finished_tasks or A_last there is read by no
    one, where before it was refused or, for finished_tasks, believed by `tosca routers`."""
    run = tmp_path / "run"
    shutil.copytree(runs["tosca"], run)
    before = read_run(run).metrics
    metrics = json.loads((run / "metrics.json").read_text())
    metrics.update(finished_tasks=-3)
    metrics["routers"]["entropy"].update(A_last=7.5, A_t=[0.5, 2.0])
    (run / "metrics.json").write_text(json.dumps(metrics))
    after = read_run(run).metrics
    assert after == before and after["finished_tasks"] == 2


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
@pytest.mark.parametrize("finished", [True, False])
def test_eval_refuses_a_run_that_lost_a_task_file_and_rewrites_nothing(
    runs: dict[str, Path], tmp_path: Path, gone: str, finished: bool
) -> None:
    """A deleted task file (the last one, or one before others) is one line naming it: evaluating
    what is left would rewrite the views and the answers with tasks dropped. A finished run's
    done.json names it missing; a run never finished (no done.json) says which task file is gone
    before the ones that remain (the last one gone: `tosca fit --run` trains it again)."""
    run = tmp_path / "run"
    shutil.copytree(runs["tosca"], run)
    (run / "state" / gone).unlink()
    if not finished:
        (run / "done.json").unlink()
    before = {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    if finished or gone == "task_000.safetensors":
        with pytest.raises(UserError, match=f"{gone} is missing") as refused:
            evaluate_run(run)
        assert "\n" not in str(refused.value)
        fix = "delete the run and fit it again" if finished else "tosca fit --run"
        assert fix in str(refused.value)
        assert {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    else:  # the last task file of a run never finished: evaluated as the one task it has
        assert len(evaluate_run(run).stages) == 1
