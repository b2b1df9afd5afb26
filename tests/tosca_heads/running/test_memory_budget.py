"""The memory budget (issue 48, point 2): a store over it trains task by task, to the same bits as
held whole; a fit whose one task cannot fit it is refused before any work, in one line saying what
to lower; the budget is a setting (`TOSCA_MEMORY_BUDGET`, `tosca --memory-budget`), checked like
a flag, by default half the available memory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from support import ROOT
from support.commands import invoke, refusal
from support.messages import after_the_plan
from support.stores import synthetic_store
from typer.testing import CliRunner

from cli import app
from tosca_foundation.errors import UserError
from tosca_foundation.limits import available_memory, memory_budget
from tosca_foundation.units import parse_bytes
from tosca_heads.engine.memory import require_room, run_memory
from tosca_heads.method import features
from tosca_heads.method.protocol import StreamConfig
from tosca_heads.method.recipe import TrainConfig
from tosca_heads.requests.plan import FitPlan
from tosca_heads.running.group import GroupFit

# epochs past the views: a view is read once and kept for the epochs that use it again
RECIPE = TrainConfig(epochs=3, batch_size=16, r=4, s=4)
STREAM = StreamConfig(2, 2)


def _plan(tmp_path: Path, name: str, store_path: Path) -> FitPlan:
    from featcache.store import FeatureStore

    store = FeatureStore.open(store_path)
    return FitPlan.build(store, STREAM, trains=[RECIPE], dirs=[tmp_path / name], device="cpu")


def _run(plan: FitPlan) -> tuple[bool, dict[str, torch.Tensor], object]:
    """Fit a plan as `fit` does (the source built by the group): whether it held the store whole,
    every tensor of its run folder's files (modules, classifier, routers' statistics), the routers'
    figures."""
    group = GroupFit(plan)
    held_whole = group.source.in_memory
    plan.dirs[0].mkdir()
    (result,) = group.run()
    tensors = {
        f"{p.name}/{key}": value
        for p in sorted(plan.dirs[0].glob("*.safetensors"))
        for key, value in load_file(str(p)).items()
    }
    return held_whole, tensors, result.metrics()["routers"]


def test_a_store_over_the_budget_trains_task_by_task_to_the_same_bits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=6, per_class=120, dim=256, views=2)
    whole = _plan(tmp_path, "whole", store.path)
    memory = run_memory(store.shape, whole.trains, 3, torch.device("cpu"), 240)
    assert memory.need(False) < memory.need(True)
    held, files, metrics = _run(whole)
    assert held  # the default budget (half the available memory) holds this store whole
    # a budget that one task fits, the whole store not: read task by task
    monkeypatch.setenv("TOSCA_MEMORY_BUDGET", str(max(1_000_000, memory.need(False))))
    assert memory.need(True) > memory_budget() >= memory.need(False)
    held_streamed, files_streamed, metrics_streamed = _run(_plan(tmp_path, "streamed", store.path))
    assert not held_streamed
    assert files_streamed.keys() == files.keys() and len(files) > 10
    for name, tensor in files.items():  # every module, classifier and router statistic: the same bits
        assert torch.equal(files_streamed[name], tensor), name
    assert metrics_streamed == metrics


def test_a_task_over_the_budget_is_refused_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=4, per_class=1000, dim=256, views=2)

    def no_read(*args: object) -> None:
        raise AssertionError("a chunk was read before the refusal")

    monkeypatch.setenv("TOSCA_MEMORY_BUDGET", "")  # the flag sets it for the command: unset after the test
    monkeypatch.setattr(features, "checked_chunks", no_read)
    monkeypatch.setattr(features, "verify_streaming", no_read)
    run = tmp_path / "run"
    args = ["--memory-budget", "1MB", "fit", "--store", str(store.path), "--run", str(run), "--device", "cpu"]
    result = CliRunner().invoke(app, [*args, "--epochs", "1", "--init-cls", "2", "--increment", "2"])
    lines = after_the_plan(result.output)  # the plan is said first; then nothing is read or written
    line = refusal(
        result.exit_code, lines, "one task of this fit needs", "over the memory budget of 976.6 KiB"
    )
    assert "its 2,000 training rows and their 2 views" in line
    assert "lower --increment" in line and "raise --memory-budget (TOSCA_MEMORY_BUDGET)" in line
    assert not run.exists()


def test_eval_over_the_budget_names_only_what_eval_can_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 57, point 10: `tosca eval` under a budget said "lower --r, --s or --batch-size", flags
    it does not have (a run's recipe and split are fixed once trained): it names the budget alone."""
    store = synthetic_store(tmp_path / "s.zarr", classes=4, per_class=1000, dim=256, views=2)
    run = tmp_path / "run"
    args = ["fit", "--store", str(store.path), "--run", str(run), "--device", "cpu", "--epochs", "1"]
    fitted = CliRunner().invoke(app, [*args, "--init-cls", "2", "--increment", "2", "--batch-size", "64"])
    assert fitted.exit_code == 0, fitted.output
    monkeypatch.setenv("TOSCA_MEMORY_BUDGET", "")  # the flag sets it for the command: unset after the test
    result = CliRunner().invoke(app, ["--memory-budget", "1MB", "eval", str(run), "--device", "cpu"])
    line = refusal(
        result.exit_code, after_the_plan(result.output), "one task of this run needs", "raise --memory-budget"
    )
    assert not any(flag in line for flag in ("--r", "--s ", "--batch-size", "--increment")), line


