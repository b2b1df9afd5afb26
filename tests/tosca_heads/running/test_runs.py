"""Multi-task runs: resume equivalence, run directories, clear refusals, and cache == online."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file
from support.images import TINY_VIT
from support.online_features import OnlineFeatures
from support.stores import synthetic_store
from typer.testing import CliRunner

from cli import app
from featcache.extraction import ExtractRequest, plan_extraction, run_extraction
from featcache.pipeline.mapper import FeatureMapper
from featcache.store import FeatureStore
from tosca_foundation.errors import UserError
from tosca_heads.method.features import CachedFeatures
from tosca_heads.method.protocol import StreamConfig, TaskStream, class_order
from tosca_heads.method.recipe import TrainConfig
from tosca_heads.records.run_cell import read_run
from tosca_heads.requests.command_requests import FitRequest
from tosca_heads.routers import resolve_routers
from tosca_heads.running.group import evaluate_run, fit_run
from tosca_heads.running.runs import fit

COMPUTED = resolve_routers(None)  # the routers a run computes unless others are named

FAST = TrainConfig(epochs=3, batch_size=8, r=4, s=4)


def test_class_order_is_the_reference_permutation() -> None:
    np.random.seed(1993)
    np.testing.assert_array_equal(class_order(100), np.random.permutation(100))
    stream = TaskStream.build(10, 2, 2)
    assert stream.num_tasks == 5 and list(stream.task_classes(3)) == [6, 7]
    with pytest.raises(UserError, match="do not split"):
        TaskStream.build(10, 3, 2)


def test_resume_equals_one_go(tmp_path: Path) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=8, views=2)
    stream = StreamConfig(2, 2)
    fit_run(store, stream, FAST, 1, tmp_path / "a")
    resumed = fit_run(store, stream, FAST, 3, tmp_path / "a")
    assert resumed.trained == [2, 3]
    one_go = fit_run(store, stream, FAST, 3, tmp_path / "b")
    for task in range(4):
        a, b = (
            load_file(str(tmp_path / "a" / "state" / f"task_{task:03d}.safetensors")),
            load_file(str(tmp_path / "b" / "state" / f"task_{task:03d}.safetensors")),
        )
        assert a.keys() == b.keys()
        for key in a:
            torch.testing.assert_close(a[key], b[key], rtol=0, atol=0, msg=key)
    assert resumed.metrics()["routers"] == one_go.metrics()["routers"]
    assert read_run(tmp_path / "a").metrics["routers"] == read_run(tmp_path / "b").metrics["routers"]


def test_run_directory_contents_and_eval(tmp_path: Path) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=6)
    result = fit_run(store, StreamConfig(2, 2), FAST, None, tmp_path / "run")
    files = {str(p.relative_to(tmp_path / "run")) for p in (tmp_path / "run").rglob("*") if p.is_file()}
    assert {
        "asked.json",
        "measured.json",
        "outcomes.safetensors",
        "done.json",
        "state/task_000.safetensors",
        "state/task_002.safetensors",
        "state/head.safetensors",
        "state/router.safetensors",
        "metrics.json",
        "results.csv",
        "accuracy.png",
    } <= files
    config = json.loads((tmp_path / "run" / "asked.json").read_text())
    assert config["train"]["r"] == 4 and config["stream"] == {
        "init_cls": 2,
        "increment": 2,
        "order_seed": 1993,
    }
    metrics = read_run(tmp_path / "run").metrics  # computed from the answers
    assert metrics == json.loads(json.dumps(result.metrics()))  # what the fit had: the view says it too
    assert json.loads((tmp_path / "run" / "metrics.json").read_text()) == metrics
    assert set(metrics["routers"]) == set(COMPUTED)  # every router, honest or not
    assert {"entropy", "batch", "batch_shuffled", "oracle", "lda", "ncm"} <= set(metrics["routers"])
    oracle = metrics["routers"]["oracle"]
    assert len(oracle["A_t"]) == 3 and oracle["routing_accuracy"] == 1.0
    assert oracle["A_bar"] == pytest.approx(np.mean(oracle["A_t"]))
    assert len(oracle["accuracy_matrix"][-1]) == 3
    frame = pd.read_csv(tmp_path / "run" / "results.csv")
    assert len(frame) == 3 * len(COMPUTED) and set(frame["router"]) == set(metrics["routers"])
    again = evaluate_run(tmp_path / "run")
    assert again.trained == [] and again.metrics()["routers"] == result.metrics()["routers"]


def test_refusals_are_one_clear_line(tmp_path: Path) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=6)
    past = FitRequest(task=3, store=store.path, init_cls=2, increment=2, run=tmp_path / "r")
    with pytest.raises(UserError, match=r"past the last task: this stream has tasks 0\.\.2"):
        fit(past)  # checked at the edge, before a folder is claimed
    assert not (tmp_path / "r").exists()
    for upto in (3, -1):  # a plan holds only a task its stream has: below the edge, a bug
        with pytest.raises(ValueError, match=rf"last task {upto} is not one of its tasks 0\.\.2"):
            fit_run(store, StreamConfig(2, 2), FAST, upto, tmp_path / "r")
    assert not (tmp_path / "r").exists()
    fit_run(store, StreamConfig(2, 2), FAST, 0, tmp_path / "r")
    with pytest.raises(UserError, match="another config"):
        fit_run(store, StreamConfig(2, 2), TrainConfig(epochs=4, batch_size=8, r=4, s=4), 1, tmp_path / "r")
    half = synthetic_store(tmp_path / "h.zarr", classes=6)
    half.group["train/done"][0] = False
    with pytest.raises(UserError, match="not fully extracted"):
        fit_run(half, StreamConfig(2, 2), FAST, 0, tmp_path / "h")
    runner = CliRunner()
    result = runner.invoke(app, ["fit", "--task", "0", "--cache-dir", str(tmp_path / "empty")])
    assert result.exit_code == 2 and "no store under" in result.output
    result = runner.invoke(
        app, ["fit", "--task", "9", "--store", str(tmp_path / "s.zarr"), "--run", str(tmp_path / "c")]
    )
    assert result.exit_code == 2 and "past the last task" in result.output


def test_cli_fit_prints_table_and_summary(tmp_path: Path) -> None:
    synthetic_store(tmp_path / "s.zarr", classes=6)
    result = CliRunner().invoke(
        app,
        [
            "fit",
            "--store",
            str(tmp_path / "s.zarr"),
            "--run",
            str(tmp_path / "run"),
            "--init-cls",
            "2",
            "--increment",
            "2",
            "--epochs",
            "2",
            "--r",
            "4",
            "--s",
            "4",
            "--device",
            "cpu",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "trained" in result.output and "A_last" in result.output and "batch_shuffled" in result.output


@pytest.mark.heavy
def test_cached_training_equals_online_training(tmp_path: Path, image_tree: Path) -> None:
    """V = 0: the cache changes nothing but speed (same seed, same batch order)."""
    request = ExtractRequest(
        model=TINY_VIT,
        dataset="imagefolder",
        data_root=image_tree,
        cache_dir=tmp_path / "c",
        store=tmp_path / "s.zarr",
        random_init=True,
        workers=0,
        batch_size=4,
        chunk_size=4,
        device="cpu",  # compared with the CPU fp32 online source below
    )
    plan = plan_extraction(request)
    store = FeatureStore.open(run_extraction(plan).store)
    config = TrainConfig(epochs=2, batch_size=4, r=8, s=8)
    cached = fit_run(
        store, StreamConfig(1, 1), config, None, tmp_path / "cached", source=CachedFeatures(store)
    )
    mapper = FeatureMapper(plan.backbone.model, torch.device("cpu"), "fp32", 4)
    online_source = OnlineFeatures(mapper, plan.dataset.splits, plan.preprocessing, seed=0, views=0)
    online = fit_run(store, StreamConfig(1, 1), config, None, tmp_path / "online", source=online_source)
    assert online_source.images_forwarded > 3 * 12  # the backbone really ran, every epoch
    for task in range(3):
        a = load_file(str(tmp_path / "cached" / f"task_{task:03d}.safetensors"))
        b = load_file(str(tmp_path / "online" / f"task_{task:03d}.safetensors"))
        for key in a:
            torch.testing.assert_close(a[key], b[key], rtol=1e-4, atol=1e-5, msg=key)
    assert cached.metrics()["routers"]["oracle"]["A_t"] == online.metrics()["routers"]["oracle"]["A_t"]


def test_store_read_task_by_task_gives_the_same_run(tmp_path: Path) -> None:
    """Over the memory budget, features are read per task (as on a small sweep worker): same numbers."""
    store = synthetic_store(tmp_path / "s.zarr", classes=6, views=2)
    streamed = CachedFeatures(store, memory_budget=0)
    assert not streamed.in_memory and CachedFeatures(store).in_memory
    a = fit_run(store, StreamConfig(2, 2), FAST, None, tmp_path / "a", source=streamed)
    b = fit_run(store, StreamConfig(2, 2), FAST, None, tmp_path / "b")
    assert a.metrics()["routers"] == b.metrics()["routers"]


def test_a_store_extracted_again_under_a_run_is_named_as_changed(tmp_path: Path) -> None:
    """The same path, another store (other features, so another fingerprint): the run's files no
    longer describe it, and eval and the sweep's workers stop with one line instead of scoring."""
    import shutil

    from tosca_heads.running.executor import Work, run_work

    store = synthetic_store(tmp_path / "s.zarr", classes=4, seed=0)
    run = tmp_path / "run"
    fit_run(store, StreamConfig(2, 2), TrainConfig(epochs=1, batch_size=8), None, run, device="cpu")
    fingerprint = store.fingerprint
    shutil.rmtree(store.path)
    synthetic_store(tmp_path / "s.zarr", classes=4, seed=1)
    result = CliRunner().invoke(app, ["eval", str(run), "--device", "cpu"])
    assert result.exit_code == 2, result.output
    line = " ".join(result.output.split())
    assert f"changed since run {run} was made (fingerprint differs)" in line, line
    with pytest.raises(UserError, match="changed since the work was planned"):
        run_work(Work(str(store.path), fingerprint, StreamConfig(2, 2)), "cpu", alone=True)
