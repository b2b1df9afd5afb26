"""Cluster faults: with `--scheduler local:2`, a worker process killed in the middle of writing a
chunk does not cost the job: Dask runs its task again on a live worker, the half-written chunk is
rewritten (never trusted), every chunk is done exactly once, and the arrays equal an undisturbed
single-process run."""

from __future__ import annotations

import os
from pathlib import Path

import dask
import distributed  # noqa: F401  (its settings loaded now: set first inside the block below, leaving it would drop them all)
import numpy as np
import pytest
import torch
from support import ROOT
from support.images import FAST_CNN, make_image_tree

from featcache.extraction import ExtractRequest, plan_extraction, run_extraction
from featcache.store import FeatureStore, verify_store


@pytest.mark.slow
@pytest.mark.heavy
def test_worker_killed_mid_chunk_job_finishes_equal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, planted_working_folder: Path
) -> None:
    tree = make_image_tree(tmp_path / "imgs", classes=2, train=5, test=2)
    common = dict(
        model=FAST_CNN,
        dataset="imagefolder",
        data_root=tree,
        cache_dir=tmp_path / "c",
        random_init=True,
        views=2,
        seed=3,
        chunk_size=2,
        batch_size=2,
        workers=0,
        device="cpu",
    )
    threads = torch.get_num_threads()
    # the threads each of local:2's workers gets (featcache.extraction): a CNN's sums depend on the count
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // 2))
    try:
        undisturbed = FeatureStore.open(
            run_extraction(plan_extraction(ExtractRequest(store=tmp_path / "one.zarr", **common))).store
        )
    finally:
        torch.set_num_threads(threads)
    marker = tmp_path / "killed-at"
    monkeypatch.setenv("TOSCA_TEST_KILL_MARKER", str(marker))
    with dask.config.set(
        {"distributed.worker.preload": [str(ROOT / "tests" / "support" / "worker_killer.py")]}
    ):
        summary = run_extraction(
            plan_extraction(ExtractRequest(store=tmp_path / "two.zarr", scheduler="local:2", **common))
        )
    killed = marker.read_text()  # a worker did die, writing garbage into a view of this chunk
    chunk = int(killed.split("/train/views/c/")[1].split("/")[1])
    assert killed.startswith(str(tmp_path / "two.zarr")), killed

    store = FeatureStore.open(summary.store)
    assert summary.chunks_computed == 5 + 2 and summary.chunks_skipped == 0
    assert summary.images_computed == 10 * 3 + 4  # each chunk's images counted once
    assert store.is_complete() and verify_store(store) == []
    for split in ("train", "test"):
        np.testing.assert_array_equal(store.features(split), undisturbed.features(split))
        np.testing.assert_array_equal(store.checksums(split), undisturbed.checksums(split))
    views = np.asarray(store.group["train/views"][:])
    np.testing.assert_array_equal(views, np.asarray(undisturbed.group["train/views"][:]))
    assert 0 <= chunk < 5
    # the workers imported nothing from the working folder (a planted multiprocessing.py)
    assert not planted_working_folder.exists(), planted_working_folder.read_text()
