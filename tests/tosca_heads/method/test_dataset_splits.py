"""A dataset's default split and test share are declared once, where it is registered
(`tosca_foundation.dataset_names`), and the protocol, the presets, the demo and an extraction
estimate read them there (issue 45)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from featcache.extraction_estimate import _classes_and_counts
from tosca_foundation.dataset_names import DATASETS, Split, register_dataset
from tosca_heads.method.protocol import StreamConfig, default_stream, split_origin
from tosca_heads.studies.suite.presets import PRESETS, preset

# method.md §2: the paper's benchmarks and their splits (B0 IncN); EuroSAT and CIFAR-10 are tosca's
PAPER = {"cifar100": 5, "cub200": 10, "imagenet_r": 20, "imagenet_a": 20, "omnibenchmark": 30, "vtab": 10}
TOSCAS = {"eurosat": 2, "cifar10": 2}


@pytest.mark.parametrize("name", list(DATASETS))
def test_every_dataset_declares_its_split_where_it_is_registered(name: str) -> None:
    spec = DATASETS[name]
    if spec.num_classes is None:  # any class count (an image folder): the protocol chooses one
        assert spec.split is None
        assert split_origin(name, None, None).startswith("the default without a paper split")
        return
    assert spec.split is not None, f"{name} is registered without its split"
    declared = StreamConfig(spec.split.init_cls, spec.split.increment)
    assert declared.task_stream(spec.num_classes).num_tasks >= 2  # it divides the classes
    assert default_stream(name, spec.num_classes) == declared  # what every command uses
    whose = "the paper's split for" if spec.split.paper else "tosca's default for"
    assert split_origin(name, None, None).startswith(whose)


def test_the_built_in_splits_are_the_papers() -> None:
    for name, increment in {**PAPER, **TOSCAS}.items():
        assert DATASETS[name].split == Split(increment, increment, paper=name in PAPER), name


def test_the_presets_take_each_stores_split_from_its_dataset() -> None:
    for which in PRESETS:  # every suite tosca ships
        for store in preset(which)["stores"]:
            split = DATASETS[store["dataset"]].split
            assert (store["init_cls"], store["increment"]) == (split.init_cls, split.increment), store


@pytest.fixture
def plugin() -> Iterator[str]:
    register_dataset(
        "plug_split", 12, "a plug-in's folders", split=Split(4, 2, paper=False), test_share=0.25
    )(lambda data_root, cache_dir: None)
    try:
        yield "plug_split"
    finally:
        del DATASETS["plug_split"]


def test_a_plugin_datasets_split_and_test_share_are_read_as_a_built_ins(plugin: str) -> None:
    assert default_stream(plugin, 12) == StreamConfig(4, 2)
    assert split_origin(plugin, None, None) == "tosca's default for plug_split, not in the paper"
    names = [f"class{c}/{i}.jpg" for c in range(12) for i in range(40)]
    assert _classes_and_counts(names, None, plugin) == (12, 12 * 30, 12 * 10)  # a quarter tests
    assert _classes_and_counts(names, None, "eurosat") == (12, 12 * 32, 12 * 8)  # EuroSAT's 20%


def test_a_split_that_does_not_divide_the_classes_is_refused_when_registered() -> None:
    with pytest.raises(ValueError, match="10 classes do not split into a first task of 3 and tasks of 3"):
        register_dataset("bad_split", 10, "x", split=Split(3, 3))
    with pytest.raises(ValueError, match=r"test_share must be above 0 and below 1, got 1\.5"):
        register_dataset("bad_share", 10, "x", test_share=1.5)
    assert "bad_split" not in DATASETS and "bad_share" not in DATASETS
