"""Filtering is said, never silent: one rule (featcache.sources.listing) decides which files of a folder are
images to use, for `extract` and `predict` alike; what it leaves out is counted by reason, recorded
in the store and shown by `extract` and `cache info`."""

from __future__ import annotations

import os
import shutil
import stat
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from support.images import FAST_CNN, make_image_tree
from typer.testing import CliRunner

from cli import app
from featcache.sources.datasets import load_dataset
from featcache.sources.listing import image_files
from featcache.store import FeatureStore
from featcache.store.left_out import (
    HIDDEN,
    LINK_INSIDE,
    LINK_OUTSIDE,
    NOT_A_FILE,
    NOT_AN_IMAGE,
    REACHED_TWICE,
    LeftOut,
)
from tosca_foundation.errors import UserError

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
    os.symlink(folder / "a.png", folder / "linked.png")  # the same file twice: used once
    os.symlink(folder / "sub", folder / "sub" / "loop")  # a cycle: walked once
    os.symlink(tmp_path, folder / "sub" / "up")  # a folder holding the one listed: never walked
    os.symlink("sub", folder / "a_sub")  # listed before sub/: its image is still used as sub/b.JPG
    left_out = LeftOut()
    found = [str(p.relative_to(folder)) for p in image_files(folder, left_out)]
    assert found == ["_kept/c.png", "a.png", "sub/b.JPG"]
    assert dict(left_out.counts) == {HIDDEN: 3, NOT_AN_IMAGE: 1, REACHED_TWICE: 3, LINK_INSIDE: 1}
    assert left_out.summary().startswith("3 hidden files or folders, 1 link to elsewhere in the data folder")


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
    said = (
        "note: left out 2 hidden files or folders, 1 file that is not an image (listed by `tosca cache info`)"
    )
    assert said in " ".join(output.split()), output
    dataset = FeatureStore.open(store).identity["dataset"]
    assert dataset["class_names"] == ["_underscore", "class_1", "class_2"]  # an underscore is a class
    assert dataset["samples"] == {"train": 6, "test": 3}  # the hidden folder's image is not used
    code, info = _run("cache", "info", store)
    said = "left out 2 hidden files or folders (e.g. .DS_Store, .cache); 1 file that is not an image (e.g. README.txt)"
    assert said in " ".join(info.split()), info


def test_devices_and_fifos_in_a_tar_are_counted_as_left_out(tmp_path: Path) -> None:
    """Issue 57, point 10: a character-device member of a tar was dropped while `cache info` said
    it left out nothing. A character device, a block device and a fifo, each in a class folder,
    are never made (nothing an image dataset holds) and each is counted, by name, in the store."""
    tree = make_image_tree(tmp_path / "src" / "data", classes=2, train=2, test=1)
    archive = tmp_path / "data.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(tree, arcname="data")
        for name, kind in (("null", tarfile.CHRTYPE), ("disk", tarfile.BLKTYPE), ("pipe", tarfile.FIFOTYPE)):
            member = tarfile.TarInfo(f"data/train/class_0/{name}.png")
            member.type, member.devmajor, member.devminor = kind, 1, 3
            tar.addfile(member)
    store = tmp_path / "s.zarr"
    code, output = _extract(archive, store)
    assert code == 0, output
    assert "3 entries that are not regular files (broken links, pipes, devices)" in " ".join(output.split())
    assert FeatureStore.open(store).identity["dataset"]["samples"]["train"] == 4  # the images alone
    code, info = _run("cache", "info", store)
    said = " ".join(info.split())
    assert "left out 3 entries that are not regular files" in said and "null.png" in said, info


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
    assert "2 files or folders reached a second time" in " ".join(output.split())
    assert FeatureStore.open(store).identity["dataset"]["samples"]["train"] == 4  # hard and soft: once each


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


# ---------------------------------------------------------------- links never relabel nor leak


def _clean_ids(tmp_path: Path) -> dict[str, list[str]]:
    """The samples of the untouched tree (each test below plants links into a copy of it)."""
    source = load_dataset(
        "imagefolder", make_image_tree(tmp_path / "clean", classes=3, train=4, test=2), tmp_path
    )
    return {split: list(samples.ids) for split, samples in source.splits.items()}


def _listed(tree: Path, tmp_path: Path) -> tuple[dict[str, list[str]], LeftOut]:
    source = load_dataset("imagefolder", tree, tmp_path / "cache")
    for samples in source.splits.values():  # every image carries the label of the folder it lies in
        assert [source.class_names[label] for label in samples.labels] == [
            i.split("/")[1] for i in samples.ids
        ]
    return {split: list(samples.ids) for split, samples in source.splits.items()}, source.left_out


