"""One writer per store: a second `tosca extract` of a store being written is refused in one line, a
killed writer's lock does not outlive it, and different stores extract side by side."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
from pathlib import Path

import numpy as np
import pytest
from support.crash_harness import PauseAt, run, start
from support.images import FAST_CNN, make_image_tree
from typer.testing import CliRunner

from cli import app
from featcache.foundation.locks import FolderBusy, acquire, folder_lock, holder, lock_path
from featcache.store import FeatureStore


def _args(tree: Path, store: Path) -> list[str]:
    return [
        *("extract", "--model", FAST_CNN, "--dataset", "imagefolder", "--data-root", str(tree)),
        *("--store", str(store), "--cache-dir", str(store.parent / "cache"), "--random-init"),
        *("--views", "1", "--chunk-size", "2", "--batch-size", "2", "--workers", "0", "--device", "cpu"),
    ]


@pytest.mark.heavy
def test_second_extract_refused_dead_writer_does_not_block_other_stores_run_alongside(tmp_path: Path) -> None:
    tree = make_image_tree(tmp_path / "imgs", classes=2, train=3, test=1)
    busy, other = tmp_path / "busy.zarr", tmp_path / "other.zarr"
    first = start(_args(tree, busy), tmp_path / "first", PauseAt(r"busy\.zarr/train/features/c/", 2))
    first.wait_paused()  # alive, holding the lock, one chunk done

    code, stdout, stderr = run(_args(tree, busy), tmp_path / "second")
    lines = [line for line in (stdout + stderr).splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"error: store {busy} is being written by another tosca process")
    assert f"pid {first.process.pid} on {socket.gethostname()} since " in lines[0]
    assert "Traceback" not in stderr

    verify = CliRunner().invoke(app, ["cache", "verify", str(busy)])  # reading is never blocked
    assert verify.exit_code == 1 and "chunks not done" in verify.output
    assert f"an extraction is writing it now (pid {first.process.pid} on " in verify.output

    code, _, stderr = run(_args(tree, other), tmp_path / "alongside")  # another store: not blocked
    assert code == 0, stderr
    assert FeatureStore.open(busy).done("train").tolist() == [True, False, False]  # the first still runs

    first.kill()  # SIGKILL: the kernel drops its flock; its lock file stays behind
    assert lock_path(busy).exists() and holder(busy) is None
    code, stdout, stderr = run(_args(tree, busy), tmp_path / "after-kill")
    assert code == 0, stderr
    assert "3 computed, 1 already done" in stdout
    for split in ("train", "test"):
        np.testing.assert_array_equal(
            FeatureStore.open(busy).features(split), FeatureStore.open(other).features(split)
        )
    assert not lock_path(busy).exists() and not lock_path(other).exists()


def test_lock_is_exclusive_names_its_holder_and_goes_with_release(tmp_path: Path) -> None:
    store = tmp_path / "s.zarr"
    with folder_lock(store) as held:
        record = json.loads(lock_path(store).read_text())
        assert record["pid"] == os.getpid() and record["host"] == socket.gethostname()
        assert holder(store) == f"pid {os.getpid()} on {socket.gethostname()} since {record['started']}"
        with pytest.raises(FolderBusy, match=f"pid {os.getpid()} on "):
            acquire(store)  # a second open file description: refused even in the same process
        with folder_lock(tmp_path / "t.zarr"):  # another store's lock is independent
            assert lock_path(tmp_path / "t.zarr").exists()
    assert held.fd == -1 and not lock_path(store).exists() and holder(store) is None
    acquire(store).release()  # free again


def test_a_folder_reached_through_a_link_has_the_same_lock(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "alias").symlink_to("run")
    with folder_lock(tmp_path / "run"), pytest.raises(FolderBusy):
        acquire(tmp_path / "alias")
    assert lock_path(tmp_path / "alias") == lock_path(tmp_path / "run")


def _held_for_a_dead_writer(store: Path) -> int:
    """The lock file of a writer that ended on this host, its flock still held (as its forked
    loader workers hold it while they exit): here by a descriptor of this test."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    path = lock_path(store)
    path.write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname(), "started": "then"}))
    fd = os.open(path, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def test_a_rerun_waits_for_the_helpers_of_a_dead_writer_then_takes_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A killed writer's forked helpers keep its flock until they exit: a rerun says so in one line,
    waits for them, then goes on (here the helpers exit when the line is said)."""
    from featcache.foundation import locks

    store = tmp_path / "s.zarr"
    fd = _held_for_a_dead_writer(store)
    said: list[str] = []

    def helpers_exit(line: str) -> None:
        said.append(line)
        os.close(fd)  # the last helper exits: the kernel drops the flock

    monkeypatch.setattr(locks, "tell", helpers_exit)
    lock = acquire(store)
    assert len(said) == 1 and said[0].startswith(f"waiting: the tosca process that wrote {store} (pid ")
    assert "has ended; its helper processes are exiting (at most 30 s)" in said[0]
    assert json.loads(lock_path(store).read_text())["pid"] == os.getpid()
    lock.release()


def test_helpers_that_outlive_the_bound_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from featcache.foundation import locks

    monkeypatch.setattr(locks, "HELPERS_EXIT_SECONDS", 0.2)
    monkeypatch.setattr(locks, "tell", lambda line: None)
    store = tmp_path / "s.zarr"
    fd = _held_for_a_dead_writer(store)
    try:
        with pytest.raises(FolderBusy, match=r"that process has ended, but processes it started still hold"):
            acquire(store)
    finally:
        os.close(fd)
    acquire(store).release()


def test_verify_fix_takes_the_lock(tmp_path: Path) -> None:
    from support.stores import synthetic_store

    store = synthetic_store(tmp_path / "s.zarr").path
    with folder_lock(store):
        result = CliRunner().invoke(app, ["cache", "verify", str(store), "--fix"])
    assert result.exit_code == 2 and "is being written by another" in result.output
    assert CliRunner().invoke(app, ["cache", "verify", str(store), "--fix"]).exit_code == 0
