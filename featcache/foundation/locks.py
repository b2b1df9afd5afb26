"""One writer per folder (a store, a run, a sweep, an archive's unpacking): an advisory lock file
beside the folder, held with `fcntl.flock`.

Why flock: the kernel drops the lock the moment its holder dies (SIGKILL, OOM, a crash), so a
dead process never blocks the next extraction and there is no stale-lock guessing. The file
also records who holds it (pid, host, start time, command) for the refusal message; that
record is advice for people, never what decides.

The lock lives beside the store (`<store>.lock`), not inside it: `--overwrite` replaces the
store folder as a whole, and the lock must outlive that. On a cluster, only the process that
runs `tosca extract` holds it; the Dask workers it drives write chunks under it.

Import-light (stdlib only).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
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

from featcache.foundation.errors import UserError
from featcache.foundation.files import parse_json
from featcache.foundation.text import tell


class FolderBusy(UserError):
    """Another live process holds the folder's lock."""


def lock_path(store: str | Path) -> Path:
    """`<folder>.lock` beside the folder itself: links resolved, so a folder reached through a
    symbolic link has the same lock as by its own path (two writers would not see each other), and
    `.` (a run folder one stands in) has a name to put it beside."""
    store = Path(store).resolve()
    return store.with_name(store.name + ".lock")


def _holder_text(info: dict[str, Any]) -> str:
    """'pid 123 on host a since 2026-11-30T01:02:03Z' from a lock file's record (any part may be missing)."""
    parts = []
    if "pid" in info:
        parts.append(f"pid {info['pid']}")
    if "host" in info:
        parts.append(f"on {info['host']}")
    if "started" in info:
        parts.append(f"since {info['started']}")
    return " ".join(str(p) for p in parts) or "another process"


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


def _same_host_and_dead(info: dict[str, Any]) -> bool:
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


# How long a rerun waits for the helper processes of a writer that was killed (its loader workers,
# forked with the lock's descriptor, hold the lock until they exit; they are told to die with it,
# see featcache.foundation.processes, so this is a bound, not what a rerun usually waits).
HELPERS_EXIT_SECONDS = 30.0
_POLL_SECONDS = 0.05


@dataclass
class FolderLock:
    """A held lock; `release()` (or leaving `folder_lock`'s block) gives it up."""

    path: Path
    fd: int
    made: list[Path] = field(default_factory=list)  # folders made for the lock file, innermost first

    def release(self) -> None:
        if self.fd < 0:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()  # while still held: a waiter on the old inode retries (see acquire)
        os.close(self.fd)  # closing drops the flock
        self.fd = -1
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


def _wait_for_helpers(fd: int, path: Path, store: str | Path, info: dict[str, Any]) -> dict[str, Any] | None:
    """The lock is held but its recorded holder ended on this host: its helper processes still hold
    it while they exit. Wait for them, at most HELPERS_EXIT_SECONDS, saying so once. None when the
    lock was taken; the record of whoever holds it instead (a live writer that took it meanwhile)."""
    tell(
        f"waiting: the tosca process that wrote {store} ({_holder_text(info)}) has ended; its helper "
        f"processes are exiting (at most {HELPERS_EXIT_SECONDS:.0f} s)"
    )
    deadline = time.monotonic() + HELPERS_EXIT_SECONDS
    while time.monotonic() < deadline:
        time.sleep(_POLL_SECONDS)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return None
        except BlockingIOError:
            now = _read_record(fd)
            if now != info and not _same_host_and_dead(now):
                return now  # a live writer took it: the usual refusal
    return info


