"""One writer per folder (a store, a run, a sweep, an archive's unpacking): an advisory lock file
beside the folder, held with `filelock.FileLock` (`fcntl.flock` on POSIX).

Why flock: the kernel drops the lock the moment its holder dies (SIGKILL, OOM, a crash), so a
dead process never blocks the next extraction and there is no stale-lock guessing. And filelock
closes the lock's descriptor in every child forked while it is held (torch's loader workers), so
a killed writer's helpers never hold its lock: a rerun right after `kill -9` takes it at once.

What filelock does here: it opens the lock file never through a symbolic link (O_NOFOLLOW) and
never waiting on a fifo (O_NONBLOCK), takes the flock, gives up an inode that a releasing holder
unlinked meanwhile (st_nlink 0), polls when told to wait, and closes the descriptor in forked
children. Its soft fallback is off: on a filesystem without flock a marker file would outlive a
killed holder (a stale lock), so there it is one line. What stays here: where the lock lives,
the record of who holds it (pid, host, start time, command; advice for people, never what
decides), refusing a file by the lock's name that tosca did not write (checked with the lock
held, before a byte is written), removing the lock file on release (filelock leaves it in place),
and the one-line refusals.

The lock lives beside the store (`<store>.lock`), not inside it: `--overwrite` replaces the
store folder as a whole, and the lock must outlive that. On a cluster, only the process that
runs `tosca extract` holds it; the Dask workers it drives write chunks under it.

Import-light: stdlib at import; filelock when a lock is taken.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import stat
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tosca_foundation.errors import UserError
from tosca_foundation.files import parse_json
from tosca_foundation.text import printable


class FolderBusy(UserError):
    """Another live process holds the folder's lock."""


def lock_path(store: str | Path) -> Path:
    """`<folder>.lock` beside the folder itself: links resolved, so a folder reached through a
    symbolic link has the same lock as by its own path (two writers would not see each other), and
    `.` (a run folder one stands in) has a name to put it beside."""
    store = Path(store).resolve()
    return store.with_name(store.name + ".lock")


def holder_text(info: dict[str, Any]) -> str:
    """'pid 123 on host a since 2026-11-30T01:02:03Z' from a lock file's record (any part may be missing)."""
    parts = []
    if "pid" in info:
        parts.append(f"pid {info['pid']}")
    if "host" in info:
        parts.append(f"on {info['host']}")
    if "started" in info:
        parts.append(f"since {info['started']}")
    return printable(" ".join(str(p) for p in parts))[:200] or "another process"  # a record is anyone's text


def _read_record(fd: int) -> dict[str, Any]:
    """The record in a lock file (its first 4 KiB, parsed with the depth checked first); {} when
    it holds none that tosca could have written."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        data = os.read(fd, 4096)
        record = parse_json(data, "lock record") if data.strip() else {}
    except (OSError, UserError):
        return {}
    return record if isinstance(record, dict) else {}


def _record_at(path: Path) -> dict[str, Any] | None:
    """The record in the lock file at `path`, read without taking the lock; None when there is no
    file there. Never through a link, never waiting on a fifo: what is there may not be tosca's."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError:
        return {}
    try:
        return _read_record(fd) if stat.S_ISREG(os.fstat(fd).st_mode) else {}
    finally:
        os.close(fd)


