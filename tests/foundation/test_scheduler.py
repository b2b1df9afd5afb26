"""`--scheduler`: local:N, local-cuda, an address or a scheduler file, parsed in one place."""

from __future__ import annotations

import importlib.util
import json
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.images import FAST_CNN, TINY_VIT
from typer.testing import CliRunner

from cli import app
from featcache.extraction import ExtractRequest, plan_extraction, run_extraction
from featcache.store import FeatureStore
from tosca_foundation.errors import UserError
from tosca_foundation.scheduler import SchedulerChoice, dask_client, parse_scheduler


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("local:1", SchedulerChoice("local", workers=1)),
        ("local:16", SchedulerChoice("local", workers=16)),
        ("local-cuda", SchedulerChoice("local-cuda")),
        ("tcp://head:8786", SchedulerChoice("address", target="tcp://head:8786")),
        ("tls://10.0.0.1:8786", SchedulerChoice("address", target="tls://10.0.0.1:8786")),
        ("tcp://[::1]:8786", SchedulerChoice("address", target="tcp://[::1]:8786")),
        ("localhost:8786", SchedulerChoice("address", target="localhost:8786")),
    ],
)
def test_scheduler_forms(text: str, expected: SchedulerChoice) -> None:
    assert parse_scheduler(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("local:0", "N must be at least 1"),
        ("local:-2", "N must be at least 1"),
        ("local", "unknown --scheduler 'local'"),
        ("local:two", "unknown --scheduler 'local:two'"),
        ("local-gpu", "unknown --scheduler 'local-gpu'"),
        ("cluster", "unknown --scheduler 'cluster'"),
        ("missing.json", "no such scheduler file"),
    ],
)
def test_bad_scheduler_names_the_valid_forms(text: str, message: str) -> None:
    with pytest.raises(UserError, match=message) as info:
        parse_scheduler(text)
    assert (
        "local:N" in str(info.value)
        and "local-cuda" in str(info.value)
        and "tcp://host:8786" in str(info.value)
    )


def test_scheduler_file(tmp_path: Path) -> None:
    path = tmp_path / "scheduler.json"
    path.write_text('{"type": "Scheduler", "address": "tcp://10.0.0.1:8786"}')  # what `dask scheduler` writes
    assert parse_scheduler(str(path)) == SchedulerChoice("file", target=str(path))


@pytest.mark.skipif(importlib.util.find_spec("dask_cuda") is not None, reason="dask-cuda is installed here")
def test_local_cuda_without_dask_cuda_is_one_line_and_exit_2(tmp_path: Path, image_tree: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            *("extract", "--model", TINY_VIT, "--dataset", "imagefolder", "--data-root", str(image_tree)),
            *("--random-init", "--scheduler", "local-cuda", "--cache-dir", str(tmp_path / "c")),
        ],
    )
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "needs dask-cuda" in lines[0] and "pip install dask-cuda" in lines[0]
    assert not (tmp_path / "c" / "imagefolder").exists()  # refused before anything was made


def test_local_cuda_starts_dask_cudas_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With dask-cuda installed, local-cuda means dask_cuda.LocalCUDACluster (here a stand-in on the
    import path, which the cluster's helper process takes from this one; it records its options)."""
    record = tmp_path / "made.json"
    (tmp_path / "dask_cuda.py").write_text(
        textwrap.dedent(
            f"""
            import json
            from distributed import LocalCluster

            def LocalCUDACluster(**kwargs):
                with open({str(record)!r}, "w") as out:
                    json.dump(kwargs, out)
                return LocalCluster(
                    n_workers=1, threads_per_worker=1, processes=False, protocol="tcp", **kwargs
                )
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with dask_client(parse_scheduler("local-cuda")) as client:
        assert client.submit(lambda: 41 + 1).result() == 42
    assert json.loads(record.read_text())["dashboard_address"] is None


def test_unreachable_scheduler_is_a_user_error() -> None:
    expected = r"cannot reach a Dask scheduler at tcp://127\.0\.0\.1:9 within 2 s \(connection refused\)"
    with pytest.raises(UserError, match=expected), dask_client(parse_scheduler("tcp://127.0.0.1:9"), 2):
        pass


@pytest.mark.heavy
def test_local_2_processes_equal_one_process(tmp_path: Path, image_tree: Path) -> None:
    common: dict[str, Any] = dict(
        model=TINY_VIT,
        dataset="imagefolder",
        data_root=image_tree,
        cache_dir=tmp_path / "c",
        random_init=True,
        views=2,
        seed=3,
        chunk_size=4,
        workers=0,
        device="cpu",
    )
    local = FeatureStore.open(
        run_extraction(plan_extraction(ExtractRequest(store=tmp_path / "one.zarr", **common))).store
    )
    summary = run_extraction(
        plan_extraction(ExtractRequest(store=tmp_path / "two.zarr", scheduler="local:2", **common))
    )
    dist = FeatureStore.open(summary.store)
    assert dist.is_complete() and summary.chunks_computed == 3 + 2
    assert summary.extra["compute"] == "a local cluster of 2 worker processes"
    for split in ("train", "test"):
        np.testing.assert_array_equal(dist.features(split), local.features(split))
    np.testing.assert_array_equal(
        np.asarray(dist.group["train/views"][:]), np.asarray(local.group["train/views"][:])
    )


@pytest.mark.heavy
def test_a_cnn_store_from_local_2_agrees_to_float_rounding(tmp_path: Path, image_tree: Path) -> None:
    """A CNN's features move in their last bits with the thread count (oneDNN splits a convolution's
    sums by threads; a local:2 worker runs one thread, this process all of them): not bit for bit,
    but within the bound the docs state (per image, relative difference under 1e-5)."""
    common: dict[str, Any] = dict(
        model=FAST_CNN,
        dataset="imagefolder",
        data_root=image_tree,
        cache_dir=tmp_path / "c",
        random_init=True,
        chunk_size=4,
        workers=0,
        device="cpu",
    )
    one = FeatureStore.open(
        run_extraction(plan_extraction(ExtractRequest(store=tmp_path / "one.zarr", **common))).store
    )
    two = FeatureStore.open(
        run_extraction(
            plan_extraction(ExtractRequest(store=tmp_path / "two.zarr", scheduler="local:2", **common))
        ).store
    )
    for split in ("train", "test"):
        a, b = one.features(split).astype(np.float64), two.features(split).astype(np.float64)
        relative = np.linalg.norm(a - b, axis=1) / np.linalg.norm(a, axis=1)
        assert relative.max() < 1e-5, relative.max()


def test_workers_that_declare_a_gpu_get_one_chunk_per_gpu_at_a_time() -> None:
    from distributed import Client, LocalCluster

    from featcache.distributor import gpu_resources

    with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as plain, Client(plain) as client:
        assert gpu_resources(client) is None
    with (
        LocalCluster(n_workers=2, processes=False, dashboard_address=None, resources={"GPU": 1}) as gpus,
        Client(gpus) as client,
    ):
        assert gpu_resources(client) == {"GPU": 1}
