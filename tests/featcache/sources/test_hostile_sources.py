"""Files and folders that are not what tosca expects, in the places it reads and writes: each is
refused in one line (exit 2) and nothing that tosca did not make is changed or deleted."""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import zipfile
from pathlib import Path

import pytest
from support.images import TINY_VIT, make_image_tree
from support.stores import synthetic_store
from typer.testing import CliRunner

from cli import app
from featcache.foundation import limits

runner = CliRunner()
EXTRACT = [
    "extract",
    "-m",
    TINY_VIT,
    "-d",
    "imagefolder",
    "--random-init",
    "--device",
    "cpu",
    "--workers",
    "0",
]


def _refused(args: list[str], said: str) -> None:
    result = runner.invoke(app, [str(a) for a in args])
    lines = [
        line for line in result.output.strip().splitlines() if not line.startswith("warning: random-init")
    ]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert said in lines[0], lines[0]


def test_a_file_named_like_the_lock_is_neither_rewritten_nor_deleted(tmp_path: Path) -> None:
    images = make_image_tree(tmp_path / "img", classes=2, train=1, test=1)
    (tmp_path / "out").mkdir()
    notes = tmp_path / "out" / "feat.zarr.lock"
    notes.write_text("my notes\n")
    _refused(
        [*EXTRACT, "--data-root", images, "--store", tmp_path / "out" / "feat.zarr"],
        "was not written by tosca",
    )
    assert notes.read_text() == "my notes\n"
    notes.unlink()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep\n")
    notes.symlink_to(victim)  # in a shared folder: someone's link to a file of ours
    _refused(
        [*EXTRACT, "--data-root", images, "--store", tmp_path / "out" / "feat.zarr"], "is a symbolic link"
    )
    assert victim.read_text() == "keep\n" and notes.is_symlink()


def test_a_folder_named_like_a_half_made_store_is_not_deleted(tmp_path: Path) -> None:
    images = make_image_tree(tmp_path / "img", classes=2, train=1, test=1)
    for leftover in ("feat.zarr.creating", "feat.zarr.replaced"):
        mine = tmp_path / "out" / leftover
        mine.mkdir(parents=True)
        (mine / "keep.txt").write_text("mine")
        _refused([*EXTRACT, "--data-root", images, "--store", tmp_path / "out" / "feat.zarr"], "move it away")
        assert (mine / "keep.txt").read_text() == "mine"
        shutil.rmtree(mine)


def test_names_that_are_not_utf8_are_refused_naming_them(tmp_path: Path) -> None:
    images = make_image_tree(tmp_path / "img", classes=2, train=1, test=1)
    raw = os.fsencode(images / "train" / "class_0") + b"/\xff\xfe.png"
    shutil.copy(images / "train" / "class_0" / "img_000.png", os.fsdecode(raw))
    _refused(
        [*EXTRACT, "--data-root", images, "--cache-dir", tmp_path / "c"],
        r"\xff\xfe.png has a name that is not valid UTF-8",
    )
    os.unlink(raw)
    os.rename(images / "test" / "class_1", os.fsdecode(os.fsencode(images / "test") + b"/\xe9x"))
    _refused(
        [*EXTRACT, "--data-root", images, "--cache-dir", tmp_path / "c"],
        r"\xe9x has a name that is not valid UTF-8",
    )


def _zip_of(tree: Path, path: Path) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for file in sorted(tree.rglob("*.png")):
            zf.write(file, f"ds/{file.relative_to(tree)}")
    return path


