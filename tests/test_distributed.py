"""Chunks computed on a Dask cluster land exactly as a local run writes them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from conftest import TINY_VIT
from distributed import LocalCluster

from featcache.extract import ExtractRequest, plan_extraction, run_extraction
from featcache.store import FeatureStore


def test_dask_extraction_equals_local(tmp_path: Path, image_tree: Path) -> None:
    common = dict(
        model=TINY_VIT,
        dataset="imagefolder",
        data_root=image_tree,
        cache_dir=tmp_path / "c",
        random_init=True,
        views=2,
        seed=1,
        chunk_size=4,
        batch_size=2,
        workers=0,
        device="cpu",
    )
    local = FeatureStore.open(
        run_extraction(plan_extraction(ExtractRequest(store=tmp_path / "l.zarr", **common))).store
    )
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        request = ExtractRequest(store=tmp_path / "d.zarr", scheduler=cluster.scheduler_address, **common)
        summary = run_extraction(plan_extraction(request))
    dist = FeatureStore.open(summary.store)
    assert dist.is_complete() and summary.chunks_computed == 3 + 2
    for split in ("train", "test"):
        np.testing.assert_array_equal(dist.features(split), local.features(split))
    np.testing.assert_array_equal(
        np.asarray(dist.group["train/views"][:]), np.asarray(local.group["train/views"][:])
    )
