"""Filtering is said, never silent: one rule (featcache.sources.listing) decides which files of a folder are
images to use, for `extract` and `predict` alike; what it leaves out is counted by reason, recorded
in the store and shown by `extract` and `cache info`."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

from PIL import Image
from support.images import FAST_CNN, make_image_tree
from typer.testing import CliRunner

from cli import app
from featcache.sources.listing import image_files
from featcache.store import FeatureStore
from featcache.store.left_out import HIDDEN, NOT_AN_IMAGE, LeftOut

runner = CliRunner()


def _run(*args: object) -> tuple[int, str]:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, result.output


def _extract(root: Path, store: Path) -> tuple[int, str]:
    return _run(
        *("extract", "--model", FAST_CNN, "--dataset", "imagefolder", "--data-root", root),
        *("--store", store, "--cache-dir", store.parent / "cache", "--random-init", "--workers", "0"),
        *("--device", "cpu"),
    )


def test_the_rule(tmp_path: Path) -> None:
    folder = tmp_path / "f"
    (folder / "sub" / ".thumbs").mkdir(parents=True)
    (folder / "__MACOSX").mkdir()
    (folder / "_kept").mkdir()
    for path in ("a.png", "sub/b.JPG", "_kept/c.png", "sub/.thumbs/d.png", "__MACOSX/._a.png", "._e.png"):
        Image.new("RGB", (8, 8)).save(folder / path, format="PNG")
    (folder / "notes.txt").write_text("not an image")
    os.symlink(folder / "a.png", folder / "linked.png")
    os.symlink(folder / "sub", folder / "sub" / "loop")  # a cycle: walked once
    left_out = LeftOut()
    found = [str(p.relative_to(folder)) for p in image_files(folder, left_out)]
    assert found == ["_kept/c.png", "a.png", "linked.png", "sub/b.JPG"]
    assert dict(left_out.counts) == {HIDDEN: 3, NOT_AN_IMAGE: 1}
    assert left_out.summary() == "3 hidden files or folders, 1 file that is not an image"


def test_extract_says_what_it_left_out_and_cache_info_counts_it(tmp_path: Path) -> None:
    tree = make_image_tree(tmp_path / "imgs", classes=3, train=2, test=1)
    (tree / "train" / "class_0").rename(tree / "train" / "_underscore")
    (tree / "test" / "class_0").rename(tree / "test" / "_underscore")
    hidden = tree / "train" / "class_1" / ".cache"
    hidden.mkdir()
    Image.new("RGB", (40, 40)).save(hidden / "thumb.png")
    (tree / "train" / "class_1" / "README.txt").write_text("hello")
    (tree / "train" / ".DS_Store").write_bytes(b"\0")
    store = tmp_path / "s.zarr"
    code, output = _extract(tree, store)
    assert code == 0, output
    said = "note: left out 2 hidden files or folders, 1 file that is not an image (hidden, macOS metadata"
    assert said in " ".join(output.split()), output
    dataset = FeatureStore.open(store).identity["dataset"]
    assert dataset["class_names"] == ["_underscore", "class_1", "class_2"]  # an underscore is a class
    assert dataset["samples"] == {"train": 6, "test": 3}  # the hidden folder's image is not used
    code, info = _run("cache", "info", store)
    said = "left out 2 hidden files or folders (e.g. .DS_Store, .cache); 1 file that is not an image (e.g. README.txt)"
    assert said in " ".join(info.split()), info


def test_links_in_an_archive_are_kept_inside_it_and_counted_outside(tmp_path: Path) -> None:
    tree = make_image_tree(tmp_path / "src" / "data", classes=2, train=2, test=1)
    cls = tree / "train" / "class_0"
    os.link(cls / "img_000.png", cls / "hard.png")
    os.symlink("img_001.png", cls / "soft.png")
    os.symlink("/etc/hostname", cls / "outside.png")
    archive = tmp_path / "data.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(tree, arcname="data")
    store = tmp_path / "s.zarr"
    code, output = _extract(archive, store)
    assert code == 0, output
    assert "1 link pointing outside the archive" in " ".join(output.split())
    assert FeatureStore.open(store).identity["dataset"]["samples"]["train"] == 6  # 4 + hard + soft


def test_predict_leaves_out_what_extract_leaves_out(tmp_path: Path) -> None:
    tree = make_image_tree(tmp_path / "imgs", classes=2, train=3, test=1)
    store = tmp_path / "s.zarr"
    assert _extract(tree, store)[0] == 0
    run = tmp_path / "run"
    split = ("--init-cls", "1", "--increment", "1")  # 2 classes have no default split
    code, output = _run("fit", "--store", store, "--run", run, "--device", "cpu", "--epochs", "1", *split)
    assert code == 0, output
    new = make_image_tree(tmp_path / "new", classes=1, train=2, test=0)
    (new / "train" / "class_0" / "._img_000.png").write_bytes(b"\0\x05\x16\x07 AppleDouble")
    code, output = _run("predict", run, new, "--device", "cpu", "--json")
    assert code == 0, output
    assert "note: left out 1 hidden file or folder (the rule of `tosca extract`)" in " ".join(output.split())