def test_archives_that_cannot_be_read_whole_are_refused(tmp_path: Path) -> None:
    images = make_image_tree(tmp_path / "img", classes=2, train=2, test=1)
    encrypted = _zip_of(images, tmp_path / "enc.zip")
    data = bytearray(encrypted.read_bytes())
    at = 0
    while (at := data.find(b"PK\x03\x04", at)) >= 0:  # the encryption bit of every local header
        data[at + 6] |= 1
        at += 4
    at = 0
    while (at := data.find(b"PK\x01\x02", at)) >= 0:  # and of the central directory's entries
        data[at + 8] |= 1
        at += 4
    encrypted.write_bytes(bytes(data))
    _refused([*EXTRACT, "--data-root", encrypted, "--cache-dir", tmp_path / "c"], "password required")
    plain = tmp_path / "plain.tar"
    with tarfile.open(plain, "w") as tar:
        tar.add(images, arcname="ds")
    with tarfile.open(plain) as tar:
        members = tar.getmembers()
    damaged = bytearray(plain.read_bytes())
    header = members[-3].offset  # a header near the end: tarfile takes it for the archive's end
    damaged[header + 100 : header + 108] = b"garbage!"
    (tmp_path / "damaged.tar").write_bytes(bytes(damaged))
    _refused(
        [*EXTRACT, "--data-root", tmp_path / "damaged.tar", "--cache-dir", tmp_path / "c"],
        "the archive is not whole",
    )
    assert not (tmp_path / "c" / "_unpacked").exists() or not any(
        (tmp_path / "c" / "_unpacked").glob("damaged-*/.unpacked*")
    )


def test_two_dataset_trees_under_one_data_root_are_refused(tmp_path: Path) -> None:
    make_image_tree(tmp_path / "data" / "old", classes=2, train=1, test=1)
    make_image_tree(tmp_path / "data" / "new", classes=2, train=1, test=1)
    _refused(
        [*EXTRACT, "--data-root", tmp_path / "data", "--cache-dir", tmp_path / "c"],
        "more than one train/ + test/ tree",
    )


@pytest.mark.parametrize(
    ("array", "edit", "said"),
    [
        ("train/features", lambda m: "{bad", "unreadable array metadata (JSONDecodeError"),
        ("test/labels", lambda m: "{bad", "unreadable array metadata (JSONDecodeError"),
        (
            "train/done",
            lambda m: json.dumps({**m, "data_type": "foo"}),
            "unreadable array metadata (ValueError",
        ),
        ("train/features", lambda m: json.dumps({**m, "node_type": "group"}), "unreadable array metadata"),
        (
            "train/features",
            lambda m: json.dumps(
                {**m, "chunk_grid": {**m["chunk_grid"], "configuration": {"chunk_shape": [0, 32]}}}
            ),
            "records chunks of no length",
        ),
    ],
)
def test_damaged_array_metadata_is_one_line_in_every_cache_command(
    tmp_path: Path, array: str, edit: object, said: str
) -> None:
    store = synthetic_store(tmp_path / "cache" / "s.zarr").path
    meta = store / array / "zarr.json"
    meta.write_text(edit(json.loads(meta.read_text())))  # type: ignore[operator]
    for command in (
        ["cache", "info", store],
        ["cache", "verify", store],
        ["fit", "--store", store, "--device", "cpu"],
    ):
        _refused(command, said)
    listed = runner.invoke(app, ["cache", "ls", "--cache-dir", str(tmp_path / "cache")])
    assert listed.exit_code == 0 and "unreadable" in listed.output


def test_cache_ls_lists_a_store_whose_zarr_json_is_not_json_and_never_reads_a_fifo(tmp_path: Path) -> None:
    store = synthetic_store(tmp_path / "cache" / "s.zarr").path
    (store / "zarr.json").write_text("{not json")
    (tmp_path / "cache" / "pipe.zarr").mkdir()
    os.mkfifo(tmp_path / "cache" / "pipe.zarr" / "zarr.json")  # reading it would wait for a writer
    listed = runner.invoke(app, ["cache", "ls", "--cache-dir", str(tmp_path / "cache"), "--json"])
    assert listed.exit_code == 0, listed.output
    text = json.dumps(json.loads(listed.output))
    assert "s.zarr" in text and "unreadable" in text and "pipe.zarr" not in text


def test_a_memory_limit_that_is_not_a_number_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    for value in ("abc", "-1", "1e9", "0"):
        monkeypatch.setenv("TOSCA_MEMORY_LIMIT", value)
        with pytest.raises(limits.UserError, match="TOSCA_MEMORY_LIMIT"):
            limits.available_memory()
    monkeypatch.setenv("TOSCA_MEMORY_LIMIT", "1000000")
    assert limits.available_memory() <= 1_000_000
