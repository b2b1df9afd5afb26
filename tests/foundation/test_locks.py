"""One writer per store: a second `tosca extract` of a store being written is refused in one line, a
killed writer's lock does not outlive it, and different stores extract side by side."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support import ROOT
from support.crash_harness import PauseAt, run, start
from support.images import FAST_CNN, make_image_tree
from typer.testing import CliRunner

from cli import app
from featcache.store import FeatureStore
from tosca_foundation.errors import UserError
from tosca_foundation.locks import FolderBusy, acquire, folder_lock, holder, lock_path


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
    assert not held.lock.is_locked and not lock_path(store).exists() and holder(store) is None
    acquire(store).release()  # free again


def test_a_folder_reached_through_a_link_has_the_same_lock(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "alias").symlink_to("run")
    with folder_lock(tmp_path / "run"), pytest.raises(FolderBusy):
        acquire(tmp_path / "alias")
    assert lock_path(tmp_path / "alias") == lock_path(tmp_path / "run")


# A tosca writer that takes a lock and forks a helper (as torch forks its loader workers; this one
# never asks to die with its parent). The helper, once started (fork handlers run before fork returns
# in the child), says both pids and kills the writer with SIGKILL, then lives on.
KILLED_WRITER = """
import os, signal, sys, time
from tosca_foundation.locks import acquire
lock = acquire(sys.argv[1])
writer = os.getpid()
if os.fork() == 0:
    print(writer, os.getpid(), flush=True)
    os.kill(writer, signal.SIGKILL)
    time.sleep(60)
    os._exit(0)
time.sleep(60)
"""


def test_a_killed_writer_s_forked_helpers_do_not_hold_its_lock(tmp_path: Path) -> None:
    """filelock closes the lock's descriptor in every child forked while it is held: once the
    writer is killed, the lock is free at once while its helper still runs (no wait, no stale lock)."""
    store = tmp_path / "s.zarr"
    writer = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(store)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    pid, helper = (int(word) for word in writer.stdout.readline().split())  # type: ignore[union-attr]
    assert writer.wait(timeout=60) == -signal.SIGKILL and pid == writer.pid
    try:
        os.kill(helper, 0)  # the helper is alive (it would hold the flock had it kept the descriptor)
        assert lock_path(store).exists() and holder(store) is None  # the file stays; its writer is gone
        with folder_lock(store):
            assert json.loads(lock_path(store).read_text())["pid"] == os.getpid()
    finally:
        os.kill(helper, signal.SIGKILL)


def test_a_lock_held_for_a_writer_that_ended_is_one_line_saying_so(tmp_path: Path) -> None:
    """The record names a process that ended on this host, yet something still holds the flock (a
    process that got the descriptor some other way than a fork from Python): one line that says so
    and how to find it, at once."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    store = tmp_path / "s.zarr"
    path = lock_path(store)
    path.write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname(), "started": "then"}))
    fd = os.open(path, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        with pytest.raises(
            FolderBusy, match=r"that process has ended, but a process it started holds the lock"
        ):
            acquire(store)
    finally:
        os.close(fd)
    acquire(store).release()


def test_what_is_in_the_way_of_the_lock_file_is_one_line_and_left_as_it_is(tmp_path: Path) -> None:
    """A link (to a file or to nothing), a fifo, a folder, a hard link to someone's file (in a folder
    of one's own or one others can write) or someone's file at the lock's name: one line each, nothing
    followed, written, waited on or deleted."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep\n")
    empty = tmp_path / "empty.txt"  # someone's empty file: a record written through a link would land in it
    empty.touch()
    (tmp_path / "shared").mkdir(mode=0o777)
    (tmp_path / "shared").chmod(0o777)  # a folder others can write
    in_the_way = {
        "link.zarr": (lambda p: p.symlink_to(victim), "is a symbolic link: tosca does not follow one"),
        "dangling.zarr": (lambda p: p.symlink_to(tmp_path / "nowhere"), "is a symbolic link"),
        "fifo.zarr": (os.mkfifo, "is not a regular file: tosca needs that name for its lock"),
        "folder.zarr": (Path.mkdir, "is not a regular file"),
        "notes.zarr": (lambda p: p.write_text("my notes\n"), "was not written by tosca"),
        "linked.zarr": (lambda p: os.link(empty, p), "has 2 hard links: another name shares this file"),
        "shared/linked.zarr": (lambda p: os.link(empty, p), "has 3 hard links"),  # filelock's own refusal
    }
    for name, (plant, said) in in_the_way.items():
        path = lock_path(tmp_path / name)
        plant(path)
        before = os.lstat(path)
        with pytest.raises(UserError, match=said) as refused:
            acquire(tmp_path / name)
        assert not isinstance(refused.value, FolderBusy), name
        after = os.lstat(path)
        assert (after.st_ino, after.st_mode, after.st_size) == (
            before.st_ino,
            before.st_mode,
            before.st_size,
        ), name
    assert victim.read_text() == "keep\n" and not (tmp_path / "nowhere").exists() and empty.read_text() == ""
    assert (tmp_path / "notes.zarr.lock").read_text() == "my notes\n"


def test_a_filesystem_without_flock_is_one_line_never_a_soft_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NFS without its lock daemon answers flock with ENOLCK; FUSE file systems with ENOSYS. A
    marker-file lock instead would outlive a killed holder: refused in one line."""
    import errno

    for code in (errno.ENOLCK, errno.ENOSYS):

        def no_flock(fd: int, operation: int, code: int = code) -> None:
            raise OSError(code, os.strerror(code))

        monkeypatch.setattr(fcntl, "flock", no_flock)
        with pytest.raises(
            UserError, match=r"this filesystem does not support file locks; put the store on a "
        ):
            acquire(tmp_path / f"{code}.zarr")
    monkeypatch.undo()
    acquire(tmp_path / "s.zarr").release()


def test_verify_fix_takes_the_lock(tmp_path: Path) -> None:
    from support.stores import synthetic_store

    store = synthetic_store(tmp_path / "s.zarr").path
    with folder_lock(store):
        result = CliRunner().invoke(app, ["cache", "verify", str(store), "--fix"])
    assert result.exit_code == 2 and "is being written by another" in result.output
    assert CliRunner().invoke(app, ["cache", "verify", str(store), "--fix"]).exit_code == 0
