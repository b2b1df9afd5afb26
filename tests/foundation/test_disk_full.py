"""A full disk stops an extraction with one line, keeps every finished chunk, and the same command
resumes once there is space: with ENOSPC injected at zarr's file write (always), and on a real,
tiny tmpfs (where this process may mount one: root with CAP_SYS_ADMIN; skipped elsewhere)."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr.storage._local as zarr_local
from support.commands import said
from support.images import FAST_CNN, make_image_tree
from typer.testing import CliRunner

from cli import app
from featcache.store import FeatureStore

runner = CliRunner()


def _args(tree: Path, store: Path) -> list[str]:
    return [
        *("extract", "--model", FAST_CNN, "--dataset", "imagefolder", "--data-root", str(tree)),
        *("--store", str(store), "--cache-dir", str(store.parent / "cache"), "--random-init"),
        *("--views", "2", "--chunk-size", "2", "--batch-size", "2", "--workers", "0", "--device", "cpu"),
    ]


def _invoke(*args: str) -> tuple[int, list[str]]:
    result = runner.invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = said(result.output)  # (an extraction's plan line left out)
    return result.exit_code, lines


def _arrays(store: Path) -> dict[str, np.ndarray]:
    st = FeatureStore.open(store)
    out = {f"{s}/features": st.features(s) for s in ("train", "test")}
    out["train/views"] = np.asarray(st.group["train/views"][:])
    for split in ("train", "test"):
        out[f"{split}/checksums"] = st.checksums(split)
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    base = tmp_path_factory.mktemp("full")
    tree = make_image_tree(base / "imgs", classes=2, train=4, test=2)
    code, lines = _invoke(*_args(tree, base / "ref.zarr"))
    assert code == 0, lines
    return tree, _arrays(base / "ref.zarr")


def _fail_at(
    monkeypatch: pytest.MonkeyPatch, pattern: str, occurrence: int, code: int = errno.ENOSPC
) -> list[str]:
    """zarr's file write raises OSError(code) from the `occurrence`-th write whose path holds `pattern` on."""
    original = zarr_local._put
    seen: list[str] = []

    def put(path: Path, value: Any, exclusive: bool = False) -> int:
        if pattern in str(path):
            seen.append(str(path))
            if len(seen) >= occurrence:
                raise OSError(code, os.strerror(code), str(path))
        return original(path, value, exclusive=exclusive)

    monkeypatch.setattr(zarr_local, "_put", put)
    return seen


def _assert_kept_and_resumes(
    tree: Path, store: Path, reference: dict[str, np.ndarray], done_train: list[bool]
) -> None:
    st = FeatureStore.open(store)
    assert st.done("train").tolist() == done_train and not st.done("test").any()
    kept = np.asarray(done_train)
    assert (st.checksums("train")[kept] == reference["train/checksums"][kept]).all()
    code, lines = _invoke("cache", "verify", str(store))
    assert code == 1 and [line for line in lines if line.startswith("FAIL")] == [
        f"FAIL train: {kept.size - kept.sum()}/4 chunks not done (first: {np.flatnonzero(~kept).tolist()})",
        "FAIL test: 2/2 chunks not done (first: [0, 1])",
    ]
    code, lines = _invoke(*_args(tree, store))  # space again: the same command resumes
    assert code == 0, lines
    assert any(f"{6 - int(kept.sum())} computed, {int(kept.sum())} already done" in line for line in lines)
    resumed = _arrays(store)
    for key, value in reference.items():
        np.testing.assert_array_equal(resumed[key], value, err_msg=key)
    assert _invoke("cache", "verify", str(store)) == (0, [f"OK {store}"])
    assert not list(store.parent.rglob("*.partial")) and not list(store.parent.rglob("*.lock"))


def test_injected_enospc_mid_extraction(
    tmp_path: Path, reference: tuple[Path, dict[str, np.ndarray]], monkeypatch: pytest.MonkeyPatch
) -> None:
    tree, ref = reference
    store = tmp_path / "s.zarr"
    with monkeypatch.context() as patch:
        _fail_at(patch, "s.zarr/train/views/c/", 5)  # the views of chunk 2 (2 files per chunk)
        code, lines = _invoke(*_args(tree, store))
    assert code == 2 and len(lines) == 1, lines
    assert lines[0] == (
        f"error: disk full (No space left on device) while writing train chunk 2 in {store} (train chunk 2 "
        "not marked done; the chunks done before it are kept); free some space, then run the same command "
        "again to resume"
    )
    _assert_kept_and_resumes(tree, store, ref, [True, True, False, False])


def test_read_only_store_is_one_line(
    tmp_path: Path, reference: tuple[Path, dict[str, np.ndarray]], monkeypatch: pytest.MonkeyPatch
) -> None:
    tree, ref = reference
    store = tmp_path / "s.zarr"
    with monkeypatch.context() as patch:
        _fail_at(patch, "s.zarr/train/views/c/", 5, errno.EROFS)
        code, lines = _invoke(*_args(tree, store))
    assert (code, lines) == (
        2,
        [f"error: cannot write {store} (Read-only file system) while writing train chunk 2"],
    )
    _assert_kept_and_resumes(tree, store, ref, [True, True, False, False])


def test_injected_enospc_while_creating_leaves_no_store(
    tmp_path: Path, reference: tuple[Path, dict[str, np.ndarray]], monkeypatch: pytest.MonkeyPatch
) -> None:
    tree, ref = reference
    store = tmp_path / "s.zarr"
    with monkeypatch.context() as patch:
        _fail_at(patch, "s.zarr.creating/", 4)
        code, lines = _invoke(*_args(tree, store))
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: disk full"), lines
    assert "while creating the store" in lines[0]
    assert not store.exists() and not (tmp_path / "s.zarr.creating").exists()
    assert not (tmp_path / "s.zarr.lock").exists()
    code, lines = _invoke(*_args(tree, store))
    assert code == 0, lines
    for key, value in _arrays(store).items():
        np.testing.assert_array_equal(value, ref[key], err_msg=key)


