"""One writer at a time for a store on object storage: a lock object beside the store
(`<key>.lock`, as `<store>.lock` lies beside a local store), made with a conditional write that
fails when the object exists (S3's If-None-Match, fsspec's `pipe_file(..., mode="create")`).

Object storage has no flock that the kernel drops when its holder dies, so a held lock says it is
alive: its holder rewrites the record (pid, host, start, command, a token of its own and the time
of its last beat) every `BEAT_SECONDS` from a thread of its own. A lock is stale, and taken over,
when its holder ran on this host and its process is gone, or when its last beat is older than
`STALE_SECONDS` (the clocks of the holder and of the next writer are trusted to within minutes).
A holder that finds at a beat that its lock was taken over (it went unheard for that long) stops
beating and says so in one line when its command ends: what it wrote meanwhile may be mixed with
another writer's chunks, which `tosca cache verify` checks.

An object store whose filesystem offers no conditional write (fsspec raises NotImplementedError)
gets no lock: writing there is refused in one line, naming the way that needs none (write the
store locally, then `tosca cache push`). A server that ignores the condition (some S3 look-alikes)
cannot be told from one that honours it; the token read back after the write catches two writers
that raced to the very same moment only when the second write landed first.

`store_lock(path)` is the store's lock wherever it lies: this one on object storage, the
`folder_lock` of `tosca_foundation.locks` on a disk.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from featcache.store.object_store import ObjectStoreError, ObjectStorePath, object_errors, store_location
from tosca_foundation.errors import UserError
from tosca_foundation.files import parse_json
from tosca_foundation.locks import FolderBusy, folder_lock, holder_text, same_host_and_dead

BEAT_SECONDS = 30.0  # how often a holder says it is alive
STALE_SECONDS = 300.0  # a lock unheard of for this long is its dead holder's
_RECORD_LIMIT = 4096


def lock_key(location: ObjectStorePath) -> str:
    """The lock object's key: beside the store, never under it (an overwrite deletes what is under
    the store's key; `cache ls` finds stores by `.zarr/zarr.json`, never this)."""
    return f"{location.key}.lock"


@dataclass
class ObjectLock:
    """A held lock on object storage; its beat runs until `release`."""

    location: ObjectStorePath
    record: dict[str, Any]
    lost: str | None = None  # why the lock is no longer this holder's (found at a beat)
    _stop: threading.Event = field(default_factory=threading.Event)
    _beat: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"{self.location.protocol}://{lock_key(self.location)}"

    def start_beating(self) -> None:
        self._beat = threading.Thread(target=self._beat_loop, name="tosca-lock-beat", daemon=True)
        self._beat.start()

    def _beat_loop(self) -> None:
        while not self._stop.wait(BEAT_SECONDS) and self.beat_once():
            pass

    def beat_once(self) -> bool:
        """Say this holder is alive (its record rewritten with the time now); False, with `lost`
        set, when the lock is no longer its own. A beat the network loses is tried again later."""
        try:
            found = _read_record(self.location)
            if found is None or found.get("token") != self.record["token"]:
                self.lost = (
                    "deleted"
                    if found is None
                    else f"taken over by {holder_text(found) if found else 'an object tosca did not write'}"
                )
                return False
            self.record["beat"] = time.time()
            _write_record(self.location, self.record, create=False)
        except Exception:  # a beat missed (the network): the next one tries again
            pass
        return True

    def release(self, tidy: bool = True) -> None:
        """Stop beating and delete the lock object when it is still this holder's; not `tidy`
        (object storage just failed to answer): leave it, stale once its beat stops, rather than
        wait on the client's retries a second time."""
        self._stop.set()
        if self._beat is not None:
            self._beat.join()
        if self.lost is not None or not tidy:
            return
        with contextlib.suppress(Exception):  # a lock left behind is stale once its beat stops
            found = _read_record(self.location)
            if found is not None and found.get("token") == self.record["token"]:
                self.location.filesystem().rm_file(lock_key(self.location))


def _read_record(location: ObjectStorePath) -> dict[str, Any] | None:
    """The lock object's record; None when there is none; {} when the object is no record tosca
    wrote (read bounded: whatever lies there)."""
    fs = location.filesystem()
    try:
        data = fs.cat_file(lock_key(location), start=0, end=_RECORD_LIMIT)
    except FileNotFoundError:
        return None
    try:
        record = parse_json(data, "lock record")  # its nesting checked before it is parsed
    except UserError:
        return {}
    return record if isinstance(record, dict) and "token" in record else {}


