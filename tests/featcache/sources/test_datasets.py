"""Datasets resolve folders and archives into deterministic, recorded sample lists."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from featcache.sources.datasets import DATASETS, EUROSAT_CLASSES, load_dataset
from tosca_foundation.errors import UserError


def _fake_eurosat(root: Path, per_class: int = 10) -> Path:
    for name in EUROSAT_CLASSES:
        folder = root / "2750" / name
        folder.mkdir(parents=True)
        for i in range(per_class):
            Image.new("RGB", (64, 64), (i, 0, 0)).save(folder / f"{name}_{i + 1}.jpg")
    return root


def test_registry_has_the_papers_datasets() -> None:
    for name in (
        "eurosat",
        "cifar10",
        "cifar100",
        "imagefolder",
        "cub200",
        "imagenet_r",
        "imagenet_a",
        "omnibenchmark",
        "vtab",
    ):
        assert name in DATASETS


def test_eurosat_split_is_stratified_deterministic_and_recorded(tmp_path: Path) -> None:
    root = _fake_eurosat(tmp_path / "eurosat")
    a = load_dataset("eurosat", root, tmp_path / "cache")
    b = load_dataset("eurosat", root / "2750", tmp_path / "cache")
    assert a.splits["train"].ids == b.splits["train"].ids
    assert len(a.splits["train"]) == 80 and len(a.splits["test"]) == 20
    assert np.bincount(a.splits["test"].labels).tolist() == [2] * 10
    assert not set(a.splits["train"].ids) & set(a.splits["test"].ids)
    assert "80%/20%" in a.attrs()["split_rule"] and a.attrs()["class_names"] == EUROSAT_CLASSES


@pytest.mark.parametrize("suffix", [".tar.gz", ".zip"])
def test_archive_is_unpacked_once(tmp_path: Path, image_tree: Path, suffix: str) -> None:
    archive = tmp_path / f"imgs{suffix}"
    if suffix == ".zip":
        import shutil

        shutil.make_archive(str(archive)[: -len(suffix)], "zip", image_tree.parent, image_tree.name)
    else:
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(image_tree, arcname="top")
    first = load_dataset("imagefolder", archive, tmp_path / "cache")
    marker = next((tmp_path / "cache" / "_unpacked").glob("*/.unpacked"))
    stamp = marker.stat().st_mtime_ns
    second = load_dataset("imagefolder", archive, tmp_path / "cache")
    assert marker.stat().st_mtime_ns == stamp
    assert first.splits["train"].ids == second.splits["train"].ids and len(first.splits["train"]) == 12
    assert first.source_sha256 is not None and len(first.source_sha256) == 64
    marker.write_text(json.dumps({"sha256": first.source_sha256}) + "\n")  # a pre-release mark
    third = load_dataset("imagefolder", archive, tmp_path / "cache")  # unpacked again, counted again
    assert marker.stat().st_mtime_ns != stamp and "left_out" in json.loads(marker.read_text())
    assert third.splits["train"].ids == first.splits["train"].ids


def test_limit_per_class_keeps_first_n_of_each_class(image_tree: Path) -> None:
    source = load_dataset("imagefolder", image_tree, image_tree.parent / "c", limit=2)
    assert np.bincount(source.splits["train"].labels).tolist() == [2, 2, 2]
    assert source.attrs()["limit_per_class"] == 2
    with pytest.raises(UserError, match="at least 1"):
        load_dataset("imagefolder", image_tree, image_tree.parent / "c", limit=0)


def test_paper_datasets_check_their_class_count(image_tree: Path) -> None:
    with pytest.raises(UserError, match="expects 200 class folders"):
        load_dataset("cub200", image_tree, image_tree.parent / "c")
    with pytest.raises(UserError, match="needs --data-root"):
        load_dataset("imagenet_r", None, image_tree.parent / "c")
