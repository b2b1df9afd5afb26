"""Mix-ups refused: a store edited or damaged by hand is found by `tosca cache verify` (per-chunk
checksums in the done record), a store of a newer schema or with unsafe names is refused in one
line, stores made before the first release are refused, and attrs are shown as data, never run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr
from support.images import FAST_CNN, make_image_tree
from support.stores import synthetic_store
from typer.testing import CliRunner

from cli import app
from featcache.store import FeatureStore, chunk_checksum
from tosca_foundation.errors import UserError

runner = CliRunner()


def _invoke(*args: str) -> tuple[int, list[str]]:
    result = runner.invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, [line for line in result.output.splitlines() if line.strip()]


def _set_attrs(store: Path, **changes: object) -> None:
    meta = json.loads((store / "zarr.json").read_text())
    for dotted, value in changes.items():
        block = meta["attributes"]
        *parents, last = dotted.split("__")
        for key in parents:
            block = block[key]
        block[last] = value
    (store / "zarr.json").write_text(json.dumps(meta))


def _chunk_file(store: Path, array: str, chunk: int) -> Path:
    return store / array / "c" / str(chunk) / "0"


def test_checksums_are_recorded_per_chunk_and_match_the_values(tmp_path: Path) -> None:
    st = synthetic_store(tmp_path / "s.zarr", classes=3, per_class=10, views=2)
    for split in ("train", "test"):
        sums = st.checksums(split)
        assert sums is not None and len(sums) == st.layout(split).n_chunks
        for chunk, recorded in enumerate(sums):
            sl = st.layout(split).chunk_slice(chunk)
            views = np.asarray(st.group["train/views"][:, sl]) if split == "train" else None
            assert recorded == chunk_checksum(st.features(split)[sl], views)
    assert len(set(st.checksums("train"))) == st.layout("train").n_chunks  # values differ, sums differ


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        ("flip one byte", "values do not match the checksum recorded when it was written"),
        ("delete the file", "its file train/features/c/1/0 is missing"),
        ("truncate the file", "cannot be read (ValueError)"),
        ("flag done by hand", "marked done but no checksum recorded"),
    ],
)
def test_verify_finds_a_store_edited_by_hand(tmp_path: Path, damage: str, reason: str) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=3, per_class=10).path  # 30 train rows, 2 chunks
    target = _chunk_file(store, "train/features", 1)
    if damage == "flip one byte":
        data = bytearray(target.read_bytes())
        data[17] ^= 0x01  # one low mantissa bit of one value: still finite
        target.write_bytes(bytes(data))
    elif damage == "delete the file":
        target.unlink()
    elif damage == "truncate the file":
        target.write_bytes(target.read_bytes()[:100])
    else:
        FeatureStore.open(store, mode="r+").mark_undone("train", [1])
        zarr.open_group(str(store), mode="r+")["train/done"][1] = True
    code, lines = _invoke("cache", "verify", str(store))
    assert code == 1 and lines == [f"FAIL train chunk 1: {reason}"], lines

    code, lines = _invoke("cache", "verify", str(store), "--fix")
    assert code == 1 and lines[0] == f"fixed train chunk 1: {reason}: marked not done"
    assert lines[-1] == "FAIL train: 1/2 chunks not done (first: [1])"
    assert FeatureStore.open(store).done("train").tolist() == [True, False]


def test_corrupted_chunk_fixed_and_recomputed_by_the_same_extract(tmp_path: Path) -> None:
    tree = make_image_tree(tmp_path / "imgs", classes=2, train=2, test=1)
    store = tmp_path / "s.zarr"
    args = [
        *("extract", "--model", FAST_CNN, "--dataset", "imagefolder", "--data-root", str(tree)),
        *("--store", str(store), "--random-init", "--views", "1", "--chunk-size", "2", "--workers", "0"),
        *("--device", "cpu"),
    ]
    assert _invoke(*args)[0] == 0
    before = np.asarray(zarr.open_group(str(store))["train/views"][:])
    view_file = store / "train" / "views" / "c" / "0" / "1" / "0"
    view_file.write_bytes(bytes(len(view_file.read_bytes())))  # zeros: finite, wrong
    assert _invoke("cache", "verify", str(store)) == (
        1,
        ["FAIL train chunk 1: values do not match the checksum recorded when it was written"],
    )
    assert _invoke("cache", "verify", str(store), "--fix")[0] == 1
    code, lines = _invoke(*args)
    assert code == 0 and any("1 computed, 2 already done" in line for line in lines), lines
    np.testing.assert_array_equal(np.asarray(zarr.open_group(str(store))["train/views"][:]), before)
    assert _invoke("cache", "verify", str(store)) == (0, [f"OK {store}"])

    labels = zarr.open_group(str(store), mode="r+")["train/labels"]
    labels[0] = 1 - int(labels[0])  # a label edited by hand: the recorded ids/labels hash no longer fits
    assert _invoke("cache", "verify", str(store)) == (
        1,
        ["FAIL train: ids or labels differ from the ones recorded in the identity"],
    )


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (
            2,
            "was written by a newer tosca (store schema 2; this tosca reads schema 1): upgrade tosca to read it",
        ),
        (0, "has the old store schema 0 (this tosca reads schema 1); re-extract it with --overwrite"),
        ("1", "has an unreadable store schema version '1'; re-extract it"),
    ],
)
def test_other_schema_versions_are_refused_in_one_line(tmp_path: Path, schema: object, message: str) -> None:
    store = synthetic_store(tmp_path / "s.zarr").path
    _set_attrs(store, schema_version=schema)
    for command in (["cache", "info", str(store)], ["cache", "verify", str(store)]):
        assert _invoke(*command) == (2, [f"error: {store} {message}"])
    code, lines = _invoke("fit", "--store", str(store), "--device", "cpu")
    assert code == 2 and lines == [f"error: {store} {message}"]
    code, lines = _invoke("cache", "ls", "--cache-dir", str(tmp_path))  # listed, with why, not fatal
    assert code == 0 and any("unreadable" in line for line in lines)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("identity__backbone__alias", "../../evil"),
        ("identity__dataset__name", "/etc/x"),
        ("identity__dataset__name", "a/b"),
    ],
)
def test_unsafe_names_in_attrs_are_refused(tmp_path: Path, field: str, value: str) -> None:
    store = synthetic_store(tmp_path / "s.zarr").path
    _set_attrs(store, **{field: value})
    with pytest.raises(UserError, match=r"records an unsafe .* edited by hand"):
        FeatureStore.open(store)
    code, lines = _invoke("baselines", "--store", str(store), "--no-tosca", "--device", "cpu")
    assert code == 2 and len(lines) == 1 and "unsafe" in lines[0]
    assert not (tmp_path.parent / "evil").exists() and not Path("runs/baselines-synthetic-..").exists()


@pytest.mark.parametrize("array", ["train/features", "test/done", "train/views", "test"])
def test_an_array_deleted_by_hand_is_refused(tmp_path: Path, array: str) -> None:
    store = synthetic_store(tmp_path / "s.zarr", views=1).path
    shutil.rmtree(store / array)
    missing = array if "/" in array else f"{array}/features"
    expected = f"error: store {store} has no {missing} (damaged or edited by hand); re-extract it"
    for command in (["cache", "info"], ["cache", "verify"], ["fit", "--store"]):
        assert _invoke(*command, str(store)) == (2, [expected])
    code, lines = _invoke("cache", "ls", "--cache-dir", str(tmp_path))
    assert code == 0 and any("unreadable" in line for line in lines)


@pytest.mark.parametrize("array", ["checksums", "sources"])
def test_a_store_without_checksums_or_sources_is_refused_as_written_before_the_release(
    tmp_path: Path, array: str
) -> None:
    """The builds before the first release made stores without them (or they were deleted by
    hand): nothing in such a store can be vouched for, so every command refuses it in one line."""
    st = synthetic_store(tmp_path / "s.zarr")
    for split in ("train", "test"):
        del st.group[f"{split}/{array}"]
    expected = (
        f"error: store {st.path} has no train/{array}: it was written before tosca's first release (or "
        "edited by hand); re-extract it with --overwrite"
    )
    for command in (["cache", "info"], ["cache", "verify"], ["cache", "verify", "--fix"]):
        assert _invoke(*command, str(st.path)) == (2, [expected]), command
    code, lines = _invoke(
        *("fit", "--store", str(st.path), "--device", "cpu", "--run", str(tmp_path / "r")),
        *("--init-cls", "2", "--increment", "2", "--epochs", "1", "--r", "4", "--s", "4"),
    )
    assert (code, lines) == (2, [expected]) and not (tmp_path / "r").exists()


def test_attrs_are_data_shown_literally_never_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = synthetic_store(tmp_path / "s.zarr").path
    monkeypatch.chdir(tmp_path)  # where `touch PWNED` would land if anything ran it
    payload = "[/] [bold red]x[/] __import__('os').system('touch PWNED') {0.__class__} $(touch PWNED)"
    _set_attrs(store, dataset_source=payload, identity__dataset__split_rule=payload, created=payload)
    code, lines = _invoke("cache", "info", str(store))
    assert code == 0 and sum(payload in line for line in lines) == 3, lines
    assert _invoke("cache", "ls", "--cache-dir", str(tmp_path))[0] == 0
    code, lines = _invoke("cache", "verify", str(store))
    assert code == 1 and lines == [
        "FAIL fingerprint does not match the identity attrs (edited after the store was made)"
    ]
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize("views", [0, 2])
def test_a_chunk_of_zeros_that_zarr_did_not_write_is_whole(tmp_path: Path, views: int) -> None:
    """zarr writes no file for a chunk all of its fill value 0.0; such a chunk, vouched for by its
    checksum, is whole: `cache verify` passes, `--fix` unflags nothing and `baselines` computes on it
    (issue 57, point 9: every command called it "train/features/c/0/0 is missing"). A deleted file
    of a chunk that was not all zeros is still found (test_verify_finds_a_store_edited_by_hand)."""
    st = synthetic_store(tmp_path / "s.zarr", classes=3, per_class=10, views=views)
    rows = st.layout("train").chunk_slice(1)
    zeros = np.zeros((rows.stop - rows.start, st.dim), np.float32)
    writer = FeatureStore.open(st.path, mode="r+")
    writer.mark_undone("train", [1])
    writer.write_chunk("train", 1, zeros, np.zeros((views, *zeros.shape), np.float32) if views else None)
    assert not _chunk_file(st.path, "train/features", 1).exists()  # zarr skipped it
    code, lines = _invoke("cache", "verify", str(st.path))
    assert code == 0, lines
    code, lines = _invoke("cache", "verify", str(st.path), "--fix")
    assert code == 0 and not any(line.startswith("fixed") for line in lines), lines
    assert FeatureStore.open(st.path).done("train").tolist() == [True, True]
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        [
            "baselines",
            "--store",
            str(st.path),
            "--out",
            str(out),
            "--no-tosca",
            "--methods",
            "simplecil",
            "--device",
            "cpu",
            "--init-cls",
            "1",
            "--increment",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    assert (out / "simplecil" / "metrics.json").is_file()


def test_opening_a_store_while_another_worker_writes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a worker writes a chunk as a `.partial` file, then renames it into place; another worker
    # opening the store may list the temporary and find it gone when it looks at its size: the
    # open goes on, the temporary never taken for a chunk (it crashed a Dask extraction test)
    import os

    from featcache.store import format as store_format

    store = synthetic_store(tmp_path / "s.zarr", classes=2, per_class=8, test_per_class=4)
    chunks = sorted((tmp_path / "s.zarr" / "train" / "features" / "c").rglob("*"))
    chunk = next(p for p in chunks if p.is_file())
    staged = chunk.with_name(chunk.name + ".0123abcd.partial")
    staged.write_bytes(b"\0" * (1 << 21))  # larger than any chunk: taken for one, it would be refused
    listing = os.scandir

    def renamed_meanwhile(folder: str):  # the writer's rename lands between listing and stat
        entries = list(listing(folder))
        for entry in entries:
            if entry.name.endswith(".partial"):
                os.replace(entry.path, tmp_path / "moved")
        return _Listing(entries)

    monkeypatch.setattr(store_format.os, "scandir", renamed_meanwhile)
    opened = FeatureStore.open(store.path)
    assert np.array_equal(opened.labels("train"), store.labels("train"))
    assert not staged.exists() and (tmp_path / "moved").exists()


class _Listing(list):
    def __enter__(self) -> list:
        return self

    def __exit__(self, *exc: object) -> None:
        return None