def _write_record(location: ObjectStorePath, record: dict[str, Any], create: bool) -> None:
    fs = location.filesystem()
    data = json.dumps(record).encode()
    if create:
        fs.pipe_file(lock_key(location), data, mode="create")
    else:
        fs.pipe_file(lock_key(location), data)


def _stale(record: dict[str, Any]) -> bool:
    """A record whose holder is gone: dead on this host, or unheard of for `STALE_SECONDS`."""
    beat = record.get("beat")
    if same_host_and_dead(record):
        return True
    return isinstance(beat, (int, float)) and time.time() - float(beat) > STALE_SECONDS


def acquire_object_lock(location: ObjectStorePath, what: str, advice: str) -> ObjectLock:
    """Take the store's lock now, or raise FolderBusy naming its holder (a stale lock is taken
    over, once: a second writer taking it over at the same moment wins or is refused)."""
    record = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": " ".join(sys.argv)[:300],
        "token": secrets.token_hex(16),
        "beat": time.time(),
    }
    lock = ObjectLock(location, record)
    with object_errors(location, "taking the store's lock"):
        for attempt in range(2):
            try:
                _write_record(location, record, create=True)
            except NotImplementedError:
                raise UserError(
                    f"{location}: this object store offers no conditional write, so tosca cannot make "
                    "sure one writer at a time writes there; write the store locally, then `tosca cache "
                    "push STORE URL` copies it"
                ) from None
            except FileExistsError:
                found = _read_record(location)
                if found is None:  # its holder let go as we tried: again
                    continue
                if found == {}:
                    raise UserError(
                        f"{lock.url} is in the way of tosca's lock for {location.name} and was not "
                        "written by tosca; delete it if nothing writes the store"
                    ) from None
                if attempt == 0 and _stale(found):
                    location.filesystem().rm_file(lock_key(location))
                    continue
                raise FolderBusy(
                    f"{what} {location} is being written by another tosca process ({holder_text(found)}, "
                    f"last heard of {_ago(found)}); wait for it to finish, or {advice} (a lock unheard "
                    f"of for {STALE_SECONDS / 60:g} minutes is taken over)"
                ) from None
            found = _read_record(location)
            if found is None or found.get("token") != record["token"]:  # a server that ignored the condition
                raise FolderBusy(
                    f"{what} {location} was locked by another writer at the same moment; run again"
                ) from None
            lock.start_beating()
            return lock
    raise FolderBusy(f"{what} {location}: its lock changed hands while taken; run again")


def _ago(record: dict[str, Any]) -> str:
    beat = record.get("beat")
    if not isinstance(beat, (int, float)):
        return "at an unknown time"
    seconds = max(0.0, time.time() - float(beat))
    return f"{seconds:.0f} s ago" if seconds < 120 else f"{seconds / 60:.0f} min ago"


def object_holder(location: ObjectStorePath) -> str | None:
    """Who may be writing the store now, from its lock object; None when nobody does (no lock, or
    a stale one). Unreachable storage says nobody: `cache verify` reads the store itself next."""
    try:
        found = _read_record(location)
    except Exception:
        return None
    if found is None or (found and _stale(found)):
        return None
    return holder_text(found) if found else "a process that wrote no tosca record"


@contextlib.contextmanager
def object_lock(
    location: ObjectStorePath, what: str = "store", advice: str = "pass --store PATH for another store"
) -> Iterator[ObjectLock]:
    """The lock held for the block; a lock found taken over is one line when the block ends."""
    lock = acquire_object_lock(location, what, advice)
    failed: BaseException | None = None
    try:
        yield lock
    except BaseException as exc:
        failed = exc
        raise
    finally:
        lock.release(tidy=not isinstance(failed, ObjectStoreError))
        if lock.lost is not None and failed is None:
            raise UserError(
                f"{what} {location}: this writer's lock was {lock.lost} while it wrote; check the store "
                "with `tosca cache verify` before using it"
            )


@contextlib.contextmanager
def store_lock(
    path: str | Path | ObjectStorePath,
    what: str = "store",
    advice: str = "pass --store PATH for another store",
) -> Iterator[Any]:
    """The store's one-writer lock wherever it lies (object storage or a disk)."""
    location = store_location(path)
    if isinstance(location, ObjectStorePath):
        with object_lock(location, what, advice) as lock:
            yield lock
    else:
        with folder_lock(location, what, advice) as lock:
            yield lock