def same_host_and_dead(info: dict[str, Any]) -> bool:
    """The recorded holder ran on this host and its process is gone (its children may live on)."""
    if info.get("host") != socket.gethostname() or not isinstance(info.get("pid"), int):
        return False
    try:
        os.kill(info["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, owned by someone else
        return False
    return False


@dataclass
class FolderLock:
    """A held lock; `release()` (or leaving `folder_lock`'s block) gives it up."""

    path: Path
    lock: Any  # the held filelock.FileLock
    made: list[Path] = field(default_factory=list)  # folders made for the lock file, innermost first

    def release(self) -> None:
        if not self.lock.is_locked:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()  # while still held: a waiter on the old inode opens the name again
        self.lock.release()  # drops the flock and closes the descriptor
        _remove_empty(self.made)  # a refused command leaves no empty folder behind; a used one stays


def _remove_empty(folders: list[Path]) -> None:
    """Remove these folders (innermost first) while they are empty."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


def _make_parents(folder: Path) -> list[Path]:
    """Make `folder` and its missing parents; the ones made, innermost first."""
    missing = []
    here = folder
    while not here.exists() and here != here.parent:
        missing.append(here)
        here = here.parent
    folder.mkdir(parents=True, exist_ok=True)
    return missing


def acquire(
    store: str | Path,
    what: str = "store",
    advice: str = "pass --store PATH for another store",
    on_wait: Callable[[str], None] | None = None,
) -> FolderLock:
    """Take the lock of a store (or of another folder one process writes at a time: a run, a sweep)
    now, or raise FolderBusy naming the holder. With `on_wait`, wait instead: it is called once
    with the holder's description, then the lock is taken when the holder lets go (or dies).
    `what` and `advice` word the refusal. Folders made for the lock file are removed again on
    release when they are still empty."""
    path = lock_path(store)
    made = _make_parents(path.parent)
    try:
        lock = _take(path, store, what, advice, on_wait)
    except BaseException:
        _remove_empty(made)
        raise
    return FolderLock(path, lock, made)


def _take(
    path: Path,
    store: str | Path,
    what: str,
    advice: str,
    on_wait: Callable[[str], None] | None,
) -> Any:
    from filelock import FileLock, Timeout

    # thread_local off: the hold is the FolderLock's, not its thread's (filelock's per-thread holds
    # would make a release from another thread do nothing)
    lock = FileLock(
        path,
        mode=0o644,
        thread_local=False,
        fallback_to_soft=False,
        on_acquired=lambda fd: _claim(fd, path, store),
    )
    info = None
    while info is None:  # None: its holder released it (and removed the file) as we tried: again
        try:
            with _said(path):
                lock.acquire(blocking=False)
            return lock
        except Timeout:
            info = _record_at(path)
    if on_wait is not None:
        on_wait(holder_text(info))
        with _said(path):
            lock.acquire()  # polls; a file the holder removes on release is opened again
        return lock
    hint = (
        f"; that process has ended, but a process it started holds the lock: end it (`fuser {path}` "
        "lists it), then run the same command again"
        if same_host_and_dead(info)
        else f"; wait for it to finish, or {advice}"
    )
    raise FolderBusy(
        f"{what} {Path(store)} is being written by another tosca process ({holder_text(info)}){hint}"
    )


@contextlib.contextmanager
def _said(path: Path) -> Iterator[None]:
    """What is in the way of the lock file, in one line: a link (never followed), a folder, a hard
    link (filelock refuses one in a folder others can write), a filesystem without flock. Other
    OSErrors (a read-only or full disk) pass on as they are."""
    try:
        yield
    except OSError as exc:
        try:
            why = _in_the_way(path, os.lstat(path))
        except OSError:
            why = None
        if why is not None:
            raise UserError(why) from None
        if exc.errno in (errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP):
            raise UserError(
                f"cannot lock {path} ({exc.strerror}): this filesystem does not support file locks; "
                "put the store on a local disk or an NFSv4 share"
            ) from exc
        raise


def _in_the_way(path: Path, info: os.stat_result) -> str | None:
    """Why what is at the lock's name (as lstat or fstat found it) cannot be tosca's lock file."""
    if stat.S_ISLNK(info.st_mode):  # in a shared folder, planted to have tosca write through it
        return f"{path} is a symbolic link: tosca does not follow one for its lock; remove it"
    if not stat.S_ISREG(info.st_mode):  # a folder, a fifo, a device
        return f"{path} is not a regular file: tosca needs that name for its lock; move it away"
    if info.st_nlink > 1:
        return (
            f"{path} has {info.st_nlink} hard links: another name shares this file, and tosca never writes "
            "its lock record through a name it did not make; move it away"
        )
    return None


def _claim(fd: int, path: Path, store: str | Path) -> None:
    """Run by filelock with the lock just taken, before `acquire` returns (raising gives it up):
    the file must be a regular one of its own, empty (just made, or by a holder that died before
    writing) or a record tosca wrote; then the record of who holds it (advice for people) goes in."""
    info = os.fstat(fd)
    why = _in_the_way(path, info)
    if why is not None:
        raise UserError(why)
    if info.st_size and "pid" not in _read_record(fd):  # someone's file that happens to have the name
        raise UserError(
            f"{path} is in the way of tosca's lock for {Path(store).name} and was not written by "
            "tosca; move it away (tosca never rewrites or deletes a file it did not make)"
        )
    record = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": " ".join(sys.argv)[:300],
    }
    with contextlib.suppress(OSError):  # the record is advice; a full disk must not stop here
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)


@contextlib.contextmanager
def folder_lock(
    store: str | Path,
    what: str = "store",
    advice: str = "pass --store PATH for another store",
    on_wait: Callable[[str], None] | None = None,
) -> Iterator[FolderLock]:
    lock = acquire(store, what, advice, on_wait)
    try:
        yield lock
    finally:
        lock.release()


def holder(store: str | Path) -> str | None:
    """Who may be writing the store now, from its lock record; None when nobody does.

    Reads the record only (probing the flock could make a starting writer fail): a record whose
    process ended on this host means nobody; one from another host cannot be checked from here.
    """
    info = _record_at(lock_path(store))
    if not info or same_host_and_dead(info):
        return None
    return holder_text(info)
