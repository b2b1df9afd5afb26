"""Unpack a dataset archive once into the cache folder and find it there next time.

One unpacking at a time: the folder is keyed by the archive's sha256 and filled under a lock
(`<folder>.lock`, held with flock). A second extraction of the same archive waits for the first
and then reuses its folder; it never removes files the first is reading. The contents go into a
temporary folder of this process and are renamed into place with a done mark, so an interrupted
unpack never looks finished and a changed archive never reuses old files.

Bounded: before anything is written, the archive's total unpacked size must fit the free disk and
at most `MAX_RATIO` times the archive's own size (a zip bomb is refused in one line). Members
that would land outside the folder refuse the archive, and so do two members that would land on
one path (`a/x.png` twice, or as `a/./x.png` and `a//x.png`: one would silently replace the
other); links are kept when they point inside it and counted, not followed, when they point
outside (`LeftOut`).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import lzma
import os
import shutil
import stat
import tarfile
import tempfile
import time
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

from featcache.store.left_out import LINK_OUTSIDE, NOT_A_FILE, LeftOut
from tosca_foundation import atomic
from tosca_foundation.errors import UserError
from tosca_foundation.files import disk_errors, read_json
from tosca_foundation.fingerprints import file_sha256
from tosca_foundation.limits import require_disk
from tosca_foundation.locks import folder_lock
from tosca_foundation.text import printable
from tosca_foundation.units import human_bytes

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip", ".tar.bz2", ".tar.xz")
_DONE_MARK = ".unpacked"
MAX_RATIO = 100  # unpacked bytes per archive byte; images barely compress, a bomb compresses 1000x
# Who hears that this process waits for another one unpacking the same archive (the command line
# prints it); set with `waiting_notice`.
_ON_WAIT: contextvars.ContextVar[Callable[[str], None] | None] = contextvars.ContextVar(
    "on_wait", default=None
)


# what reading a damaged, encrypted or unsupported archive raises (zipfile: RuntimeError for a
# password, NotImplementedError for a compression method it lacks; zlib/lzma for corrupt streams)
UNREADABLE = (
    tarfile.TarError,
    zipfile.BadZipFile,
    EOFError,
    OSError,
    RuntimeError,
    NotImplementedError,
    zlib.error,
    lzma.LZMAError,
    ValueError,
)


@contextlib.contextmanager
def waiting_notice(callback: Callable[[str], None]):  # type: ignore[no-untyped-def]
    """Within the block, an unpacking that waits for another process calls `callback(holder)`."""
    token = _ON_WAIT.set(callback)
    try:
        yield
    finally:
        _ON_WAIT.reset(token)


def is_archive(path: Path) -> bool:
    return path.is_file() and path.name.lower().endswith(ARCHIVE_SUFFIXES)


def _stem(path: Path) -> str:
    name = path.name
    for suffix in ARCHIVE_SUFFIXES:
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return name


def _inside(root: Path, name: str) -> bool:
    target = (root / name).resolve()
    return target == root or root in target.parents


def _check_size(archive: Path, total: int, dest: Path) -> None:
    size = max(1, archive.stat().st_size)
    if total > MAX_RATIO * size:
        raise UserError(
            f"archive {archive} would unpack to {human_bytes(total)}, {total / size:,.0f} times its own size "
            f"(the limit is {MAX_RATIO}x; a compressed bomb, not a dataset?): refusing to unpack it"
        )
    require_disk(f"unpacking {archive}", total, dest.parent, "free some space or pass --cache-dir elsewhere")


def check_archive(archive: Path, dest: Path) -> None:
    """Before anything is written: every member lands inside `dest`, and the whole fits the disk and
    the ratio limit (one pass over the archive's headers; a compressed tar is read through once)."""
    try:
        if archive.name.lower().endswith(".zip"):
            with zipfile.ZipFile(archive) as zf:
                members = [(info.filename, info.file_size, info.is_dir()) for info in zf.infolist()]
            landing = _zip_landing
        else:
            with tarfile.open(archive) as tar:
                members = [(m.name, m.size if m.isfile() else 0, m.isdir()) for m in tar.getmembers()]
                _check_read_to_end(archive, tar)
            landing = _tar_landing
    except UNREADABLE as exc:
        raise UserError(f"cannot unpack {archive}: {_why(exc)}") from exc
    root = dest.resolve()
    for name, _, _ in members:
        if not _inside(root, name):
            raise UserError(f"archive member {name!r} would land outside {dest}; refusing to unpack")
    _refuse_members_of_one_path(archive, [(name, landing(name), folder) for name, _, folder in members])
    _check_size(archive, sum(size for _, size, _ in members), dest)


def _zip_landing(name: str) -> str:
    """Where zipfile unpacks a member: its name without empty, `.` and `..` parts."""
    return "/".join(part for part in name.split("/") if part not in ("", ".", ".."))


def _tar_landing(name: str) -> str:
    """Where tarfile unpacks a member: its name joined to the folder (leading `/` dropped), normalised."""
    return os.path.normpath(name.lstrip("/"))


def _refuse_members_of_one_path(archive: Path, members: list[tuple[str, str, bool]]) -> None:
    """Two members (name, where it unpacks, a folder?) that unpack to one path, other than a folder
    listed twice: the second would silently replace the first (zip and tar both allow it), so which
    image a class holds would depend on the order of the archive. Refused, naming both."""
    seen: dict[str, tuple[str, bool]] = {}
    for name, landing, folder in members:
        if landing not in seen:
            seen[landing] = (name, folder)
            continue
        first, first_is_folder = seen[landing]
        if not (folder and first_is_folder):
            same = (
                f"twice as {printable(name)}"
                if first == name
                else f"as {printable(first)} and {printable(name)}"
            )
            raise UserError(
                f"archive {printable(archive)} holds two members that unpack to one path, {printable(landing)} "
                f"({same}): one would silently replace the other; keep one of them and pack the archive again"
            )


def _check_read_to_end(archive: Path, tar: tarfile.TarFile) -> None:
    """Python's tarfile takes a damaged header after the first for the archive's end: the members
    after it would be left out without a word. What follows the last header must be padding."""
    tar.fileobj.seek(tar.offset)  # type: ignore[union-attr]
    while chunk := tar.fileobj.read(1 << 20):  # type: ignore[union-attr]
        if chunk.strip(b"\0"):
            last = tar.members[-1].name if tar.members else "the start"
            raise UserError(
                f"cannot unpack {archive}: its headers stop after {last!r} but data follows "
                "(a damaged header); the archive is not whole"
            )


def _why(exc: BaseException) -> str:
    """An unpacking error on one line (tarfile lists every method it tried, one per line)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def _zip_link(info: zipfile.ZipInfo) -> bool:
    """A zip member stored as a symbolic link (`zip -y`): Unix mode bits in its external attributes."""
    return stat.S_ISLNK(info.external_attr >> 16)


def _unpack_zip(archive: Path, tmp: Path, left_out: LeftOut) -> None:
    """zipfile writes a link member as a small file holding the link's target: links are made as
    links here instead, under the rule tar's are (kept inside the archive, counted outside it)."""
    with zipfile.ZipFile(archive) as zf:
        infos = zf.infolist()
        links = [info for info in infos if _zip_link(info)]
        zf.extractall(tmp, members=[info for info in infos if not _zip_link(info)])
        root = tmp.resolve()
        for info in links:
            target = zf.read(info).decode("utf-8", "surrogateescape")
            where = tmp / info.filename.rstrip("/")
            if os.path.isabs(target) or not _inside(root, str(where.parent.relative_to(tmp) / target)):
                left_out.add(LINK_OUTSIDE, Path(info.filename))
                continue
            where.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(target, where)
        for info in infos:  # zipfile leaves the time of unpacking: take the archive's, as tar does
            if _zip_link(info):
                continue
            stamp = time.mktime((*info.date_time, 0, 0, -1))
            with contextlib.suppress(OSError):
                os.utime(tmp / info.filename, (stamp, stamp))


def _unpack_tar(archive: Path, tmp: Path, left_out: LeftOut) -> None:
    with tarfile.open(archive) as tar:

        def keep(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
            if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
                left_out.add(NOT_A_FILE, Path(member.name))  # a device, a fifo: counted, never made
                return None
            try:
                return tarfile.data_filter(member, path)
            except tarfile.FilterError:
                if member.issym() or member.islnk():
                    left_out.add(LINK_OUTSIDE, Path(member.name))
                    return None
                raise

        tar.extractall(tmp, filter=keep)


def unpack_once(
    archive: Path, cache_dir: Path, on_wait: Callable[[str], None] | None = None
) -> tuple[Path, str, LeftOut]:
    """(folder with the archive's contents, the archive's sha256, links left out).

    Waits, after calling `on_wait` once with who holds it, while another process unpacks the same
    archive into the same cache, then reuses its folder.
    """
    sha = file_sha256(archive)
    dest = Path(cache_dir) / "_unpacked" / f"{_stem(archive)}-{sha[:12]}"
    if not _marked(dest):
        check_archive(archive, dest)  # before anything is written
    with disk_errors(dest.parent, "preparing to unpack the archive"):
        dest.parent.mkdir(parents=True, exist_ok=True)
    wait = on_wait or _ON_WAIT.get() or (lambda holder: None)
    with folder_lock(dest, "archive folder", "", on_wait=wait):
        found = _read_mark(dest / _DONE_MARK) if _marked(dest) else None
        if found is not None:
            return dest, sha, found
        left_out = LeftOut()
        for leftover in dest.parent.glob(f"{dest.name}.partial*"):  # killed unpackers (we hold the lock)
            shutil.rmtree(leftover, ignore_errors=True)  # a link by that name is never followed
        tmp: Path | None = None
        try:
            with disk_errors(dest.parent, f"unpacking {archive}"):
                # a new folder of a name nobody can guess: nothing planted can be in it, or be it
                tmp = Path(tempfile.mkdtemp(prefix=f"{dest.name}.partial-{os.getpid()}-", dir=dest.parent))
                tmp.chmod(0o777 & ~_umask())  # as a folder made the usual way (mkdtemp makes it private)
                if archive.name.lower().endswith(".zip"):
                    _unpack_zip(archive, tmp, left_out)
                else:
                    _unpack_tar(archive, tmp, left_out)
                atomic.write_text(
                    tmp / _DONE_MARK, json.dumps({"sha256": sha, "left_out": left_out.attrs()}) + "\n"
                )
                shutil.rmtree(dest, ignore_errors=True)  # an unmarked folder: not known to be whole
                tmp.rename(dest)
        except OSError as exc:
            raise UserError(f"cannot unpack {archive}: {exc.strerror or _why(exc)}") from exc
        except UNREADABLE as exc:  # encrypted or unsupported zip members, corrupt streams
            raise UserError(f"cannot unpack {archive}: {_why(exc)}") from exc
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    shutil.rmtree(tmp)
    return dest, sha, left_out


def _umask() -> int:
    """This process's umask, read without changing it (Linux); the usual 022 elsewhere."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o022


def _marked(dest: Path) -> bool:
    """The folder holds its done mark: a regular file (a link or a fifo by that name is not one)
    that records what the unpacking left out."""
    mark = dest / _DONE_MARK
    return mark.is_file() and not mark.is_symlink() and _read_mark(mark) is not None


def _read_mark(mark: Path) -> LeftOut | None:
    """What the unpacking that wrote this done mark left out; None for a mark that records none (a
    build's before the first release, which kept only the sha256, or a damaged one): the archive is
    then unpacked again, so what it leaves out is counted, never taken as nothing."""
    try:  # bounded: a huge or deeply nested mark is one that records nothing
        recorded = read_json(mark, "unpacking mark", "").get("left_out")
    except UserError:
        return None
    return LeftOut.from_attrs(recorded) if isinstance(recorded, dict) else None
