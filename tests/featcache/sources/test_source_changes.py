"""A store knows where its images came from: the resolved data root and a fingerprint of the files
it used (ids, sizes, modification times; per chunk) are part of its identity, so another folder
with the same file names is refused instead of being served the first folder's features; one
archive is unpacked once, under a lock, while two extractions wait for each other."""

from __future__ import annotations

import os
import shutil
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image
from support.commands import said
from support.crash_harness import PauseAt, start
from support.images import FAST_CNN, make_image_tree
from typer.testing import CliRunner

from cli import app
from featcache.store import FeatureStore

runner = CliRunner()


def _extract(data_root: Path, cache: Path, *extra: str) -> tuple[int, list[str]]:
    result = runner.invoke(
        app,
        [
            *("extract", "--model", FAST_CNN, "--dataset", "imagefolder", "--data-root", str(data_root)),
            *("--cache-dir", str(cache), "--random-init", "--chunk-size", "4", "--workers", "0"),
            *("--device", "cpu", *extra),
        ],
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = said(result.output)  # (an extraction's plan line left out)
    return result.exit_code, lines


def _inverted_copy(src: Path, dst: Path) -> Path:
    for path in sorted(src.rglob("*.png")):
        target = dst / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(255 - np.asarray(Image.open(path))).save(target)
    return dst


def test_another_folder_with_the_same_file_names_is_refused(tmp_path: Path) -> None:
    first = make_image_tree(tmp_path / "A", classes=2, train=3, test=1)
    second = _inverted_copy(first, tmp_path / "B")
    cache = tmp_path / "cache"
    assert _extract(first, cache)[0] == 0
    store = cache / "imagefolder" / f"{FAST_CNN}.zarr"
    dataset = FeatureStore.open(store).identity["dataset"]
    assert dataset["data_root"] == str(first.resolve()) and len(dataset["files_sha256"]) == 64
    code, lines = _extract(second, cache)
    assert code == 2 and len(lines) == 1, lines
    assert f"store {store} was made with another configuration (dataset.data_root: " in lines[0]
    assert "pass --overwrite to replace it or --store PATH for a new one" in lines[0]
    info = runner.invoke(app, ["cache", "info", str(store)]).output
    row = next(line for line in info.splitlines() if line.startswith("data root"))
    assert f"{first.resolve()} (files fingerprint" in row, row


def test_images_replaced_in_place_are_found_chunk_by_chunk(tmp_path: Path) -> None:
    tree = make_image_tree(tmp_path / "imgs", classes=2, train=4, test=2)  # train chunks: 2 of 4
    cache = tmp_path / "cache"
    store = cache / "imagefolder" / f"{FAST_CNN}.zarr"
    assert _extract(tree, cache)[0] == 0
    features = FeatureStore.open(store).features("train").copy()
    # a finished chunk's image replaced under the same name: refused, naming the chunk and the file
    replaced = tree / "train" / "class_0" / "img_001.png"
    Image.fromarray(255 - np.asarray(Image.open(replaced))).save(replaced)
    code, lines = _extract(tree, cache)
    assert code == 2 and len(lines) == 1, lines
    first = tree / "train" / "class_0" / "img_000.png"
    assert (
        f"store {store} was made from other images: a file of its train chunk 0 (4 files, {first} to "
        in lines[0]
    )
    # an image of a chunk not yet computed (a broken file replaced before the rerun) is fine
    (tree / "train" / "class_0" / "img_001.png").touch()
    code, lines = _extract(tree, cache, "--overwrite")
    assert code == 0, lines
    FeatureStore.open(store, mode="r+").mark_undone("train", [1])
    fixed = tree / "train" / "class_1" / "img_000.png"  # row 4: the first of train chunk 1
    os.utime(fixed, (1_000_000_000, 1_000_000_000))
    code, lines = _extract(tree, cache)
    assert code == 0 and any("1 computed, 2 already done" in line for line in lines), lines
    assert not np.array_equal(FeatureStore.open(store).features("train"), features)  # img_001 inverted
    assert FeatureStore.open(store).identity["dataset"]["files_sha256"] != ""


def test_a_store_made_before_the_first_release_is_neither_extended_nor_read(tmp_path: Path) -> None:
    """tosca 0.1's stores kept no record of the files each chunk came from (no sources arrays):
    such a store is refused in one line by `extract` and by stage 2 alike."""
    tree = make_image_tree(tmp_path / "imgs", classes=2, train=2, test=1)
    cache = tmp_path / "cache"
    assert _extract(tree, cache)[0] == 0
    store = cache / "imagefolder" / f"{FAST_CNN}.zarr"
    for split in ("train", "test"):
        shutil.rmtree(store / split / "sources")
    said = (
        f"error: store {store} has no train/sources: it was written before tosca's first release (or edited "
        "by hand); re-extract it with --overwrite"
    )
    assert _extract(tree, cache) == (2, [said])
    fit = ["fit", "--store", str(store), "--run", str(tmp_path / "run"), "--device", "cpu", "--epochs", "1"]
    result = runner.invoke(app, [*fit, "--init-cls", "1", "--increment", "1"])
    assert result.exit_code == 2 and result.output.strip() == said, result.output
    assert not (tmp_path / "run").exists()


def _archive(tmp_path: Path) -> Path:
    tree = make_image_tree(tmp_path / "src" / "data", classes=2, train=6, test=2)
    archive = tmp_path / "data.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tree, arcname="data")
    return archive


def _cli_args(archive: Path, cache: Path, store: Path) -> list[str]:
    return [
        *("extract", "--model", FAST_CNN, "--dataset", "imagefolder", "--data-root", str(archive)),
        *("--cache-dir", str(cache), "--store", str(store), "--random-init", "--workers", "0"),
        *("--device", "cpu"),
    ]


def test_two_extractions_of_one_archive_unpack_it_once(tmp_path: Path) -> None:
    """The first pauses half-way through unpacking (holding the archive's lock); the second, started
    then, says it waits; both finish, from one unpacked folder, with the same features."""
    archive, cache = _archive(tmp_path), tmp_path / "cache"
    first = start(
        _cli_args(archive, cache, tmp_path / "one.zarr"),
        tmp_path / "first",
        PauseAt(function="featcache.sources.archives:_unpack_tar", resumable=True),
    )
    first.wait_paused()
    second = start(_cli_args(archive, cache, tmp_path / "two.zarr"), tmp_path / "second")
    second.wait_for("stderr", "is unpacking this archive")
    first.resume()
    assert first.finish() == 0, first.text("stderr")
    assert second.finish() == 0, second.text("stderr")
    assert [p.name for p in (cache / "_unpacked").iterdir() if p.is_dir()] == [
        next(p.name for p in (cache / "_unpacked").iterdir() if p.is_dir() and not p.name.endswith(".lock"))
    ]
    one, two = FeatureStore.open(tmp_path / "one.zarr"), FeatureStore.open(tmp_path / "two.zarr")
    for split in ("train", "test"):
        np.testing.assert_array_equal(one.features(split), two.features(split))


def test_of_two_extractions_into_one_store_the_first_started_finishes(tmp_path: Path) -> None:
    """First come, first served: the store is claimed (its lock taken) before the archive is
    unpacked, so a second extraction into the same store, started while the first unpacks (with
    another --limit-per-class), is refused in one line naming the first, which then finishes."""
    archive, cache, store = _archive(tmp_path), tmp_path / "cache", tmp_path / "one.zarr"
    first = start(
        _cli_args(archive, cache, store),
        tmp_path / "first",
        PauseAt(function="featcache.sources.archives:_unpack_tar", resumable=True),
    )
    first.wait_paused()
    second = start([*_cli_args(archive, cache, store), "--limit-per-class", "3"], tmp_path / "second")
    assert second.finish() == 2
    lines = [line for line in second.text("stderr").splitlines() if not line.startswith("warning:")]
    assert len(lines) == 1 and lines[0].startswith(f"error: store {store} is being written by another tosca")
    assert f"(pid {first.process.pid} on " in lines[0]
    first.resume()
    assert first.finish() == 0, first.text("stderr")
    assert FeatureStore.open(store).is_complete()
    assert FeatureStore.open(store).identity["dataset"]["limit_per_class"] is None


def test_a_killed_unpacking_leaves_nothing_that_looks_finished(tmp_path: Path) -> None:
    archive, cache = _archive(tmp_path), tmp_path / "cache"
    args = _cli_args(archive, cache, tmp_path / "one.zarr")
    killed = start(args, tmp_path / "killed", PauseAt(function="featcache.sources.archives:_unpack_tar"))
    killed.wait_paused()
    killed.kill()
    code, lines = _extract(archive, cache, "--store", str(tmp_path / "one.zarr"))
    assert code == 0, lines
    assert not list((cache / "_unpacked").glob("*.partial*"))
