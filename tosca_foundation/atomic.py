"""Every file tosca writes goes through here: written whole or not at all, never through a link.

A run or sweep folder is read back by resumes, `tosca eval` and `tosca routers`; a process killed
mid-write must leave the previous version or none, never a half-written file that loads. So a
file is written to a temporary file beside its target, flushed, then renamed over it (`writing`).

A folder tosca writes may be shared (a runs folder others can write into), so nothing here
follows a link or writes into something that is not a regular file:
- a symbolic link, dangling or not, or a fifo, a device or a folder where the file goes is
  refused in one line, and the thing it points to is never opened;
- so is a file with more than one hard link: another name shares it (a user's `ln` of a
  results.csv, planted or not), and an append would change that name's file too, a rewrite
  would silently part the two;
- a temporary file is created exclusively (O_CREAT | O_EXCL | O_NOFOLLOW) under a name nobody
  can predict (`.<name>.<pid>.<16 hex digits>.tmp`), written through the descriptor that created
  it, and renamed into place only while it is still that file;
- `remove_stale` recognises the temporary files of writers that were killed (their pid is gone)
  by that name, and deletes only regular files.

Import-light: safetensors is imported by the one writer that needs it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from tosca_foundation.errors import UserError
from tosca_foundation.text import printable

_TOKEN_BYTES = 8  # 16 hex digits in a temporary file's name


def refuse_unsafe_target(path: str | Path) -> None:
    """One line when what is at `path` is not a regular file tosca may replace: a symbolic link (a
    shared folder's user could plant one to have tosca write elsewhere), a fifo, a device, a folder,
    a file another name shares (a hard link)."""
    target = Path(path)
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        return
    _refuse(target, info)


def _refuse(target: Path, info: os.stat_result) -> None:
    if stat.S_ISLNK(info.st_mode):
        raise UserError(
            f"{printable(target)} is a symbolic link: tosca never writes through one (in a shared folder "
            "one can be planted to have it write elsewhere); remove the link"
        )
    if not stat.S_ISREG(info.st_mode):
        kind = "a folder" if stat.S_ISDIR(info.st_mode) else "a fifo, a device or a socket"
        raise UserError(f"{printable(target)} is {kind}, not a file tosca wrote: move it away")
    if info.st_nlink > 1:
        raise UserError(
            f"{printable(target)} has {info.st_nlink} hard links: another name shares this file, and tosca "
            "never changes a file through a name it did not make; replace it with a copy of its own "
            "(cp, then mv over it) or move it away"
        )


def make_folders(path: str | Path, base: str | Path) -> Path:
    """`path` as a folder, with every missing folder between `base` (which must exist) and it made
    here; none of them, `path` included, is ever entered through a link (in a shared folder one can
    be planted to have tosca write elsewhere) or may be something other than a folder: one line
    naming it. `base` itself is the caller's, taken as it is. Returns `path`."""
    base, target = Path(base), Path(path)
    here = base
    for part in target.relative_to(base).parts:
        here = here / part
        try:
            info = os.lstat(here)
        except FileNotFoundError:
            with contextlib.suppress(FileExistsError):  # made meanwhile: checked below
                os.mkdir(here)
            info = os.lstat(here)
        if stat.S_ISLNK(info.st_mode):
            refuse_unsafe_target(here)
        if not stat.S_ISDIR(info.st_mode):
            raise UserError(f"{printable(here)} is a file where tosca makes a folder: move it away")
    return target


def _temporary(target: Path) -> tuple[int, Path]:
    """A new temporary file beside `target`, created exclusively under an unpredictable name."""
    for _ in range(16):
        tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(_TOKEN_BYTES)}.tmp")
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:  # someone made that name first: never reuse what is there
            continue
    raise UserError(f"cannot make a temporary file beside {printable(target)}: every name tried was taken")


@contextlib.contextmanager
def _naming(target: Path) -> Iterator[None]:
    """Within the block, an OSError that names no file (a write or a sync on a full disk) or only
    `target`'s temporary file is raised again naming `target`: the line a user sees ("disk full
    ... in ...") says which file was being written, never "a file" nor a hidden temporary name."""
    try:
        yield
    except OSError as exc:
        named = None if exc.filename is None else Path(os.fsdecode(exc.filename))
        temporary = (
            named is not None
            and named.parent == target.parent
            and named.name.startswith(f".{target.name}.")
            and named.name.endswith(".tmp")
        )
        if exc.errno is None or not (named is None or temporary):
            raise
        raise OSError(exc.errno, exc.strerror, str(target)) from exc


