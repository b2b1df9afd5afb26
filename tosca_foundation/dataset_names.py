"""The datasets by name (`DATASETS`), light: each registration carries what the protocol needs
of its dataset, declared once here and read by both stages.

- `split`: its default class split (`Split`: the paper's, or tosca's own for a dataset the paper
  does not use); `tosca_heads.method.protocol` reads it when --init-cls/--increment are not given,
  and a suite's presets and the demo read it for their stores;
- `test_share`: for a dataset without a test folder, the share of each class's images it tests on;
  its source (`featcache.sources.datasets`) splits by it and an extraction estimate counts by it.

A built-in's source (the function turning a data root into sample lists) lives in
`featcache.sources.datasets` and is imported when first used (`DatasetSpec.resolve`), so stage 2
reads a split without the backbone side and `tosca list` starts without it. A plug-in registers
with `register_dataset` (also `featcache.stage1_api.register_dataset`).

Import-light: stdlib and the foundation's registry only.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tosca_foundation.errors import UserValueError
from tosca_foundation.registry import Registry

Resolver = Callable[[Path | None, Path], Any]  # (data root or None, cache folder) -> its DatasetSource
SOURCES = "featcache.sources.datasets"  # where the built-ins' resolvers live


@dataclass(frozen=True)
class Split:
    """A dataset's default class split: `init_cls` classes in task 0, `increment` in each later
    one; `paper` False for tosca's own choice where the paper has none."""

    init_cls: int
    increment: int
    paper: bool = True


@dataclass(frozen=True)
class DatasetSpec:
    """A registered dataset: its `resolver` (a function, or `module:function` imported on first
    use), class count (None: any), description, default `split` (None: none declared, the protocol
    chooses one from the class count) and `test_share` (None: it has test folders of its own)."""

    name: str
    resolver: Resolver | str
    num_classes: int | None
    description: str
    split: Split | None = None
    test_share: float | None = None

    def resolve(self, data_root: Path | None, cache_dir: Path) -> Any:
        """Its `DatasetSource` for this data root (None: the default) and cache folder."""
        resolver = self.resolver
        if isinstance(resolver, str):
            module, _, attribute = resolver.partition(":")
            resolver = getattr(importlib.import_module(module), attribute)
        return resolver(data_root, cache_dir)


DATASETS: Registry[DatasetSpec] = Registry("dataset", "tosca_foundation.dataset_names:DATASETS")


def register_dataset(
    name: str,
    num_classes: int | None,
    description: str,
    aliases: tuple[str, ...] = (),
    split: Split | None = None,
    test_share: float | None = None,
) -> Callable[[Resolver], Resolver]:
    """A function decorator adding a dataset under `name` (and `aliases`): the function turns a
    data root (None: the default) and the cache folder into a `DatasetSource`; `split` is its
    default class split, `test_share` the share of each class it tests on when it has no test
    folder (both declared here once, read by every command)."""
    if split is not None and num_classes is not None and (num_classes - split.init_cls) % split.increment:
        raise UserValueError(
            f"dataset {name!r}: {num_classes} classes do not split into a first task of {split.init_cls} and "
            f"tasks of {split.increment}"
        )
    if test_share is not None and not 0 < test_share < 1:
        raise UserValueError(f"dataset {name!r}: test_share must be above 0 and below 1, got {test_share!r}")

    def decorate(fn: Resolver) -> Resolver:
        spec = DatasetSpec(name, fn, num_classes, description, split, test_share)
        DATASETS.add(name, spec, description, module=fn.__module__, aliases=aliases)
        return fn

    return decorate


def _built_in(
    name: str,
    num_classes: int | None,
    description: str,
    split: Split | None,
    test_share: float | None = None,
    home: str = SOURCES,
) -> None:
    spec = DatasetSpec(name, f"{home}:{name}", num_classes, description, split, test_share)
    DATASETS.add(name, spec, description, module=__name__)


EUROSAT_TEST_SHARE = 0.2  # no test folder: a stratified share of each class, split by its source
IN_FOLDERS = "in train/ + test/ class folders"

# the paper's six benchmarks with its splits (method.md §2); EuroSAT and CIFAR-10 are not in the
# paper: tosca's B0 Inc2
_built_in(
    "eurosat",
    10,
    f"EuroSAT RGB, 27,000 64x64 images; stratified {100 - round(100 * EUROSAT_TEST_SHARE)}/"
    f"{round(100 * EUROSAT_TEST_SHARE)} split made here",
    Split(2, 2, paper=False),
    EUROSAT_TEST_SHARE,
)
_built_in(
    "cifar10",
    10,
    "CIFAR-10: torchvision format or train/<class>/ test/<class>/ folders",
    Split(2, 2, paper=False),
)
_built_in(
    "cifar100", 100, "CIFAR-100: torchvision format or train/<class>/ test/<class>/ folders", Split(5, 5)
)
_built_in(
    "imagefolder", None, "any train/<class>/ + test/<class>/ (or val/) tree, or an archive of one", None
)
_built_in("cub200", 200, f"CUB-200-2011 {IN_FOLDERS}", Split(10, 10))
_built_in("imagenet_r", 200, f"ImageNet-R (200 classes) {IN_FOLDERS}", Split(20, 20))
_built_in("imagenet_a", 200, f"ImageNet-A (200 classes) {IN_FOLDERS}", Split(20, 20))
_built_in("omnibenchmark", 300, f"OmniBenchmark-300 {IN_FOLDERS}", Split(30, 30))
_built_in("vtab", 50, f"VTAB-50 (the paper's 5x10-class subset) {IN_FOLDERS}", Split(10, 10))

# datasets with domains (`tosca_foundation.dataset_domains`; the `dil` scenario): their sources in
# featcache.sources.domain_datasets; the class split is the one class-incremental reading tosca gives them
DOMAIN_SOURCES = "featcache.sources.domain_datasets"
_built_in(
    "core50",
    50,
    "CORe50 (128x128): 50 objects, 11 sessions (domains)",
    Split(10, 10, paper=False),
    home=DOMAIN_SOURCES,
)
_built_in(
    "domainnet",
    345,
    "DomainNet: 345 classes, 6 domains, official lists",
    Split(45, 30, paper=False),
    home=DOMAIN_SOURCES,
)
_built_in(
    "cddb_hard",
    2,
    "CDDB-Hard: real/fake, 5 generator tasks (domains)",
    Split(1, 1, paper=False),
    home=DOMAIN_SOURCES,
)
_built_in(
    "cifar100_superclasses",
    20,
    "CIFAR-100 labelled by its 20 superclasses; the fine class is the domain",
    Split(4, 4, paper=False),
    home=DOMAIN_SOURCES,
)
