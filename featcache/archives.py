"""Unpack a dataset archive once into the cache folder and find it there next time."""

from __future__ import annotations

import hashlib
import shutil
import tarfile
import zipfile
from pathlib import Path

from featcache.errors import UserError

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip", ".tar.bz2", ".tar.xz")
_DONE_MARK = ".unpacked"


def is_archive(path: Path) -> bool:
    return path.is_file() and path.name.lower().endswith(ARCHIVE_SUFFIXES)


def file_sha256(path: Path, block: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(block):
            digest.update(chunk)
    return digest.hexdigest()


def _stem(path: Path) -> str:
    name = path.name
    for suffix in ARCHIVE_SUFFIXES:
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return name


def _safe_members(tar: tarfile.TarFile, dest: Path) -> list[tarfile.TarInfo]:
    root = dest.resolve()
    members = []
    for member in tar.getmembers():
        target = (dest / member.name).resolve()
        if root not in target.parents and target != root:
            raise UserError(f"archive member {member.name!r} would land outside {dest}; refusing to unpack")
        if member.isfile() or member.isdir():
            members.append(member)
    return members


def unpack_once(archive: Path, cache_dir: Path) -> tuple[Path, str]:
    """Return (folder with the archive's contents, the archive's sha256).

    The folder is keyed by content hash, filled in a temporary sibling and renamed into place,
    so an interrupted unpack never looks finished and a changed archive never reuses old files.
    """
    sha = file_sha256(archive)
    dest = cache_dir / "_unpacked" / f"{_stem(archive)}-{sha[:12]}"
    if (dest / _DONE_MARK).exists():
        return dest, sha
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        if archive.name.lower().endswith(".zip"):
            with zipfile.ZipFile(archive) as zf:
                for name in zf.namelist():
                    target = (tmp / name).resolve()
                    if tmp.resolve() not in target.parents and target != tmp.resolve():
                        raise UserError(
                            f"archive member {name!r} would land outside {tmp}; refusing to unpack"
                        )
                zf.extractall(tmp)
        else:
            with tarfile.open(archive) as tar:
                tar.extractall(tmp, members=_safe_members(tar, tmp), filter="data")
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise UserError(f"cannot unpack {archive}: {exc}") from exc
    (tmp / _DONE_MARK).write_text(sha + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest, sha