@contextlib.contextmanager
def writing(path: str | Path, mode: str = "w", **open_args: Any) -> Iterator[IO[Any]]:
    """An open file (`mode` "w" or "wb", `open_args` as for `open`) whose contents replace `path`
    when the block ends without error: synced, then renamed over it (atomic on POSIX). On error, or
    when the temporary file was swapped for something else meanwhile, `path` is left as it was; an
    OSError of the writing names `path` (`_naming`)."""
    if mode not in ("w", "wb"):
        raise ValueError(f"writing() writes a new file (w or wb), not {mode!r}")
    target = Path(path)
    refuse_unsafe_target(target)
    with _naming(target), _replacing(target, mode, open_args) as fh:
        yield fh


def _text_args(mode: str, open_args: dict[str, Any]) -> dict[str, Any]:
    """`open_args` with UTF-8 for a text mode unless the caller named an encoding: every text file
    tosca writes goes through here, so none depends on the locale (under LC_ALL=C PYTHONUTF8=0 the
    default is ASCII, and a name or a "±" ended in UnicodeEncodeError with half the files written)."""
    return open_args if "b" in mode else {"encoding": "utf-8", **open_args}


@contextlib.contextmanager
def _replacing(target: Path, mode: str, open_args: dict[str, Any]) -> Iterator[IO[Any]]:
    fd, tmp = _temporary(target)
    try:
        made = os.fstat(fd)
        with os.fdopen(fd, mode, **_text_args(mode, open_args)) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        now = os.lstat(tmp)
        if (now.st_dev, now.st_ino) != (made.st_dev, made.st_ino) or now.st_nlink != 1:
            raise UserError(
                f"the temporary file {printable(tmp)} was replaced or linked to another name while tosca "
                f"wrote it (by another user of {printable(target.parent)}?); {printable(target)} was left "
                "as it was"
            )
        refuse_unsafe_target(target)  # a link planted while the file was written is not replaced either
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def write_bytes(path: str | Path, data: bytes) -> None:
    with writing(path, "wb") as fh:
        fh.write(data)


def write_text(path: str | Path, text: str) -> None:
    with writing(path, "w") as fh:
        fh.write(text)


def write_safetensors(
    path: str | Path, tensors: dict[str, Any], metadata: dict[str, str] | None = None
) -> None:
    from safetensors.torch import save

    write_bytes(path, save({k: v.contiguous() for k, v in tensors.items()}, metadata=metadata))


def save_figure(figure: object, path: str | Path, dpi: int) -> None:
    with writing(path, "wb") as fh:
        figure.savefig(fh, dpi=dpi, format=Path(path).suffix.lstrip("."))  # type: ignore[attr-defined]


def _writer_pid(name: str) -> int | None:
    """The pid in a temporary file's name: `.<name>.<pid>.<16 hex>.tmp` (or `.<name>.<pid>.tmp`,
    as tosca named them before the names were unpredictable); None for any other name."""
    parts = name.removesuffix(".tmp").split(".")
    token = parts[-1]
    if len(parts) >= 3 and len(token) == 2 * _TOKEN_BYTES and parts[-2].isdigit():
        try:
            int(token, 16)
        except ValueError:
            return None
        return int(parts[-2])
    return int(token) if token.isdigit() else None


def remove_stale(folder: str | Path) -> list[Path]:
    """Delete the temporary files in `folder` whose writer process is gone (killed mid-write);
    a live writer's file is left alone, and so is anything by such a name that is not a regular
    file. Returns what was removed."""
    removed = []
    for tmp in Path(folder).glob(".*.tmp"):
        pid = _writer_pid(tmp.name)
        if pid is None or _alive(pid):
            continue
        try:
            if not stat.S_ISREG(os.lstat(tmp).st_mode):
                continue
            tmp.unlink()
        except FileNotFoundError:
            continue
        removed.append(tmp)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except OverflowError:  # not a pid at all
        return False
    return True
