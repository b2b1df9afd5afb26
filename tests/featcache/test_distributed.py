"""Chunks computed on a Dask cluster land exactly as a local run writes them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from distributed import LocalCluster
from support.images import FAST_CNN, TINY_VIT

from featcache.extraction import ExtractRequest, plan_extraction, run_extraction
from featcache.store import FeatureStore


@pytest.mark.heavy
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
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, protocol="tcp", dashboard_address=None
    ) as cluster:
        request = ExtractRequest(store=tmp_path / "d.zarr", scheduler=cluster.scheduler_address, **common)
        summary = run_extraction(plan_extraction(request))
    dist = FeatureStore.open(summary.store)
    assert dist.is_complete() and summary.chunks_computed == 3 + 2
    for split in ("train", "test"):
        np.testing.assert_array_equal(dist.features(split), local.features(split))
    np.testing.assert_array_equal(
        np.asarray(dist.group["train/views"][:]), np.asarray(local.group["train/views"][:])
    )


def test_a_worker_keeps_one_backbone_per_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """A long-lived worker that serves a CPU job and then a job on another device must not move
    the CPU mapper's model (a mapper moves its model in place): the meta device stands in for CUDA."""
    import torch

    from featcache import distributor
    from featcache.backbones import load_backbone, resolve_backbone
    from featcache.images.transforms import make_preprocessing

    spec = resolve_backbone(FAST_CNN)
    loaded = load_backbone(spec, random_init=True)
    real_resolve = distributor.resolve_device
    monkeypatch.setattr(
        distributor,
        "resolve_device",
        lambda name: torch.device("meta") if name == "elsewhere" else real_resolve(name),
    )
    monkeypatch.setattr(distributor, "_BACKBONES", {})
    monkeypatch.setattr(distributor, "_MAPPERS", {})

    def job(device: str) -> distributor.ChunkJob:
        return distributor.ChunkJob(
            store_path="unused",
            split="train",
            chunks=(0,),
            preprocessing=make_preprocessing("pilot", loaded.data_config),
            spec=spec,
            weights=None,
            random_init=True,
            weights_sha256=loaded.weights_sha256,
            seed=0,
            batch_size=2,
            device=device,
            precision="fp32",
        )

    on_cpu = distributor.mapper_on_worker(job("cpu"))
    on_other = distributor.mapper_on_worker(job("elsewhere"))
    assert on_other.model is not on_cpu.model
    assert {p.device.type for p in on_other.model.parameters()} == {"meta"}
    assert {p.device.type for p in on_cpu.model.parameters()} == {"cpu"}
    assert distributor.mapper_on_worker(job("cpu")) is on_cpu  # still one mapper per device


@pytest.mark.heavy
def test_jobs_whose_scattered_samples_are_lost_run_again(
    tmp_path: Path, image_tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dask cannot recompute scattered data: when the workers holding a split's sample list die
    before its replicas land, that split's jobs are cancelled. They run again on a fresh scatter
    (the first scatter is cancelled here, standing in for the lost workers), to a local run's store."""
    import contextlib

    from featcache import distributor

    common = dict(
        model=TINY_VIT,
        dataset="imagefolder",
        data_root=image_tree,
        cache_dir=tmp_path / "c",
        random_init=True,
        views=1,
        seed=1,
        chunk_size=4,
        batch_size=2,
        workers=0,
        device="cpu",
    )
    local = FeatureStore.open(
        run_extraction(plan_extraction(ExtractRequest(store=tmp_path / "l.zarr", **common))).store
    )
    real_client = distributor.dask_client
    scatters: list[int] = []

    @contextlib.contextmanager
    def losing_first_scatter(*args: object, **kwargs: object) -> Iterator[object]:
        with real_client(*args, **kwargs) as client:
            scatter = client.scatter

            def scatter_then_lose(data: object, **options: object) -> object:
                future = scatter(data, **options)
                scatters.append(1)
                if len(scatters) == 1:
                    client.cancel(future, force=True)
                return future

            client.scatter = scatter_then_lose
            yield client

    monkeypatch.setattr(distributor, "dask_client", losing_first_scatter)
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, protocol="tcp", dashboard_address=None
    ) as cluster:
        request = ExtractRequest(store=tmp_path / "d.zarr", scheduler=cluster.scheduler_address, **common)
        summary = run_extraction(plan_extraction(request))
    assert len(scatters) == 3  # train and test, then the lost split again
    dist = FeatureStore.open(summary.store)
    assert dist.is_complete()
    for split in ("train", "test"):
        np.testing.assert_array_equal(dist.features(split), local.features(split))
