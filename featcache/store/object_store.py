"""Stores on object storage: `--store s3://bucket/cifar100.zarr` (s3 through s3fs, which the
`cloud` extra installs; gs through gcsfs, az through adlfs, installed by hand; fsspec's other
protocols, ftp or zip or memory, hold no store every worker reads and are refused).

Where a store is named (`store_location`): a URL `scheme://...` is a location on object storage,
`file://` and anything else a local path. The command line hands a `--store` over as a path, and
pathlib folds `s3://b/k` into `s3:/b/k`: a first part `scheme:` of two or more letters is read
back as that URL (a Windows drive `C:` is one letter), so the one rule holds for the command line
and the Python API alike.

What is read there is checked as a local store is (`FeatureStore.open`): the listing of the
store's objects stands for the walk of its folder (no link, fifo or device exists on object
storage; depth, metadata size, chunk sizes and the layout are checked the same), and every read
of a chunk goes through zarr's FsspecStore made to turn the object store's failures into one line
(`ObjectStoreError`): wrong credentials, a missing bucket, a server that went away mid-read, each
said as what it is, never as a damaged store.

Credentials and the endpoint come from the object store's own settings, as its other tools read
them (for s3: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, ~/.aws; for gs:
GOOGLE_APPLICATION_CREDENTIALS): a Dask worker started with the same environment reads the same
store, so a cluster needs no shared filesystem to read one.

Writing in place (`tosca extract`, `tosca import`, `tosca cache verify --fix` with a store's URL)
keeps a local store's guarantees with what object storage offers: one writer at a time through a
lock object made with a conditional write (`featcache.store.object_lock`), a store that appears
whole or not at all by the order of its writes (`featcache.store.object_writing`), each chunk one
object put whole and marked done after its values and checksum. `tosca cache push` copies a
store written locally.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import re
import weakref
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tosca_foundation.errors import UserError
from tosca_foundation.files import METADATA_LIMIT, check_depth
from tosca_foundation.text import printable
from tosca_foundation.units import human_bytes

_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+):/+(.*)", re.DOTALL)
# the object stores a store may lie on, and the package fsspec reads each with (fsspec knows other
# protocols, ftp or zip or memory among them: none can hold a store every worker reads)
PACKAGES = {
    "s3": "s3fs",
    "s3a": "s3fs",
    "gs": "gcsfs",
    "gcs": "gcsfs",
    "az": "adlfs",
    "abfs": "adlfs",
    "abfss": "adlfs",
}
CLOUD_EXTRA = "pip install 'tosca[cloud]'"  # installs s3fs


class ObjectStoreError(UserError):
    """Object storage could not be read or written: credentials, a bucket, the server or the
    network. Never a finding about the store's values (a reader lets it through where it catches a
    damaged chunk)."""


@dataclass(frozen=True)
class ObjectStorePath:
    """A store's location on object storage: `protocol` (s3, gs, ...) and `key`, the bucket and the
    prefix ("bucket/cifar100.zarr"). Said and recorded as its URL; resolving it gives itself (a
    run's record names the store by `str(path.resolve())`, as it names a local one)."""

    protocol: str
    key: str

    @property
    def url(self) -> str:
        return f"{self.protocol}://{self.key}"

    def __str__(self) -> str:
        return self.url

    def resolve(self) -> ObjectStorePath:
        return self

    def absolute(self) -> ObjectStorePath:
        return self

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1]

    @property
    def bucket(self) -> str:
        return self.key.split("/", 1)[0]

    def filesystem(self) -> Any:
        return filesystem(self.protocol)


def store_location(
    value: str | Path | ObjectStorePath, folder: bool = False, flag: str = "--store"
) -> Path | ObjectStorePath:
    """The store `value` names: a location on object storage for `scheme://...` (or its folded
    form `scheme:/...`, what pathlib makes of it), a local path for `file://...` (always absolute:
    the fold leaves no host to tell apart) or anything else. `folder`: a place stores lie under
    (--cache-dir), which may be a whole bucket. `flag`: how a refusal names the value. A relative
    local folder whose first part ends in ':' reads as a URL: name it by its absolute path."""
    if isinstance(value, ObjectStorePath):
        return value
    text = str(value)
    found = _URL.fullmatch(text)
    if found is None:
        return Path(value)
    protocol, rest = found.group(1).lower(), found.group(2).strip("/")
    text = f"{found.group(1)}://{found.group(2)}"  # as typed, `//` put back where pathlib folded it
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise UserError(f"{flag} {printable(text)}: a location holds no control character (a newline, a tab)")
    if protocol == "file":
        return Path("/" + rest)
    if protocol not in PACKAGES:
        named = ", ".join(f"{p}://" for p in ("s3", "gs", "az"))
        raise UserError(
            f"{flag} {printable(text)}: {protocol}:// is no object storage tosca reads a store from; name "
            f"a local folder (or file://) or a bucket on {named}"
        )
    if not rest or ("/" not in rest and not folder):
        raise UserError(
            f"{flag} {printable(text)} names a bucket but no store in it: give the store's key too "
            f"({protocol}://bucket/store.zarr)"
        )
    if any(part in ("", ".", "..") for part in rest.split("/")):
        raise UserError(f"{flag} {printable(text)}: a store's key has no empty, '.' or '..' part")
    filesystem(protocol)  # a missing package: one line, here
    return ObjectStorePath(protocol, rest)


