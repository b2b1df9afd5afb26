"""Files and folders that are not what tosca expects, in the places it reads and writes: each is
refused in one line (exit 2) and nothing that tosca did not make is changed or deleted."""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import warnings
import zipfile
from pathlib import Path

import pytest
from support.commands import invoke, refusal
from support.images import TINY_VIT, make_image_tree
from support.stores import synthetic_store
from typer.testing import CliRunner

from cli import app
from tosca_foundation import limits
from tosca_foundation.errors import UserError

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


def _refused(args: list[str], expected: str) -> None:
    refusal(*invoke(*args, drop="warning: random-init"), expected)


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


def test_predict_refuses_a_name_that_is_not_utf8_named_directly_or_through_its_folder(tmp_path: Path) -> None:
    """`tosca predict` lists its images by `image_paths`: a file named directly used to be accepted
    and printed lossily, while the same file reached through its folder was refused (issue 47,
    point 11); both are now the one line `extract` says."""
    from featcache.embedding import image_paths

    images = make_image_tree(tmp_path / "img", classes=1, train=1, test=1)
    folder = images / "train" / "class_0"
    odd = Path(os.fsdecode(os.fsencode(folder) + b"/\xff\xfe.png"))
    shutil.copy(folder / "img_000.png", odd)
    said = f"{os.fsencode(odd).decode('ascii', 'backslashreplace')} has a name that is not valid UTF-8: rename it"
    for given in ([odd], [folder], [folder / "img_000.png", odd]):
        with pytest.raises(UserError) as refused:
            image_paths(given)
        assert str(refused.value).startswith(said), given
    assert image_paths([folder / "img_000.png"])[0] == [folder / "img_000.png"]


def _zip_of(tree: Path, path: Path) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for file in sorted(tree.rglob("*.png")):
            zf.write(file, f"ds/{file.relative_to(tree)}")
    return path


def _archive_of(path: Path, members: list[tuple[str, bytes | None]]) -> Path:
    """A zip or tar (by `path`'s suffix) of these members in this order, names kept as given
    (None: a folder); both formats allow one name twice (zipfile with a warning)."""
    if path.suffix == ".zip":
        with warnings.catch_warnings(), zipfile.ZipFile(path, "w") as zf:
            warnings.simplefilter("ignore", UserWarning)  # "Duplicate name"
            for name, data in members:
                zf.writestr(name if data is not None else name.rstrip("/") + "/", data or b"")
        return path
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE if data is None else tarfile.REGTYPE
            info.size = len(data or b"")
            tar.addfile(info, io.BytesIO(data or b""))
    return path


@pytest.mark.parametrize("kind", ["zip", "tar"])
def test_two_members_of_one_path_refuse_the_archive(tmp_path: Path, kind: str) -> None:
    """Two members that unpack to one path (one name twice, or names that differ only by `.` or
    an empty part): the second silently replaced the first and `cache info` said "left out
    nothing" (issue 47, point 8). Refused before anything is unpacked, naming the path and both
    names; a folder listed twice is fine."""
    from featcache.sources.archives import check_archive

    images = make_image_tree(tmp_path / "img", classes=2, train=1, test=1)
    members = [(f"ds/{p.relative_to(images)}", p.read_bytes()) for p in sorted(images.rglob("*.png"))]
    first, other = members[0][0], members[1][1]  # the second image's bytes under the first's name
    archive = _archive_of(tmp_path / f"twice.{kind}", [*members, (first, other)])
    for skip in ([], ["--skip-bad-images"]):
        code, lines = invoke(*EXTRACT, "--data-root", str(archive), "--cache-dir", str(tmp_path / "c"), *skip)
        assert (code, lines) == (
            2,
            [
                f"error: archive {archive} holds two members that unpack to one path, {first} (twice as "
                f"{first}): one would silently replace the other; keep one of them and pack the archive again"
            ],
        )
    assert not (tmp_path / "c" / "_unpacked").exists() or not any((tmp_path / "c" / "_unpacked").iterdir())
    for name in (first.replace("/class_0/", "/./class_0/"), first.replace("/class_0/", "//class_0/")):
        assert name != first
        odd = _archive_of(tmp_path / f"odd.{kind}", [*members, (name, other)])
        with pytest.raises(UserError) as refused:
            check_archive(odd, tmp_path / "dest")
        assert f"to one path, {first} (as {first} and {name}):" in str(refused.value)
    folders = _archive_of(tmp_path / f"folders.{kind}", [("ds", None), ("ds/", None), *members])
    check_archive(folders, tmp_path / "dest")  # a folder listed twice is one folder


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
    for width in (None, "60", "200"):  # fitted to a terminal too: the unreadable row is shorter
        listed = runner.invoke(
            app, ["cache", "ls", "--cache-dir", str(tmp_path / "cache")], env={"COLUMNS": width}
        )
        assert listed.exit_code == 0 and "unreadable" in listed.output, (width, listed.output)


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
    for value in ("1", "999999"):  # 1 was taken and said "the limit here is 0 B"
        monkeypatch.setenv("TOSCA_MEMORY_LIMIT", value)
        with pytest.raises(limits.UserError, match=f"TOSCA_MEMORY_LIMIT={value} is under 1,000,000 bytes"):
            limits.available_memory()
    monkeypatch.setenv("TOSCA_MEMORY_LIMIT", "1000000")
    assert limits.available_memory() <= 1_000_000


