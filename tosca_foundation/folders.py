"""Folders tosca writes (runs, sweeps, baselines, suites, scenario tables) are claimed before the first write, so
tosca never writes into a folder it did not make.

Every folder a command writes is checked before the command does anything (`check_output`, for
each request field marked `output`: `check_outputs`, called where a request comes in, and again
by `claim` for the folders made from them): it must be a folder or a name that can become one, on
a disk. Refused in one line: a file or a device at that name; a file, a device or a dangling
link above it (nothing can be made under it); a place under /proc, /sys or /dev (the kernel's
views of processes, settings and devices; /dev/shm, a memory-backed disk, is allowed); a
read-only or unwritable place.

A claimed folder holds a marker file, `.tosca`, naming its kind (`{"kind": "run"}`). Claiming a
folder succeeds when it does not exist yet (it is created), is empty, already carries the marker
of the same kind, or is a folder of that kind written before markers existed (each kind says how
to recognise those). It is refused, in one line, when the folder is a file, lies inside a zarr
store, is another kind of tosca folder, or holds anything else: a user's own `results.csv` is
never replaced.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tosca_foundation import atomic
from tosca_foundation.errors import UserError
from tosca_foundation.files import disk_errors, parse_json, read_bytes, require_writable
from tosca_foundation.names import as_flag
from tosca_foundation.options import flag_name
from tosca_foundation.text import printable

MARKER = ".tosca"
KINDS = ("run", "sweep", "baselines", "suite", "scenario", "scenario-sweep", "scenario-run")
# the kernel's views, where no folder of files can be made; a memory-backed disk under them is fine
SYSTEM_FOLDERS = {"/proc": "processes", "/sys": "settings", "/dev": "devices"}
DISKS_THERE = ("/dev/shm",)


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder + os.sep)


def require_working_folder() -> None:
    """Refuse to start in a working folder that was deleted under the shell (`cd x; rm -rf ../x`):
    every relative path would fail later, and loading torch there ends in an MKL fatal error
    instead of a line. Called once, before any command runs."""
    try:
        os.getcwd()
    except FileNotFoundError:
        raise UserError(
            "the working folder was deleted (it no longer exists); cd to an existing folder and run the "
            "command again"
        ) from None


def _kind(info: os.stat_result) -> str:
    if stat.S_ISREG(info.st_mode):
        return "a file"
    if stat.S_ISLNK(info.st_mode):
        return "a dangling link"
    return "a device, a fifo or a socket"


def check_output(path: str | Path, flag: str, writable: bool = True) -> None:
    """Refuse, in one line and before anything is written, a folder tosca cannot make or write
    (the module docstring); `flag` names it (`--run`). `writable=False` leaves out the check that
    it can be written (a default folder a command may not use)."""
    path = Path(path)
    named = f"{flag}{'' if flag.endswith('=') else ' '}{printable(path)}"  # --run X, --log tensorboard=X
    wanted = Path(os.path.abspath(path))
    here = wanted
    while not os.path.lexists(here) and here != here.parent:
        here = here.parent  # the nearest part that is there (a dangling link is there)
    real = os.path.join(os.path.realpath(here), os.path.relpath(wanted, here))
    for system, what in SYSTEM_FOLDERS.items():
        if _within(real, system) and not any(_within(real, disk) for disk in DISKS_THERE):
            raise UserError(
                f"{named} lies in {system}, the kernel's view of {what}, where no "
                "folder of files can be made: pass a folder on a disk"
            )
    if not here.is_dir():  # follows a link to a folder, as the writes will
        kind = _kind(os.lstat(here))
        if here == wanted:
            raise UserError(f"{named} is {kind}, not a folder")
        raise UserError(
            f"{named} lies under {printable(here if path.is_absolute() else os.path.relpath(here))}, which is "
            f"{kind}, not a folder: "
            "nothing can be made under it"
        )
    if writable:
        require_writable(here)


def check_outputs(request: Any) -> None:
    """`check_output` for every folder a request asks to write (its fields marked `output`; a
    default one is not required to be writable: the command may not use it), called where a
    request comes in (`tosca_cli.commands.from_request`, the Python API)."""
    spell = getattr(request, "spell", as_flag)  # the Python API's requests name keywords
    for f in dataclasses.fields(request):
        value = getattr(request, f.name)
        if f.metadata.get("output") and value is not None:
            check_output(
                value, flag_name(f) if spell is as_flag else spell(f.name), writable=value != f.default
            )


def zarr_root(path: Path) -> Path | None:
    """The zarr store (a folder with zarr.json) that `path` is or lies inside, if any: the outermost
    of the folders with a zarr.json that hold each other (a store, not its `train` group)."""
    here = Path(path).absolute()
    found = None
    for folder in (here, *here.parents):
        if (folder / "zarr.json").is_file():
            found = folder
        elif found is not None:
            return found
    return found


def marked_kind(folder: Path) -> str | None:
    """The kind recorded in a folder's marker (None: no readable marker)."""
    try:  # bounded: a fifo, a huge or a deeply nested file by that name is no marker
        data = parse_json(read_bytes(Path(folder) / MARKER, "marker"), "marker")
    except UserError:
        return None
    kind = data.get("kind") if isinstance(data, dict) else None
    return kind if isinstance(kind, str) else None