def test_a_link_never_relabels_an_image_nor_puts_a_training_image_into_test(tmp_path: Path) -> None:
    tree = make_image_tree(tmp_path / "imgs", classes=3, train=4, test=2)
    (tree / "train" / "class_0" / "back").symlink_to("../../train")  # every class again, as class_0
    (tree / "train" / "class_1" / "up").symlink_to("../..")  # the whole data folder
    for i in range(2):  # training images as test images
        (tree / "test" / "class_1" / f"leak_{i}.png").symlink_to(f"../../train/class_1/img_00{i}.png")
    (tree / "test" / "class_2" / "other.png").symlink_to("../class_0/img_000.png")  # another class
    (tree / "train" / "class_2" / "again.png").symlink_to("img_000.png")  # one file twice in a class
    ids, left_out = _listed(tree, tmp_path)
    assert ids == _clean_ids(tmp_path)  # exactly the images of the tree without the links
    assert dict(left_out.counts) == {LINK_INSIDE: 5, REACHED_TWICE: 1}


def test_extract_and_cache_info_say_the_links_left_out(tmp_path: Path) -> None:
    tree = make_image_tree(tmp_path / "imgs", classes=3, train=4, test=2)
    (tree / "train" / "class_0" / "back").symlink_to("../../train")
    (tree / "test" / "class_1" / "leak.png").symlink_to("../../train/class_1/img_000.png")
    store = tmp_path / "s.zarr"
    code, output = _extract(tree, store)
    assert code == 0, output
    said = " ".join(output.split())
    plan, note = output.splitlines()[:2]  # the plan, then what the listing left out
    assert plan.startswith("extract: ") and note.startswith(
        "note: left out 2 links to elsewhere in the data folder"
    )
    assert "(an image counts only in its own class folder) (listed by `tosca cache info`)" in said
    assert FeatureStore.open(store).identity["dataset"]["samples"] == {"train": 12, "test": 6}
    code, info = _run("cache", "info", store)
    assert (
        "left out 2 links to elsewhere in the data folder (an image counts only in its own class folder) "
        "(e.g. back, leak.png)" in " ".join(info.split())
    ), info


@pytest.mark.parametrize(
    ("plant", "said"),
    [
        (
            lambda t, pool: os.link(t / "train/class_0/img_000.png", t / "test/class_0/hard.png"),
            "in train/class_0 and test/class_0: a test image that is also a training image makes the test "
            "figure wrong",
        ),
        (
            lambda t, pool: os.link(t / "train/class_0/img_000.png", t / "train/class_1/hard.png"),
            "in train/class_0 and train/class_1: an image under two classes would carry two labels",
        ),
        (
            lambda t, pool: (
                shutil.rmtree(t / "train/class_2"),
                (t / "train/class_2").symlink_to("../test/class_2"),
            ),
            "in train/class_2 and test/class_2: a test image that is also a training image",
        ),
        (
            lambda t, pool: (
                (t / "train/class_0/p.png").symlink_to(pool),
                (t / "test/class_1/p.png").symlink_to(pool),
            ),
            "train/class_0/p.png and ",
        ),
    ],
    ids=["hard link train-test", "hard link two classes", "class folder linked to test", "two links out"],
)
def test_one_file_in_two_class_folders_or_both_splits_is_refused(
    tmp_path: Path, plant: Any, said: str
) -> None:
    tree = make_image_tree(tmp_path / "imgs", classes=3, train=4, test=2)
    pool = tmp_path / "pool.png"
    Image.new("RGB", (40, 40)).save(pool)
    plant(tree, pool)
    with pytest.raises(UserError, match="are one file") as refused:
        load_dataset("imagefolder", tree, tmp_path / "cache")
    assert said in str(refused.value) and "keep one copy" in str(refused.value)