def acquire(
    store: str | Path,
    what: str = "store",
    advice: str = "pass --store PATH for another store",
    on_wait: Callable[[str], None] | None = None,
) -> FolderLock:
    """Take the lock of a store (or of another folder one process writes at a time: a run, a sweep)
    now, or raise FolderBusy naming the holder. With `on_wait`, wait instead: it is called once
    with the holder's description, then the lock is taken when the holder lets go (or dies).
    A holder that ended on this host whose helper processes still hold the lock is waited for
    (at most HELPERS_EXIT_SECONDS, with one line saying so): a rerun right after a kill resumes.
    `what` and `advice` word the refusal. Folders made for the lock file are removed again on
    release when they are still empty."""
    path = lock_path(store)
    made = _make_parents(path.parent)
    try:
        lock = _acquire(path, store, what, advice, on_wait)
    except BaseException:
        _remove_empty(made)
        raise
    lock.made = made
    return lock


def _acquire(
    path: Path,
    store: str | Path,
    what: str,
    advice: str,
    on_wait: Callable[[str], None] | None,
) -> FolderLock:
    while True:
        fd = _open_lock_file(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            info = _read_record(fd)
            if on_wait is not None:
                on_wait(_holder_text(info))
                on_wait = None  # said once
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                except OSError:
                    os.close(fd)
                    raise
                if not _still_the_file(fd, path):
                    os.close(fd)
                    continue
                return _record(fd, path)
            dead = _same_host_and_dead(info)
            if dead:
                holder_now = _wait_for_helpers(fd, path, store, info)
                if holder_now is None:
                    if not _still_the_file(fd, path):
                        os.close(fd)
                        continue
                    return _record(fd, path)
                dead = _same_host_and_dead(holder_now)
                info = holder_now
            os.close(fd)
            hint = (
                f"; that process has ended, but processes it started still hold the lock after "
                f"{HELPERS_EXIT_SECONDS:.0f} s: end them (`fuser {path}` lists them), then run the same "
                "command again"
                if dead
                else f"; wait for it to finish, or {advice}"
            )
            raise FolderBusy(
                f"{what} {Path(store)} is being written by another tosca process ({_holder_text(info)}){hint}"
            ) from None
        except OSError as exc:  # a filesystem without flock
            os.close(fd)
            raise UserError(
                f"cannot lock {path} ({exc.strerror}): this filesystem does not support file locks; "
                "put the store on a local disk or an NFSv4 share"
            ) from exc
        if not _still_the_file(fd, path):  # the previous holder unlinked it as we opened it
            os.close(fd)
            continue
        if not _is_lock_record(fd):  # someone's file that happens to have the lock's name
            os.close(fd)
            raise UserError(
                f"{path} is in the way of tosca's lock for {Path(store).name} and was not written by "
                "tosca; move it away (tosca never rewrites or deletes a file it did not make)"
            )
        return _record(fd, path)


def _open_lock_file(path: Path) -> int:
    """The lock file, made when missing; never through a symbolic link (in a shared folder, a link
    planted there would have tosca write its record into the link's target) nor onto a fifo."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UserError(
                f"{path} is a symbolic link: tosca does not follow one for its lock; remove it"
            ) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UserError(f"{path} is not a regular file: tosca needs that name for its lock; move it away")
    return fd


def _is_lock_record(fd: int) -> bool:
    """Empty (just made, here or by a holder that died before writing) or a record tosca wrote."""
    try:
        if os.fstat(fd).st_size == 0:
            return True
    except OSError:
        return False
    return "pid" in _read_record(fd)


def _still_the_file(fd: int, path: Path) -> bool:
    """The locked inode is still the one at `path` (a releasing holder unlinks its file)."""
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


def _record(fd: int, path: Path) -> FolderLock:
    """Write who holds the lock (advice for people) and hand the held lock out."""
    record = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": " ".join(sys.argv)[:300],
    }
    with contextlib.suppress(OSError):  # the record is advice; a full disk must not stop here
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)
    return FolderLock(path, fd)


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
    path = lock_path(store)
    try:  # never through a link, never waiting on a fifo: what is there may not be tosca's
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        info = _read_record(fd)
    finally:
        os.close(fd)
    if not info or _same_host_and_dead(info):
        return None
    return _holder_text(info)