def require_store_key(location: ObjectStorePath, flag: str) -> None:
    """A store written on object storage has a key ending in .zarr: `cache ls` and --cache-dir
    find stores by it (`stores_under`)."""
    if not location.name.endswith(".zarr"):
        raise UserError(
            f"{flag} {location}: a store's key on object storage ends in .zarr (`cache ls` and "
            f"--cache-dir find stores by it): {location}.zarr?"
        )


def is_remote(value: Any) -> bool:
    return isinstance(value, ObjectStorePath)


def stores_under(root: ObjectStorePath) -> list[ObjectStorePath]:
    """Every folder named *.zarr with a zarr.json under `root` on object storage (`tosca cache ls`,
    a store found by --model and --dataset in a --cache-dir there)."""
    fs = root.filesystem()
    with object_errors(root, "listing the stores under it"):
        fs.invalidate_cache(root.key)
        found = fs.find(root.key)  # no glob: a key's [ ] * ? are its own characters
    prefix = root.key.rstrip("/") + "/"
    return [
        ObjectStorePath(root.protocol, name.rsplit("/", 1)[0])
        for name in sorted(found)
        if name.startswith(prefix) and name.endswith(".zarr/zarr.json")
    ]


def missing_here(value: str | Path) -> bool:
    """A local store path that names nothing (a location on object storage is checked when opened)."""
    location = store_location(value)
    return not is_remote(location) and not Path(location).exists()


_SETTINGS = ("AWS_", "GOOGLE_", "GCSFS_", "AZURE_", "FSSPEC_")  # what a filesystem reads from the environment


def filesystem(protocol: str) -> Any:
    """The fsspec filesystem of `protocol`, one per process and settings (its credentials and
    endpoint from the environment: a process whose settings change gets a filesystem of the new)."""
    settings = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(_SETTINGS)))
    return _filesystem(protocol, settings)


@functools.lru_cache(maxsize=8)
def _filesystem(protocol: str, settings: tuple[tuple[str, str], ...]) -> Any:
    try:
        import fsspec
        from fsspec.registry import known_implementations
    except ImportError:  # pragma: no cover - zarr installs fsspec
        raise UserError(f"reading a store on {protocol}:// needs fsspec: {CLOUD_EXTRA}") from None
    package = PACKAGES.get(protocol, "its fsspec package")
    install = CLOUD_EXTRA if package == "s3fs" else f"pip install {package}"
    if protocol not in known_implementations:
        raise UserError(f"this fsspec knows no {protocol}:// filesystem: {install}")
    try:
        return fsspec.filesystem(protocol, skip_instance_cache=True)
    except ImportError:
        raise UserError(
            f"a store on {protocol}:// needs {package}, which is not installed: {install}"
        ) from None
    except Exception as exc:  # its settings: an endpoint, a credential file, a project
        raise UserError(
            f"the {protocol}:// filesystem could not be set up ({_why(exc)}): check its settings"
        ) from None


# s3's NoSuchBucket as s3fs says it; gcsfs and adlfs say theirs with "bucket" or "container"
_NO_BUCKET = re.compile(
    r"specified bucket does not exist|NoSuchBucket|bucket.*not found|container.*not", re.I
)


