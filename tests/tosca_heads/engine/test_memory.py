"""How many sweep points one engine run holds (engine/memory.py): 1 on a CPU, memory-bound on CUDA."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from support.stores import synthetic_store

from tosca_heads.engine import memory
from tosca_heads.method.protocol import StreamConfig
from tosca_heads.method.recipe import TrainConfig
from tosca_heads.studies.sweeps import SweepPoint

pytestmark = pytest.mark.cpu_reference


def test_more_tasks_and_larger_bottlenecks_need_more_memory(tmp_path: Path) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=6, dim=32)
    small = memory.bytes_per_configuration(store.shape, 3, 4, 4, "tosca", 48)
    assert memory.bytes_per_configuration(store.shape, 6, 4, 4, "tosca", 48) > small
    assert memory.bytes_per_configuration(store.shape, 3, 16, 16, "tosca", 48) > small
    # the evaluated module's [n_test, d] outputs are counted
    n_test = store.layout("test").n
    assert small >= memory.FLOAT * (3 * n_test * 4 + n_test * store.dim)


def test_cpu_groups_one_point(tmp_path: Path) -> None:
    store = synthetic_store(tmp_path / "s.zarr")
    points = [SweepPoint(TrainConfig(r=r), StreamConfig(2, 2)) for r in (4, 8)]
    assert memory.default_group_size(store.shape, points, torch.device("cpu")) == 1


def test_cuda_group_is_bounded_by_free_memory_and_the_most_demanding_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=6, dim=32)
    # r=None (d/16) resolves before sizing; the 1-class-per-task split has the most modules
    points = [
        SweepPoint(TrainConfig(), StreamConfig(2, 2)),
        SweepPoint(TrainConfig(r=8), StreamConfig(1, 1)),
    ] * 50
    worst = memory.bytes_per_configuration(store.shape, 6, 8, 2, "tosca", 48)
    features = (store.layout("train").n + store.layout("test").n) * store.dim * memory.FLOAT
    free = features + int(10.5 * worst / memory.GPU_SHARE)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, 2 * free))
    assert memory.default_group_size(store.shape, points, torch.device("cuda")) == 10
    # two local processes on this one GPU: each holds its own features and gets half of the rest
    shared = 2 * features + int(2 * 10.5 * worst / memory.GPU_SHARE)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (shared, 2 * shared))
    assert memory.default_group_size(store.shape, points, torch.device("cuda"), sharing=2) == 10


@pytest.mark.parametrize(
    ("jobs", "scheduler", "processes"),
    [(1, None, 1), (3, None, 3), (1, "local:4", 4), (2, "local-cuda", 1), (2, "tcp://10.0.0.1:8786", 1)],
)
def test_processes_sharing_this_machines_device(jobs: int, scheduler: str | None, processes: int) -> None:
    from tosca_heads.running.executor import Executor

    assert Executor(jobs, scheduler).processes_per_device() == processes