def refuse_inside_owned(path: str | Path, flag: str, what: str) -> None:
    """Refuse a place for something other than tosca's own folders (a tracker's files, `what`)
    that is or lies inside a zarr store or a folder tosca claimed (a run, a sweep, a baselines or a
    suite folder): those hold only what tosca writes there, and a store's own files."""
    path = Path(path)
    store = zarr_root(path)
    if store is not None:
        where = "is a zarr store" if store == path.absolute() else f"lies inside the zarr store {store}"
        raise UserError(f"{flag} {printable(path)} {where}: pass a folder of its own for {what}")
    for folder in (path.absolute(), *path.absolute().parents):
        kind = marked_kind(folder) if (folder / MARKER).exists() else None
        if kind is not None:
            where = (
                f"is a tosca {kind} folder"
                if folder == path.absolute()
                else f"lies inside the tosca {kind} folder {folder}"
            )
            raise UserError(f"{flag} {printable(path)} {where}: pass a folder of its own for {what}")


def _shown(folder: Path) -> str:
    names = sorted(p.name for p in folder.iterdir())
    listed = ", ".join(printable(n) for n in names[:3])
    return listed + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def refuse_planted(folder: Path, flag: str) -> None:
    """Refuse a tosca folder that holds a symbolic link, a fifo, a device, a socket or a file with
    more than one hard link anywhere in it: tosca makes none of them, never writes through one, and
    in a shared folder one can be planted to have it write elsewhere (or read for ever), or to have
    its appends land in another name's file. Checked before anything is written."""
    for here, dirs, files in os.walk(folder):  # links to folders are listed, never walked into
        for name in [*dirs, *files]:
            path = Path(here) / name
            try:
                info = path.lstat()
            except FileNotFoundError:  # gone meanwhile
                continue
            mode = info.st_mode
            if stat.S_ISLNK(mode):
                what = "a symbolic link: tosca never writes through one, nor keeps one in its folders"
            elif not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                what = "not a regular file (a fifo, a device or a socket)"
            elif stat.S_ISREG(mode) and info.st_nlink > 1:
                raise UserError(
                    f"{flag} {folder} holds {printable(path.relative_to(folder))}, a file with {info.st_nlink} "
                    "hard links: another name shares it, and tosca never changes a file through a name it did "
                    "not make; replace it with a copy of its own (cp, then mv over it)"
                )
            else:
                continue
            raise UserError(
                f"{flag} {folder} holds {printable(path.relative_to(folder))}, {what} (in a shared folder one "
                "can be planted there); remove it"
            )


def check_claimable(
    folder: str | Path, kind: str, flag: str, written_before: Callable[[Path], bool] | None = None
) -> bool:
    """Refuse a folder tosca may not write as a `kind` folder; True when it exists and is already one."""
    folder = Path(folder)
    store = zarr_root(folder)
    if store is not None:
        where = "is a zarr store" if store == folder.absolute() else f"lies inside the zarr store {store}"
        raise UserError(f"{flag} {folder} {where}: pass a folder of its own for the {kind}")
    if folder.exists() and not folder.is_dir():
        raise UserError(f"{flag} {folder} is a file, not a {kind} folder")
    check_output(folder, flag)
    if not folder.is_dir() or not any(folder.iterdir()):
        return False
    found = marked_kind(folder)
    if found is not None and found != kind:
        raise UserError(
            f"{flag} {folder} is a tosca {found} folder, not a {kind} folder: pass another {flag}"
        )
    if found == kind or (written_before is not None and written_before(folder)):
        refuse_planted(folder, flag)
        return True
    raise UserError(
        f"refusing to write into {folder}: it holds files tosca did not write ({_shown(folder)}); "
        f"pass a new or empty folder as {flag}"
    )


def claim(
    folder: str | Path, kind: str, flag: str, written_before: Callable[[Path], bool] | None = None
) -> Path:
    """Create or take over `folder` as a `kind` folder (see the module docstring); returns it."""
    if kind not in KINDS:
        raise ValueError(f"unknown folder kind {kind!r}")
    folder = Path(folder)
    check_claimable(folder, kind, flag, written_before)
    with disk_errors(folder, f"creating the {kind} folder"):
        folder.mkdir(parents=True, exist_ok=True)
        if marked_kind(folder) != kind:
            atomic.write_text(folder / MARKER, json.dumps({"kind": kind}) + "\n")
    return folder