def _why(exc: BaseException) -> str:
    """An object store's failure in a few words: what kind, and its own message's start."""
    text = " ".join(str(exc).split())[:120]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def said(location: ObjectStorePath, exc: BaseException, doing: str) -> ObjectStoreError:
    """One line for a failure of object storage while `doing` something with `location`."""
    if isinstance(exc, ObjectStoreError):
        return exc
    if type(exc).__name__ == "ParamValidationError":  # botocore's, for a bucket or key s3 cannot name
        lines = str(
            exc
        ).splitlines()  # "Parameter validation failed:" then 'Invalid bucket name "X": <regex>'
        what = (lines[1] if len(lines) > 1 else lines[0] if lines else "").split(": ")[0].strip()
        return ObjectStoreError(
            f"{location} is no valid {location.protocol} location ({printable(what)[:120]})"
        )
    if isinstance(exc, PermissionError) or "Credentials" in type(exc).__name__:
        return ObjectStoreError(
            f"{location}: access refused while {doing} ({_why(exc)}): check the credentials "
            "(for s3: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or ~/.aws) and the bucket's policy"
        )
    if isinstance(exc, FileNotFoundError) and _NO_BUCKET.search(str(exc)):
        return ObjectStoreError(
            f"{location}: its bucket {location.bucket!r} does not exist (or is not visible with these credentials)"
        )
    if isinstance(exc, FileNotFoundError):
        return ObjectStoreError(
            f"{location}: an object vanished while {doing} ({_why(exc)}): the store was deleted or is being "
            "replaced (a push); run again once it is whole"
        )
    return ObjectStoreError(
        f"{location}: object storage could not be reached while {doing} ({_why(exc)}); check the "
        "endpoint (for s3: AWS_ENDPOINT_URL) and the network, then run again"
    )


@contextmanager
def object_errors(location: ObjectStorePath, doing: str) -> Iterator[None]:
    """Any failure of object storage inside the block as one line (`said`)."""
    try:
        yield
    except UserError:
        raise
    except Exception as exc:
        raise said(location, exc, doing) from None


def listing(location: ObjectStorePath) -> dict[str, int]:
    """Every object under the store's key: its path below the store ("train/features/zarr.json")
    and its size. Listed afresh (a listing cached by an earlier open could be stale)."""
    fs = location.filesystem()
    with object_errors(location, "listing the store"):
        fs.invalidate_cache(location.key)
        found = fs.find(location.key, detail=True, withdirs=False)
    prefix = location.key + "/"
    return {
        name[len(prefix) :]: int(info.get("size") or 0)
        for name, info in found.items()
        if name.startswith(prefix) and info.get("type", "file") == "file"
    }


def read_object(
    location: ObjectStorePath, rel: str, size: int, what: str, limit: int = METADATA_LIMIT
) -> bytes:
    """One object's bytes (`rel` below the store), refused in one line when the listing says it is
    larger than such a file can be (nothing unbounded is read)."""
    if size > limit:
        raise UserError(
            f"{what} {location}/{rel} is larger than such a file can be ({human_bytes(size)}; at most "
            f"{human_bytes(limit)}): it is not one tosca wrote"
        )
    with object_errors(location, f"reading {rel}"):  # at most limit + 1 bytes, whatever it holds now
        data = location.filesystem().cat_file(f"{location.key}/{rel}", start=0, end=limit + 1)
    if len(data) > limit:
        raise UserError(f"{what} {location}/{rel} grew past {human_bytes(limit)} while it was read")
    return data


def has_object(location: ObjectStorePath, rel: str) -> bool:
    """Whether an object lies at `rel` below the store's key, whatever it holds."""
    with object_errors(location, f"looking for {rel}"):
        return bool(location.filesystem().exists(f"{location.key}/{rel}"))


