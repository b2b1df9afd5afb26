"""Each run's routing confusion matrices (scikit-learn's, after the last task): written beside its
metrics, consistent with its routing accuracy, plotted, read back with checks, and summarised by
`tosca routers RUN` as where each task's misrouted images go."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support.stores import synthetic_store
from typer.testing import CliRunner

from cli import app
from tosca_foundation.errors import UserError
from tosca_heads.records.run_cell import read_run
from tosca_heads.records.run_folder import CONFUSION
from tosca_heads.routers import resolve_routers
from tosca_heads.studies.report import misrouting, routers_report

COMPUTED = resolve_routers(None)  # the routers a run computes unless others are named


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("confusion")
    store = synthetic_store(tmp / "s.zarr", classes=6, per_class=16, test_per_class=8, spread=2.5)
    run_dir = tmp / "run"
    done = CliRunner().invoke(
        app,
        ["fit", "--store", str(store.path), "--init-cls", "2", "--increment", "2", "--epochs", "2",
         "--batch-size", "8", "--val-fraction", "0.25", "--device", "cpu", "--run", str(run_dir)],
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    return run_dir


def test_the_confusion_matrices_agree_with_the_routing_accuracy(run: Path) -> None:
    read = read_run(run)  # counted from the route kept after the last task
    payload, metrics = read.confusion, read.metrics
    view = json.loads((run / CONFUSION).read_text())
    assert {k: view[k] for k in ("task", "test", "validation")} == payload  # the view says the same
    assert payload["task"] == 2 and (run / "confusion.png").stat().st_size > 0
    for split, block in (("test", "routers"), ("validation", "validation")):
        for name in COMPUTED:
            matrix = np.asarray(payload[split][name])
            assert matrix.shape == (3, 3)
            assert matrix.sum() == (48 if split == "test" else 24)  # every seen image, once
            routing = metrics[block][name]["routing_accuracy"]
            assert np.trace(matrix) / matrix.sum() == pytest.approx(routing)
    assert np.trace(np.asarray(payload["test"]["oracle"])) == 48  # told the task: always right


@pytest.mark.parametrize("tasks", [1, 2, 5])
def test_the_engine_counts_scikit_learns_confusion_matrix(tasks: int) -> None:
    """The engine counts the matrix itself (a GPU image has no scikit-learn): the same integers as
    scikit-learn's `confusion_matrix` with labels 0..tasks-1, a task never picked included."""
    import torch
    from sklearn.metrics import confusion_matrix

    from tosca_heads.engine.evaluate import _routing_confusion

    gen = torch.Generator().manual_seed(tasks)
    truth = torch.randint(0, tasks, (200,), generator=gen)
    chosen = torch.randint(0, max(tasks - 1, 1), (3, 200), generator=gen)  # the last task never picked
    counted = _routing_confusion(truth, chosen, tasks)
    labels = np.arange(tasks)
    for matrix, picked in zip(counted, chosen.numpy(), strict=True):
        if tasks == 1:  # every image routed to the one task (scikit-learn warns on a 1 x 1 matrix)
            assert matrix == [[200]]
            continue
        assert matrix == confusion_matrix(truth.numpy(), picked, labels=labels).tolist()
        assert all(isinstance(v, int) for row in matrix for v in row)  # JSON integers


def test_routers_shows_where_the_misrouted_images_go(run: Path) -> None:
    report = routers_report(run)
    matrix = read_run(run).confusion["test"][report.best]
    assert [r["misrouted"] for r in report.misrouting] == [sum(row) - row[t] for t, row in enumerate(matrix)]
    shown = CliRunner().invoke(app, ["routers", str(run)])
    assert shown.exit_code == 0 and f"where {report.best} routes each task's test images" in shown.output


def test_misrouting_names_the_biggest_destinations_first() -> None:
    rows = misrouting([[5, 1, 3], [0, 4, 0], [2, 2, 0]])
    assert rows[0] == {
        "task": 0,
        "images": 9,
        "routed_right": 100 * 5 / 9,
        "misrouted": 4,
        "misrouted_to": [(2, 3), (1, 1)],
    }
    assert rows[1]["misrouted_to"] == [] and rows[2]["routed_right"] == 0.0
    assert rows[2]["misrouted_to"] == [(0, 2), (1, 2)]  # ties: the lower task first


def test_an_edited_route_is_one_line(run: Path, tmp_path: Path) -> None:
    """The route kept after the last task is an answer: edited after the run finished, one line."""
    import shutil

    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    path = copy / "outcomes.safetensors"
    with safe_open(path, "pt") as fh:
        meta = fh.metadata()
    tensors = load_file(path)
    tensors["test/chosen/entropy"][0] = 2 - tensors["test/chosen/entropy"][0]
    save_file(tensors, path, meta)
    with pytest.raises(UserError, match=r"outcomes\.safetensors is not the file that was written"):
        read_run(copy)
