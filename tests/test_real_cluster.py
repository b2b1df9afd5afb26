"""A real cluster, as a user runs one (issue 48, point 4): `dask scheduler` and two `dask worker`
processes started separately on loopback, `tosca sweep --scheduler tcp://HOST:PORT` and `tosca
extract --scheduler ...` run against them, one worker SIGKILLed at a point in the work (a preload,
`support.worker_killer`: as its first work starts, or while it writes a chunk's view). The results
equal a run on this machine's one process: results.csv's figures, the store's arrays. A scheduler
that dies, or an address that is no Dask scheduler, is covered by
tests/foundation/test_scheduler_link.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support import ROOT
from support.dask_processes import Cluster, dask_cluster
from support.images import TINY_VIT, make_image_tree
from support.stores import synthetic_store
from typer.testing import CliRunner

from cli import app
from featcache.store import FeatureStore, verify_store
from tosca_heads.records.sweep import TIMING_COLUMNS

RUNNER = CliRunner()
KILLER = ROOT / "tests" / "support" / "worker_killer.py"


@pytest.fixture(scope="module")
def markers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("killed")
    return {"TOSCA_TEST_KILL_WORK_MARKER": folder / "work", "TOSCA_TEST_KILL_MARKER": folder / "chunk"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, markers: dict[str, Path]) -> Iterator[Cluster]:
    """One scheduler and two single-threaded workers for the module; each worker dies once at
    most: the first to start a sweep's work, the first to write an extraction's view."""
    env = {name: str(path) for name, path in markers.items()}
    with dask_cluster(tmp_path_factory.mktemp("dask"), workers=2, preload=KILLER, env=env) as running:
        yield running


def _figures(folder: Path) -> pd.DataFrame:
    """results.csv without what differs from process to process (times, pids, the device)."""
    frame = pd.read_csv(folder / "results.csv", keep_default_na=False, na_values=[""])
    figures = frame.drop(columns=[c for c in TIMING_COLUMNS if c in frame.columns])
    return figures.sort_values(["key", "split", "router"]).reset_index(drop=True)


@pytest.mark.heavy
def test_a_sweep_on_a_real_cluster_with_a_worker_killed_equals_a_local_one(
    tmp_path: Path, cluster: Cluster, markers: dict[str, Path]
) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=4, spread=1.5)  # figures short of 100%
    args = ["sweep", "--store", str(store.path), "--r", "2,4", "--seeds", "0,1", "--epochs", "3"]
    args += ["--batch-size", "8", "--init-cls", "2", "--increment", "2", "--device", "cpu", "--group", "1"]
    hit = RUNNER.invoke(app, [*args, "--scheduler", cluster.address, "--out", str(tmp_path / "hit")])
    assert hit.exit_code == 0, hit.output
    assert "note: lost the Dask worker tcp://" in hit.output  # said, not silent (issue 49, point 4)
    assert markers["TOSCA_TEST_KILL_WORK_MARKER"].read_text().split()[1:] == [
        "tosca",
        "1",
    ]  # one died, mid-point
    calm = RUNNER.invoke(app, [*args, "--jobs", "1", "--out", str(tmp_path / "calm")])
    assert calm.exit_code == 0, calm.output
    on_cluster, here = _figures(tmp_path / "hit"), _figures(tmp_path / "calm")
    assert on_cluster["key"].nunique() == 4 and len(on_cluster) == len(here)  # every point once
    pd.testing.assert_frame_equal(on_cluster, here)


@pytest.mark.heavy
def test_an_extraction_on_a_real_cluster_with_a_worker_killed_equals_a_local_one(
    tmp_path: Path, cluster: Cluster, markers: dict[str, Path]
) -> None:
    tree = make_image_tree(tmp_path / "images", classes=2, train=3, test=1)
    args = ["extract", "--model", TINY_VIT, "--dataset", "imagefolder", "--data-root", str(tree)]
    args += ["--random-init", "--views", "1", "--seed", "3", "--chunk-size", "2", "--batch-size", "2"]
    args += ["--workers", "0", "--device", "cpu", "--cache-dir", str(tmp_path / "c")]
    hit = RUNNER.invoke(app, [*args, "--scheduler", cluster.address, "--store", str(tmp_path / "hit.zarr")])
    assert hit.exit_code == 0, hit.output
    killed = markers["TOSCA_TEST_KILL_MARKER"].read_text()  # a worker died writing garbage into a view
    assert killed.startswith(str(tmp_path / "hit.zarr")), killed
    calm = RUNNER.invoke(app, [*args, "--store", str(tmp_path / "calm.zarr")])
    assert calm.exit_code == 0, calm.output
    on_cluster, here = FeatureStore.open(tmp_path / "hit.zarr"), FeatureStore.open(tmp_path / "calm.zarr")
    assert on_cluster.is_complete() and verify_store(on_cluster) == []
    for split in ("train", "test"):
        np.testing.assert_array_equal(on_cluster.features(split), here.features(split))
        np.testing.assert_array_equal(on_cluster.checksums(split), here.checksums(split))
    views = np.asarray(on_cluster.group["train/views"][:])
    np.testing.assert_array_equal(views, np.asarray(here.group["train/views"][:]))
