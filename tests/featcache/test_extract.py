"""The stored vector is exactly what the method caches: model(x) of a num_classes=0 timm model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from support.images import TINY_CNN, TINY_VIT

from featcache.backbones import RANDOM_INIT_SEED
from featcache.extraction import ExtractRequest, plan_extraction, run_extraction
from featcache.images.transforms import make_preprocessing
from featcache.sources.datasets import load_dataset
from featcache.store import FeatureStore


@pytest.mark.parametrize("model_name", [TINY_VIT, TINY_CNN])
@pytest.mark.parametrize("policy", ["pilot", "timm"])
def test_stored_vector_is_model_output(
    tmp_path: Path, image_tree: Path, model_name: str, policy: str
) -> None:
    request = ExtractRequest(
        model=model_name,
        dataset="imagefolder",
        data_root=image_tree,
        cache_dir=tmp_path / "cache",
        store=tmp_path / "s.zarr",
        random_init=True,
        policy=policy,
        device="cpu",  # compared with a CPU fp32 forward below
        decode="pil",
        seed=3,
        batch_size=4,
        workers=0,
        chunk_size=5,
    )
    summary = run_extraction(plan_extraction(request))
    store = FeatureStore.open(summary.store)

    torch.manual_seed(RANDOM_INIT_SEED)  # the same random init, built independently of featcache
    model = timm.create_model(model_name, pretrained=False, num_classes=0).eval()
    prep = make_preprocessing(policy, timm.data.resolve_data_config({}, model=model))
    dataset = load_dataset("imagefolder", image_tree, tmp_path / "cache")
    for split in ("train", "test"):
        samples = dataset.splits[split]
        x = torch.stack([prep.clean(samples.open_image(i)) for i in range(len(samples))])
        with torch.no_grad():
            expected = model(x).numpy()
        got = store.features(split)
        assert got.shape == expected.shape and store.dim == expected.shape[1]
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(store.labels(split), samples.labels)
        assert list(store.ids(split)) == samples.ids


def test_timm_policy_matches_timm_eval_transform(image_tree: Path) -> None:
    """Our explicit `timm` clean transform reproduces timm's own eval transform bit for bit."""
    model = timm.create_model(TINY_CNN, pretrained=False, num_classes=0)
    config = timm.data.resolve_data_config({}, model=model)
    prep = make_preprocessing("timm", config)
    reference = timm.data.create_transform(**config, is_training=False)
    dataset = load_dataset("imagefolder", image_tree, image_tree.parent / "cache")
    img = dataset.splits["train"].open_image(0)
    torch.testing.assert_close(prep.clean(img), reference(img), rtol=0, atol=0)


def test_pilot_policy_is_unnormalised_224(image_tree: Path) -> None:
    prep = make_preprocessing("pilot", {})
    img = load_dataset("imagefolder", image_tree, image_tree.parent / "c").splits["train"].open_image(0)
    x = prep.clean(img)
    assert x.shape == (3, 224, 224)
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0
    assert prep.attrs()["mean"] is None and prep.attrs()["resize_size"] == 256