def test_links_out_of_the_data_folder_are_followed_and_unlucky_entries_counted(tmp_path: Path) -> None:
    tree = make_image_tree(tmp_path / "imgs", classes=3, train=4, test=2)
    pool = tmp_path / "pool"
    pool.mkdir()
    for name in ("a.png", "b.png", "c.png"):
        Image.new("RGB", (40, 40)).save(tmp_path / name if name == "c.png" else pool / name)
    (tree / "train" / "class_0" / "shared").symlink_to(pool)  # a folder of images kept elsewhere
    (tree / "test" / "class_1" / "c.png").symlink_to(tmp_path / "c.png")
    (tree / "train" / "class_1" / "everything").symlink_to("/")  # holds the data folder: never walked
    (tree / "train" / "class_2" / "dangling.png").symlink_to("nowhere.png")
    (tree / "train" / "class_2" / "loop.png").symlink_to("loop.png")
    os.mkfifo(tree / "train" / "class_2" / "fifo.png")
    (tree / "test" / "class_2" / "null.png").symlink_to("/dev/null")
    ids, left_out = _listed(tree, tmp_path)
    assert len(ids["train"]) == 12 + 2 and "train/class_0/shared/a.png" in ids["train"]
    assert len(ids["test"]) == 6 + 1 and "test/class_1/c.png" in ids["test"]
    assert dict(left_out.counts) == {LINK_INSIDE: 1, NOT_A_FILE: 4}
    with pytest.raises(UserError, match="are one file"):  # and the pool's c.png in train too: refused
        (tree / "train" / "class_1" / "c.png").symlink_to(tmp_path / "c.png")
        load_dataset("imagefolder", tree, tmp_path / "cache")


def test_links_in_archives_follow_the_folder_rule(tmp_path: Path) -> None:
    tree = make_image_tree(tmp_path / "src" / "data", classes=3, train=4, test=2)
    (tree / "train" / "class_0" / "back").symlink_to("../../train")
    (tree / "test" / "class_1" / "leak.png").symlink_to("../../train/class_1/img_000.png")
    archive = tmp_path / "data.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tree, arcname="data")
    ids, left_out = _listed(archive, tmp_path)
    assert ids == _clean_ids(tmp_path)
    assert dict(left_out.counts) == {LINK_INSIDE: 2}
    # a zip keeps links as members with a link's mode (zip -y): made as links, under the same rule
    zipped = tmp_path / "data.zip"
    with zipfile.ZipFile(zipped, "w") as zf:
        for path in sorted(tree.rglob("*")):
            if path.is_file() and not path.is_symlink():
                zf.write(path, f"data/{path.relative_to(tree)}")
        for name, target in (
            ("train/class_2/again.png", "img_000.png"),  # the same file twice in its class
            ("test/class_2/leak.png", "../../train/class_2/img_001.png"),  # a training image
            ("train/class_0/passwd.png", "/etc/passwd"),  # out of the archive
        ):
            info = zipfile.ZipInfo(f"data/{name}")
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, target)
    ids, left_out = _listed(zipped, tmp_path)
    assert ids == _clean_ids(tmp_path)
    assert dict(left_out.counts) == {REACHED_TWICE: 1, LINK_INSIDE: 1, LINK_OUTSIDE: 1}


def test_folders_nested_deeper_than_python_recurses_are_listed(tmp_path: Path, monkeypatch: Any) -> None:
    depth = 1500  # over Python's recursion limit (1,000); a path of 3,000 bytes stays under 4,096
    deep = tmp_path / "f"
    deep.mkdir()
    monkeypatch.chdir(deep)  # then one level at a time (put back when the test ends)
    try:
        for _ in range(depth):
            os.mkdir("d")
            os.chdir("d")
        Image.new("RGB", (8, 8)).save("x.png")
        os.chdir(tmp_path)
        found = image_files(Path("f"), LeftOut())
        assert len(found) == 1 and len(found[0].parts) == depth + 2
    finally:  # removed here, level by level: shutil.rmtree (pytest's clean-up) recurses
        os.chdir(deep)
        levels = 0
        while os.path.isdir("d"):
            os.chdir("d")
            levels += 1
        for name in os.listdir("."):
            os.remove(name)
        for _ in range(levels):
            os.chdir("..")
            os.rmdir("d")


@pytest.mark.parametrize("target", ["/", "..", "../.."])
def test_a_class_folder_linked_to_a_folder_holding_the_data_is_refused(tmp_path: Path, target: str) -> None:
    """Walked, it would list every class (or the whole disk, /proc included) as one class."""
    tree = make_image_tree(tmp_path / "imgs", classes=3, train=4, test=2)
    shutil.rmtree(tree / "test" / "class_2")
    (tree / "test" / "class_2").symlink_to(target)
    with pytest.raises(UserError, match=r"which holds .* a class folder must hold its own images"):
        load_dataset("imagefolder", tree, tmp_path / "cache")