def _mount(path: Path, size: int) -> bool:
    if shutil.which("mount") is None or os.geteuid() != 0:
        return False
    path.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    return result.returncode == 0


def _resize(path: Path, size: int) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(path)], check=True, capture_output=True)


def _used(path: Path) -> int:
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    disk = tmp_path / "disk"
    if not _mount(disk, 4 << 20):
        pytest.skip(
            "cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN); the injected ENOSPC test covers it"
        )
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def test_real_full_tmpfs(tmpfs: Path, reference: tuple[Path, dict[str, np.ndarray]]) -> None:
    tree, ref = reference
    code, lines = _invoke(*_args(tree, tmpfs / "probe.zarr"))  # how much room a whole store takes here
    assert code == 0, lines
    full = _used(tmpfs)
    shutil.rmtree(tmpfs / "probe.zarr")
    shutil.rmtree(tmpfs / "cache", ignore_errors=True)
    page = os.sysconf("SC_PAGE_SIZE")
    _resize(tmpfs, full - 10 * page)  # the last ten files of the run do not fit

    store = tmpfs / "s.zarr"
    code, lines = _invoke(*_args(tree, store))
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("error: disk full (No space left on device) while writing ") and lines[
        0
    ].endswith("free some space, then run the same command again to resume")
    st = FeatureStore.open(store)
    done_train = st.done("train").tolist()
    assert 0 < sum(done_train) < 4 or (all(done_train) and not st.done("test").all()), done_train
    kept = np.asarray(done_train)
    assert (st.checksums("train")[kept] == ref["train/checksums"][kept]).all()
    _resize(tmpfs, 4 << 20)  # space again
    code, lines = _invoke(*_args(tree, store))
    assert code == 0, lines
    for key, value in _arrays(store).items():
        np.testing.assert_array_equal(value, ref[key], err_msg=key)
    assert _invoke("cache", "verify", str(store)) == (0, [f"OK {store}"])


def _full_at_sync(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Syncing a file whose name holds `name` (tosca syncs every file it writes before it is
    renamed into place or appended to) raises ENOSPC naming no file, as a full disk does."""
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if name in os.path.basename(os.readlink(f"/proc/self/fd/{fd}")):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.parametrize("name", ["metrics.json", "results.csv"])
def test_a_write_that_fills_the_disk_names_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    from tosca_foundation import atomic
    from tosca_foundation.files import os_error_line

    _full_at_sync(monkeypatch, name)
    target = tmp_path / name
    with pytest.raises(OSError) as raised, atomic.writing(target, "w") as fh:
        fh.write("x")
    assert os_error_line(raised.value) == (
        f"disk full (No space left on device) in {target}; free some space, then run the same command "
        "again to resume"
    )
    assert list(tmp_path.iterdir()) == []  # no temporary left, nothing half-written in place


@pytest.mark.parametrize(
    ("command", "written"),
    [
        (["fit", "--task", "1", "--epochs", "1", "--run", "{out}"], "metrics.json"),
        pytest.param(
            ["sweep", "--r", "4,8", "--epochs", "1", "--out", "{out}"], "results.csv", marks=pytest.mark.heavy
        ),
    ],
    ids=["fit", "sweep"],
)
def test_a_full_disk_in_fit_or_sweep_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str], written: str
) -> None:
    """A full disk while fit or sweep writes a file: the line names that file, where it said "in a
    file" (issue 47, point 11). Every file they and suite write goes through tosca_foundation.atomic."""
    from support.stores import synthetic_store

    store = synthetic_store(tmp_path / "s.zarr", classes=4).path
    out = tmp_path / "out"
    args = [part.format(out=out) for part in command]
    _full_at_sync(monkeypatch, written)
    code, lines = _invoke(*args, "--store", str(store), "--init-cls", "2", "--increment", "2")
    assert code == 2 and lines[-1] == (
        f"error: disk full (No space left on device) in {out / written}; free some space, then run the "
        "same command again to resume"
    ), lines


def test_a_sweep_point_stopped_by_a_full_disk_is_computed_again_never_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk as a sweep point's done.json is written (issue 54: a baseline stopped so was
    "reused" half-written): the line names that file, the point is left unfinished, and the same
    command, once there is room, computes it again whole."""
    from support.stores import synthetic_store

    store = synthetic_store(tmp_path / "s.zarr", classes=4).path
    out = tmp_path / "out"
    args = ["sweep", "--store", str(store), "--r", "4", "--epochs", "1", "--jobs", "1", "--out", str(out)]
    args += ["--init-cls", "2", "--increment", "2", "--device", "cpu"]
    with monkeypatch.context() as full:
        _full_at_sync(full, "done.json")
        code, lines = _invoke(*args)
    (point,) = (out / "points").iterdir()
    assert code == 2 and lines[-1] == (
        f"error: disk full (No space left on device) in {point / 'done.json'}; free some space, then run "
        "the same command again to resume"
    ), lines
    assert sorted(p.name for p in point.iterdir()) == ["asked.json", "measured.json", "outcomes.safetensors"]
    assert not (out / "results.csv").exists()
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "1 run(s)" in result.output and "0 already done" in result.output
    assert sorted(p.name for p in point.iterdir()) == [
        "asked.json",
        "done.json",
        "measured.json",
        "outcomes.safetensors",
    ]
