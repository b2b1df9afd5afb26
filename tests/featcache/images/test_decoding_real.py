"""`--decode torch` on the CPU against the `pil` reference, on the real EuroSAT and CIFAR-10 archives.

EfficientNet-Lite0 (packaged ImageNet weights), 30 images per class per split: per-image cosine
of the torch-decoded features to the PIL-decoded ones, and nearest-class-mean accuracy of each.
"""

from __future__ import annotations

import numpy as np
import pytest
from support.real_data import nearest_class_mean_accuracy, real_store

from featcache.store import FeatureStore

pytestmark = pytest.mark.realdata


@pytest.mark.parametrize("dataset", ["eurosat", "cifar10"])
def test_torch_decoder_matches_pil_on_real_images(
    tmp_path_factory: pytest.TempPathFactory, dataset: str
) -> None:
    pil_path = real_store(tmp_path_factory, dataset)
    torch_path = real_store(tmp_path_factory, dataset, decode="torch")
    pil, tch = FeatureStore.open(pil_path), FeatureStore.open(torch_path)
    assert pil.identity["preprocessing"]["decoder"] == "pil"
    assert tch.identity["preprocessing"]["decoder"] == "torch"
    cosines = []
    for split in ("train", "test"):
        np.testing.assert_array_equal(pil.ids(split), tch.ids(split))
        a, b = pil.features(split), tch.features(split)
        cosines.append((a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)))
    cos = np.concatenate(cosines)
    acc_pil, acc_torch = nearest_class_mean_accuracy(pil_path), nearest_class_mean_accuracy(torch_path)
    print(
        f"\n{dataset}: torch vs pil cosine mean {cos.mean():.6f} min {cos.min():.6f}; "
        f"NCM accuracy pil {acc_pil:.4f} torch {acc_torch:.4f}"
    )
    assert cos.mean() >= 0.99
    assert abs(acc_torch - acc_pil) <= 0.01
