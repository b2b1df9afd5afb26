"""The datasets with domains read from tiny made-up folders of their released layouts (no
internet): their splits, classes and each image's domain in the standard task order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from featcache.sources.domain_datasets import cddb_hard, cifar100_superclasses, core50, domainnet
from tosca_foundation.dataset_domains import CIFAR100_SUPERCLASSES, DOMAIN_RULES, domain_ids
from tosca_foundation.dataset_names import DATASETS
from tosca_foundation.errors import UserError


def _image(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (4, 4), (10, 20, 30)).save(path)


def test_core50_sessions_are_its_domains_and_split(tmp_path: Path) -> None:
    for session in (1, 2, 3, 11):
        for obj in (1, 50):
            _image(
                tmp_path / "core50_128x128" / f"s{session}" / f"o{obj}" / f"C_{session:02d}_{obj:02d}_000.png"
            )
    source = core50(tmp_path, tmp_path / "cache")
    train, test = source.splits["train"], source.splits["test"]
    assert len(source.class_names) == 50 and len(train) == 6 and len(test) == 2
    assert sorted(set(train.labels.tolist())) == [0, 49]
    assert domain_ids("core50", train.ids) == [
        0,
        0,
        1,
        1,
        7,
        7,
    ]  # s1, s2, s11: the 1st, 2nd, 8th training session
    assert domain_ids("core50", test.ids) == [8, 8]  # s3, the first test session


def test_domainnet_reads_the_official_lists(tmp_path: Path) -> None:
    for domain in ("clipart", "sketch"):
        for split, k in (("train", 0), ("test", 1)):
            lines = []
            for label, name in enumerate(("aircraft_carrier", "zebra")):
                image = f"{domain}/{name}/{domain}_{label}_{k}.jpg"
                _image(tmp_path / image)
                lines.append(f"{image} {label}")
            (tmp_path / f"{domain}_{split}.txt").write_text("\n".join(lines) + "\n")
    source = domainnet(tmp_path, tmp_path / "cache")
    assert source.class_names == ["aircraft_carrier", "zebra"]
    assert domain_ids("domainnet", source.splits["train"].ids) == [0, 0, 5, 5]
    assert source.splits["test"].labels.tolist() == [0, 1, 0, 1]


def test_domainnet_refuses_a_bad_list_line(tmp_path: Path) -> None:
    (tmp_path / "clipart_train.txt").write_text("clipart/a/x.jpg\n")
    with pytest.raises(UserError, match=r"clipart_train.txt line 1: expected 'path label'"):
        domainnet(tmp_path, tmp_path / "cache")


def test_cddb_hard_tasks_are_domains_val_is_test(tmp_path: Path) -> None:
    for task in DOMAIN_RULES["cddb_hard"].domains:
        for sub in ("train", "val"):
            _image(tmp_path / "CDDB" / task / sub / "0_real" / "a.png")
            _image(tmp_path / "CDDB" / task / sub / "cat" / "1_fake" / "b.png")  # biggan's sub-categories
    source = cddb_hard(tmp_path, tmp_path / "cache")
    assert source.class_names == ["real", "fake"]
    assert source.splits["train"].labels.tolist() == [0, 1] * 5
    assert domain_ids("cddb_hard", source.splits["test"].ids) == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]


def test_cddb_hard_refuses_a_missing_task(tmp_path: Path) -> None:
    _image(tmp_path / "gaugan" / "train" / "0_real" / "a.png")
    with pytest.raises(UserError, match=r"is not CDDB-Hard's layout: no task folder biggan"):
        cddb_hard(tmp_path, tmp_path / "cache")


def test_cifar100_superclasses_label_by_superclass_and_domain_by_fine_class(tmp_path: Path) -> None:
    fines = sorted(f for fs in CIFAR100_SUPERCLASSES.values() for f in fs)
    assert len(fines) == 100 == len(set(fines))
    for split in ("train", "test"):
        for fine in fines:
            _image(tmp_path / split / fine / "0001.jpg")
    source = cifar100_superclasses(tmp_path, tmp_path / "cache")
    train = source.splits["train"]
    assert len(source.class_names) == 20 and np.bincount(train.labels).tolist() == [5] * 20
    domains = domain_ids("cifar100_superclasses", train.ids)
    apple = next(i for i, image in enumerate(train.ids) if "/apple/" in image)
    sweet_pepper = next(i for i, image in enumerate(train.ids) if "/sweet_pepper/" in image)
    assert source.class_names[train.labels[apple]] == "fruit_and_vegetables"
    assert (domains[apple], domains[sweet_pepper]) == (0, 4)
    assert np.bincount(domains).tolist() == [20] * 5


def test_every_dataset_with_domains_is_registered() -> None:
    for name in DOMAIN_RULES:
        assert name in DATASETS


def test_an_image_of_no_domain_and_a_dataset_without_domains_are_one_line() -> None:
    with pytest.raises(UserError, match=r"^image 'x/y.png' of domainnet is in no domain"):
        domain_ids("domainnet", ["x/y.png"])
    with pytest.raises(UserError, match=r"^dataset 'cifar10' has no domains"):
        domain_ids("cifar10", ["a"])