def read_store_attrs(location: ObjectStorePath) -> dict[str, Any] | None:
    """The attributes of the store's zarr.json (None where there is none or it is no JSON object):
    what `check_not_replaced` compares, read bounded."""
    fs = location.filesystem()
    with object_errors(location, "reading zarr.json"):
        try:
            size = int(fs.info(f"{location.key}/zarr.json").get("size") or 0)
        except FileNotFoundError:
            return None
    try:
        text = read_object(location, "zarr.json", size, "store metadata").decode()
        check_depth(text, "zarr.json")
        data = json.loads(text)
    except (UserError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    attributes = data.get("attributes") if isinstance(data, dict) else None
    return attributes if isinstance(attributes, dict) else None


def open_zarr_group(location: ObjectStorePath, listed: Iterable[str] = (), writable: bool = False) -> Any:
    """The store's zarr group, every read and write of it turning the object store's failures into
    one line (`_object_zarr_store`); read-only unless `writable` (its one writer, under the store's
    lock). `listed`: the objects the store's listing held when it was opened; one of them found
    missing later is said vanished, never read as a fill value."""
    import zarr

    with object_errors(location, "opening the store"):
        store = _object_zarr_store().at(location, frozenset(listed), read_only=not writable)
        return zarr.open_group(store, mode="r+" if writable else "r")


def _async_twin(fs: Any) -> Any:
    """The asynchronous twin of a filesystem, which zarr's reads run on: one per filesystem object
    (kept on it: two filesystems of other settings compare equal in fsspec), its connections
    closed when the process ends (else aiohttp says "Unclosed client session" at exit)."""
    twin = getattr(fs, "_tosca_async_twin", None)
    if twin is None:
        twin = type(fs)(**{**fs.storage_options, "asynchronous": True, "skip_instance_cache": True})
        fs._tosca_async_twin = twin
        _TWINS.add(twin)
    return twin


_TWINS: weakref.WeakSet[Any] = weakref.WeakSet()  # the twins alive: one hook closes them at exit


@atexit.register
def _close_twins() -> None:
    """Close each living asynchronous filesystem's client on zarr's loop (s3fs keeps it as `_s3`;
    one that opened none, or another kind, is left to its own finaliser)."""
    for twin in list(_TWINS):
        client = getattr(twin, "_s3", None)
        if client is None:
            continue
        with contextlib.suppress(Exception):
            from zarr.core.sync import sync

            sync(client.__aexit__(None, None, None))


async def _translated(keys: AsyncIterator[str], location: ObjectStorePath, doing: str) -> AsyncIterator[str]:
    """A zarr listing's keys as they come, the object store's failure while listing one line."""
    try:
        async for key in keys:
            yield key
    except Exception as exc:
        raise said(location, exc, doing) from None


@functools.lru_cache(maxsize=1)
def _object_zarr_store() -> type:
    """The class of a store's zarr reads on object storage, made on first use: zarr's FsspecStore
    whose reads turn the object store's failures into `ObjectStoreError` (the command line never
    imports fsspec's async machinery unless a store is on object storage)."""
    from zarr.storage import FsspecStore

    class ObjectZarrStore(FsspecStore):
        location: ObjectStorePath
        listed: frozenset[str]

        @classmethod
        def at(
            cls, location: ObjectStorePath, listed: frozenset[str] = frozenset(), read_only: bool = True
        ) -> Any:
            fs = location.filesystem()
            if not getattr(fs, "async_impl", False):
                from fsspec.implementations.asyn_wrapper import AsyncFileSystemWrapper

                fs = AsyncFileSystemWrapper(fs)
            elif not fs.asynchronous:
                fs = _async_twin(fs)
            store = cls(fs, read_only=read_only, path=location.key)
            store.location, store.listed = location, listed
            return store

        def _vanished(self, key: str) -> ObjectStoreError:
            return ObjectStoreError(
                f"{self.location}: {key} was there when the store was opened and is gone now: the store "
                "was deleted or is being replaced (a push); run again once it is whole"
            )

        async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
            try:
                found = await super().get(key, prototype, byte_range)
            except UserError:
                raise
            except Exception as exc:
                raise said(self.location, exc, f"reading {key}") from None
            if found is None and key in self.listed:  # zarr reads a missing key as fill values
                raise self._vanished(key)
            return found

        async def get_partial_values(self, prototype: Any, key_ranges: Any) -> Any:
            try:
                found = await super().get_partial_values(prototype, key_ranges)
            except UserError:
                raise
            except Exception as exc:
                raise said(self.location, exc, "reading parts of objects") from None
            for (key, _), value in zip(key_ranges, found, strict=False):
                if value is None and key in self.listed:
                    raise self._vanished(key)
            return found

        async def set(self, key: str, value: Any, byte_range: Any = None) -> None:  # one object put whole
            try:
                await super().set(key, value, byte_range)
            except (UserError, TypeError, ValueError, NotImplementedError):  # ours, or zarr's own
                raise
            except Exception as exc:
                raise said(self.location, exc, f"writing {key}") from None

        async def delete(self, key: str) -> None:
            try:
                await super().delete(key)
            except Exception as exc:
                raise said(self.location, exc, f"deleting {key}") from None

        async def exists(self, key: str) -> bool:
            try:
                return await super().exists(key)
            except Exception as exc:
                raise said(self.location, exc, f"looking for {key}") from None

        async def getsize(self, key: str) -> int:
            try:
                return await super().getsize(key)
            except Exception as exc:
                raise said(self.location, exc, f"sizing {key}") from None

        def list(self) -> AsyncIterator[str]:
            return _translated(super().list(), self.location, "listing the store")

        def list_dir(self, prefix: str) -> AsyncIterator[str]:
            return _translated(super().list_dir(prefix), self.location, f"listing {prefix or 'the store'}")

        def list_prefix(self, prefix: str) -> AsyncIterator[str]:
            return _translated(super().list_prefix(prefix), self.location, f"listing {prefix or 'the store'}")

    return ObjectZarrStore