def test_class_names_differing_only_in_unicode_normalisation_are_refused(tmp_path: Path) -> None:
    images = make_image_tree(tmp_path / "img", classes=2, train=1, test=1)
    os.rename(images / "train" / "class_0", images / "train" / "caf\u00e9")  # é as one character
    os.rename(images / "test" / "class_0", images / "test" / "cafe\u0301")  # e and a combining accent
    _refused(
        [*EXTRACT, "--data-root", images, "--cache-dir", tmp_path / "c"],
        "differ only in Unicode normalisation",
    )


def test_a_store_deleted_by_a_killed_writer_is_still_known_for_tosca_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed at any moment of deleting a store, what is left keeps its top zarr.json (or is empty),
    so the next extraction cleans it up instead of refusing it as someone else's folder."""
    from featcache.store import format as store_format

    real_unlink = os.unlink
    total = sum(len(files) for _, _, files in os.walk(synthetic_store(tmp_path / "probe.zarr").path))
    for kill_at in range(0, total, max(1, total // 7)):
        store = synthetic_store(tmp_path / f"s{kill_at}.zarr").path
        calls = 0

        def unlink(path: str, calls_left: list[int] = [kill_at]) -> None:  # noqa: B006 - a counter
            nonlocal calls
            if calls == calls_left[0]:
                raise KeyboardInterrupt
            calls += 1
            real_unlink(path)

        monkeypatch.setattr(store_format.os, "unlink", unlink)
        with pytest.raises(KeyboardInterrupt):
            store_format.remove_store_tree(store)
        monkeypatch.setattr(store_format.os, "unlink", real_unlink)
        assert store_format.looks_like_store_remains(store), kill_at
        assert (store / "zarr.json").is_file() or not any(store.iterdir())
    images = make_image_tree(tmp_path / "img", classes=2, train=1, test=1)
    leftover = tmp_path / "out" / "feat.zarr.replaced"
    shutil.copytree(synthetic_store(tmp_path / "old.zarr").path, leftover)
    (leftover / "zarr.json").unlink()  # as an older tosca's rmtree left it: top file gone first
    shutil.rmtree(leftover / "test")
    done = runner.invoke(
        app, [str(a) for a in [*EXTRACT, "--data-root", images, "--store", tmp_path / "out" / "feat.zarr"]]
    )
    assert done.exit_code == 0, done.output
    assert not leftover.exists()


def test_a_fifo_at_the_lock_s_name_never_blocks_cache_info(tmp_path: Path) -> None:
    import subprocess
    import sys

    store = synthetic_store(tmp_path / "s.zarr").path
    os.mkfifo(tmp_path / "s.zarr.lock")
    done = subprocess.run(
        [sys.executable, "-c", "from tosca_cli.app import main; main()", "cache", "info", str(store)],
        cwd=Path(__file__).resolve().parents[3],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def test_one_dataset_tree_reached_twice_through_a_link_is_one_tree(tmp_path: Path) -> None:
    from featcache.sources.datasets import find_split_tree

    make_image_tree(tmp_path / "data" / "v2", classes=2, train=1, test=1)
    (tmp_path / "data" / "latest").symlink_to("v2")
    assert find_split_tree(tmp_path / "data") == (tmp_path / "data" / "latest", "test")


def test_a_small_array_that_no_longer_decodes_is_one_line(tmp_path: Path) -> None:
    from featcache.store import FeatureStore
    from tosca_foundation.errors import UserError

    store = synthetic_store(tmp_path / "s.zarr").path
    chunk = next((store / "train" / "labels" / "c").iterdir())
    chunk.write_bytes(b"\x28\xb5\x2f\xfd" + b"\xff" * 40)  # a zstd frame header, then garbage
    with pytest.raises(UserError, match="train/labels cannot be read"):
        FeatureStore.open(store).labels("train")


def test_ids_or_labels_that_no_longer_fit_are_sent_to_overwrite_not_to_fix(tmp_path: Path) -> None:
    import zarr

    store = synthetic_store(tmp_path / "s.zarr").path
    labels = zarr.open_array(str(store / "train" / "labels"), mode="r+")
    labels[0] = 99  # a class the store does not have
    _refused(
        ["fit", "--store", store, "--device", "cpu", "--run", tmp_path / "run"],
        "--fix` cannot repair that: rebuild the store with the same `tosca extract` and --overwrite",
    )


def test_names_in_messages_are_never_emoji_codes(tmp_path: Path) -> None:
    _refused([*EXTRACT, "--data-root", tmp_path, "--scheduler", "local:-1:"], "local:-1:")


def _meta(store: Path, array: str, edit: object) -> None:
    path = store / array / "zarr.json"
    meta = json.loads(path.read_text())
    edit(meta)  # type: ignore[operator]
    path.write_text(json.dumps(meta))


def _sparse(path: Path, size: int) -> None:
    path.unlink()
    with open(path, "wb") as fh:
        fh.truncate(size)


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _deep_attrs(store: Path) -> None:
    text = (store / "zarr.json").read_text()
    deep = "[" * 3000 + "]" * 3000
    (store / "zarr.json").write_text(
        text.replace('"attributes": {', '"attributes": {"deep": ' + deep + ", ", 1)
    )


def _a_hundred_million_rows(store: Path) -> None:
    """Every array and the attrs claim 10^8 train rows, consistently (re-fingerprinted): only the
    files on disk can tell (8 chunk files of ids for 6,250,000 chunks)."""
    from tosca_foundation.fingerprints import fingerprint

    n, chunks = 10**8, 10**8 // 16
    _meta(store, "train/features", lambda m: m.update(shape=[n, 32]))
    for name in ("labels", "ids"):
        _meta(store, f"train/{name}", lambda m: m.update(shape=[n]))
    for name in ("done", "checksums", "sources"):
        _meta(store, f"train/{name}", lambda m: m.update(shape=[chunks]))
    meta = json.loads((store / "zarr.json").read_text())
    meta["attributes"]["identity"]["dataset"]["samples"]["train"] = n
    meta["attributes"]["fingerprint"] = fingerprint(meta["attributes"]["identity"])
    (store / "zarr.json").write_text(json.dumps(meta))


def _link_to_dev_zero(store: Path) -> None:
    chunk = store / "train" / "ids" / "c" / "0"
    chunk.unlink()
    chunk.symlink_to("/dev/zero")  # read whole, it would never end


def _complex(store: Path) -> None:
    for split in ("train", "test"):
        _meta(store, f"{split}/features", lambda m: m.update(data_type="complex64", fill_value=[0.0, 0.0]))


CRAFTED = [  # (what, how, the line's words): each one line, within seconds, in every cache command
    (
        "done claiming 10^6 entries",
        lambda s: _meta(s, "train/done", lambda m: m.update(shape=[10**6])),
        "train/done records shape [1000000] in chunks [1], where the store's layout has shape [8]",
    ),
    (
        "done claiming 10^8 entries",
        lambda s: _meta(s, "train/done", lambda m: m.update(shape=[10**8])),
        "train/done records shape [100000000] in chunks [1]",
    ),
    (
        "a chunk longer than its array",
        lambda s: _meta(
            s, "train/features", lambda m: m["chunk_grid"]["configuration"].update(chunk_shape=[1000, 32])
        ),
        "train/features records chunks of 1000 rows, longer than any split (120 rows)",
    ),
    (
        "every array and the attrs claiming 10^8 rows",
        _a_hundred_million_rows,
        "train/ids has 8 chunk files for its 6250000 chunks",
    ),
    (
        "a fifo as an array's zarr.json",
        lambda s: _fifo(s / "train" / "labels" / "zarr.json"),
        "holds train/labels/zarr.json, which is not a regular file",
    ),
    (
        "attrs nested 3,000 deep",
        _deep_attrs,
        "has unreadable metadata (./zarr.json nests more than 64 levels deep",
    ),
    (
        "a sparse 2 GiB zarr.json",
        lambda s: _sparse(s / "train" / "ids" / "zarr.json", 2 << 30),
        "is larger than such a file can be (2.0 GiB",
    ),
    ("a link to /dev/zero as a chunk file", _link_to_dev_zero, "holds a symbolic link (train/ids/c/0)"),
    (
        "a sparse 8 GiB chunk file",
        lambda s: _sparse(s / "train" / "features" / "c" / "0" / "0", 8 << 30),
        "train/features/c/0/0 is 8.0 GiB, more than a chunk of train/features can be",
    ),
    ("complex-valued features", _complex, "train/features holds complex64 values, not float32 or float16"),
]


@pytest.mark.parametrize(("what", "craft", "said"), [pytest.param(*c, id=c[0]) for c in CRAFTED])
def test_a_crafted_store_is_one_line_within_seconds_and_cache_ls_goes_on(
    tmp_path: Path, what: str, craft: object, said: str
) -> None:
    import time

    cache = tmp_path / "cache"
    good = synthetic_store(cache / "good.zarr").path
    store = synthetic_store(cache / "crafted.zarr").path
    craft(store)  # type: ignore[operator]
    for command in (
        ["cache", "info", store],
        ["cache", "verify", store],
        ["fit", "--store", store, "--device", "cpu", "--run", tmp_path / "run"],
    ):
        start = time.monotonic()
        _refused(command, said)
        assert time.monotonic() - start < 10, (what, command[:2])
    assert not (tmp_path / "run").exists()
    start = time.monotonic()
    listed = runner.invoke(app, ["cache", "ls", "--cache-dir", str(cache), "--json"])
    assert listed.exit_code == 0 and time.monotonic() - start < 10, listed.output
    rows = {Path(row["store"]).name: row for row in json.loads(listed.output)}
    assert said in rows["crafted.zarr"]["error"] and "error" not in rows["good.zarr"], rows
    assert good.exists()