def test_require_room_holds_whole_only_what_fits_the_budget(tmp_path: Path) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=6, per_class=120, dim=256, views=2)
    train = [RECIPE.resolved(256)]
    memory = run_memory(store.shape, train, 3, torch.device("cpu"), 240)
    cpu = torch.device("cpu")
    room = require_room(store.shape, train, 3, cpu, 240, budget=memory.need(True))
    assert room.whole and room.features_budget == store.shape.float32_bytes
    room = require_room(store.shape, train, 3, cpu, 240, budget=memory.need(True) - 1)
    assert not room.whole and room.features_budget < store.shape.float32_bytes
    with pytest.raises(UserError, match="one task of this fit needs") as refused:
        require_room(store.shape, train, 3, cpu, 240, budget=memory.need(False) - 1)
    assert "\n" not in str(refused.value)
    # a task refused for what the recipe holds (a wide bottleneck), not for its rows: the line says so
    wide = [TrainConfig(epochs=3, batch_size=16, r=2048, s=4).resolved(256)]
    big = run_memory(store.shape, wide, 3, cpu, 240)
    with pytest.raises(UserError, match="lower --r, --s or --batch-size or raise --memory-budget"):
        require_room(store.shape, wide, 3, cpu, 240, budget=big.need(False) - 1)
    # a source already holding the store whole is planned as it holds it: no refusal for one task
    assert require_room(store.shape, train, 3, cpu, 240, whole=True, budget=memory.need(False) - 1).whole


@pytest.mark.parametrize(
    ("text", "amount"),
    [
        ("3000000000", 3_000_000_000),
        ("3GB", 3_000_000_000),
        ("2.5GiB", int(2.5 * (1 << 30))),
        ("512 MiB", 512 << 20),
        ("1000000B", 1_000_000),
        ("8G", None),
        ("lots", None),
        ("-1GB", None),
        ("1e9", None),
    ],
)
def test_an_amount_of_memory_is_read_as_people_write_it(text: str, amount: int | None) -> None:
    assert parse_bytes(text) == amount


def test_the_budget_is_a_setting_checked_like_a_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOSCA_MEMORY_BUDGET", raising=False)
    monkeypatch.setenv("TOSCA_MEMORY_LIMIT", "2000000000")  # what tosca plans with: the default is half
    assert memory_budget() == int(available_memory() * 0.5) <= 1_000_000_000
    monkeypatch.setenv("TOSCA_MEMORY_BUDGET", "3GiB")
    assert memory_budget() == 3 << 30  # given: taken as given, whatever is available
    for bad in ("lots", "8G", "999999", "0"):
        monkeypatch.setenv("TOSCA_MEMORY_BUDGET", bad)
        with pytest.raises(
            UserError, match=f"TOSCA_MEMORY_BUDGET={bad}|TOSCA_MEMORY_BUDGET='{bad}'"
        ) as refused:
            memory_budget()
        assert "\n" not in str(refused.value) and "(--memory-budget)" in str(refused.value)
    monkeypatch.setenv("TOSCA_MEMORY_BUDGET", "")  # unset, and unset again after the test (the flag sets it)
    code, lines = invoke("--memory-budget", "lots", "cache", "ls", "--cache-dir", ".")
    refusal(code, lines, "TOSCA_MEMORY_BUDGET='lots' (--memory-budget) is not an amount of memory")
    code, _ = invoke("--memory-budget", "2GiB", "cache", "ls", "--cache-dir", ".")
    assert code == 0 and os.environ["TOSCA_MEMORY_BUDGET"] == "2GiB"  # for the command and its processes


@pytest.mark.heavy  # a store built and fitted in a subprocess (about 20 s)
def test_a_store_several_times_the_budget_trains_within_one_task_s_memory(tmp_path: Path) -> None:
    """benchmarks/scale.py on a store about 8x the budget: the fit's peak resident memory grows by
    what one task needs (`RunMemory.need(False)`, plus the allocator's slack), not by the store."""
    import json

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "benchmarks")])}
    script = str(ROOT / "benchmarks" / "scale.py")
    shape = ["--train", "24000", "--test", "2000", "--dim", "256", "--classes", "100", "--increment", "10"]
    rest = ["--views", "16", "--epochs", "1", "--dtype", "float16", "--memory-budget", "48MiB", "--json"]
    done = subprocess.run(
        [sys.executable, script, *shape, *rest, "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["held"] == "task by task"
    grown = figures["peak_rss_bytes"] - figures["rss_before_fit_bytes"]
    assert figures["store_bytes_float32"] > 8 * figures["memory_budget_bytes"]
    assert grown < figures["one_task_bytes"] + (64 << 20), figures
    assert grown < figures["store_bytes_float32"] / 4, figures
    assert not list(tmp_path.iterdir())  # it deleted what it built
    assert np.isfinite(figures["A_last_entropy"])
