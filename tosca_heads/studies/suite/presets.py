"""The suites tosca ships, in the structure of a SUITE.toml (`spec.parse_suite` reads both).

- `small`: a first suite that runs in a few minutes on a CPU: the demo's one store (`tosca demo`'s
  EuroSAT subset, 300 images per class, EfficientNet-Lite0 with its packaged ImageNet weights), one
  seed, TOSCA's headline routers, the baselines that run by default (SimpleCIL, RanPAC, joint
  probe) and every ablation flow with L1 on and off for the paper's flow. Every table, claim and
  manifest the large presets write, on a store that `make demo` has extracted already.
- `local`: what runs on the real archives of this project's machines (`$TOSCA_DATA`, else
  ../shared/data): EfficientNet-Lite0 with its packaged ImageNet weights on per-class subsets of
  EuroSAT, CIFAR-10 (B0 Inc2) and CIFAR-100 (B0 Inc5), three seeds, every method (every
  registered baseline) and ablation.
  Its stores are the ones `benchmarks/routing.py` and `tosca demo` extract.
- `paper`: the paper's six benchmarks (method.md §2) on ViT-B/16 IN-21k, three seeds, every method
  and ablation. It needs the data in `train/<class>/` + `test/<class>/` folders under
  `$TOSCA_PAPER_DATA/<dataset>/` and the ViT-B/16 IN-21k weights (timm's
  `vit_base_patch16_224.augreg_in21k`, downloaded on first use or passed as a file).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

from tosca_foundation.dataset_names import DATASETS
from tosca_foundation.errors import UserError
from tosca_foundation.names import did_you_mean
from tosca_heads.method.baseline_registry import ALL, default_baselines
from tosca_heads.requests.command_requests import DEMO_PER_CLASS
from tosca_heads.routers import HEADLINE

ALL_ABLATIONS = {"flows": ["tosca", "tosca_r", "adapter", "calibrator"], "l1_off": True}


def _data(env: str, fallback: Path) -> str:
    return os.environ.get(env) or str(fallback)


def _split(dataset: str) -> dict[str, int]:
    """A store's split: the one its dataset's registration declares, written out in the preset (a
    stand-in store of another dataset's name keeps it)."""
    split = DATASETS[dataset].split
    return {"init_cls": split.init_cls, "increment": split.increment}


def _suite(name: str, stores: list[dict[str, Any]]) -> dict[str, Any]:
    """A preset: what the large presets run (three seeds, TOSCA's headline routers, every registered
    baseline with its defaults (`methods = "all"`: the frozen-feature methods too); every
    ablation) on its stores; `small` narrows the seeds and baselines."""
    return {
        "name": name,
        "seeds": [0, 1, 2],
        "tosca": {"routers": list(HEADLINE)},
        "baselines": {"methods": ALL},
        "ablation": copy.deepcopy(ALL_ABLATIONS),
        "stores": stores,
    }


# The local stores: (name, dataset, archive under $TOSCA_DATA, images per class, store file under
# cache/<dataset>/). EuroSAT's is the store `tosca demo` extracts (`make demo`), at its size.
DEMO_STORE = (
    "EuroSAT",
    "eurosat",
    "eurosat/EuroSAT-RGB.tar.gz",
    DEMO_PER_CLASS,
    f"effnet_lite0-demo{DEMO_PER_CLASS}.zarr",
)
LOCAL_STORES = [
    DEMO_STORE,
    ("CIFAR-10", "cifar10", "cifar10/cifar10-jpeg.tar.gz", 300, "effnet_lite0-300.zarr"),
    ("CIFAR-100", "cifar100", "cifar100/cifar100-jpeg.tar.gz", 100, "effnet_lite0-100.zarr"),
]


def _local_stores(stores: list[tuple[str, str, str, int, str]]) -> list[dict[str, Any]]:
    """Each store where the demo and `benchmarks/routing.py` extract it (cache/ of the working
    folder), extracted from the archive under $TOSCA_DATA (else ../shared/data) when missing."""
    data = Path(_data("TOSCA_DATA", Path.cwd().parent / "shared" / "data"))
    return [
        {
            "name": name,
            "path": str((Path("cache") / dataset / file).resolve()),
            "model": "effnet_lite0",
            "dataset": dataset,
            "data_root": str(data / archive),
            "limit_per_class": per_class,
            **_split(dataset),
            "weights": "ImageNet-1k",
        }
        for name, dataset, archive, per_class, file in stores
    ]


def _local() -> dict[str, Any]:
    return _suite("local", _local_stores(LOCAL_STORES))


def _small() -> dict[str, Any]:
    """`local`'s EuroSAT store alone, at one seed, with the default baselines: minutes, not hours
    (`local` runs every registered baseline at three seeds on three stores)."""
    small = _suite("small", _local_stores([DEMO_STORE]))
    small["seeds"] = [0]
    small["baselines"] = {"methods": list(default_baselines())}
    return small


PAPER_BENCHMARKS = [  # name, dataset (method.md §2; each with the split its registration declares)
    ("CIFAR-100", "cifar100"),
    ("CUB-200", "cub200"),
    ("ImageNet-R", "imagenet_r"),
    ("ImageNet-A", "imagenet_a"),
    ("OmniBenchmark", "omnibenchmark"),
    ("VTAB", "vtab"),
]


def _paper() -> dict[str, Any]:
    data = Path(_data("TOSCA_PAPER_DATA", Path("data")))
    return _suite(
        "paper",
        [
            {
                "name": name,
                "path": str((Path("cache") / dataset / "vit_b16.zarr").resolve()),
                "model": "vit_b16",
                "dataset": dataset,
                "data_root": str(data / dataset),
                **_split(dataset),
                "weights": "IN-21k",
            }
            for name, dataset in PAPER_BENCHMARKS
        ],
    )


PRESETS = {"small": _small, "local": _local, "paper": _paper}


def preset(name: str) -> dict[str, Any]:
    if name not in PRESETS:
        raise UserError(
            f"unknown --preset {name!r}{did_you_mean(name, PRESETS)}: use one of {', '.join(PRESETS)}"
        )
    return PRESETS[name]()
