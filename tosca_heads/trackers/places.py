"""Where a tracker writes on this machine, checked by the rules every tosca write follows
(`tosca_foundation`), before any work and without writing:

- never inside a zarr store or a folder tosca claimed (a run, a sweep, a baselines or a suite
  folder): `folders.refuse_inside_owned`, as `--keep-modules` is refused there;
- no link at any name the tracker makes (its default folder under runs/, `mlartifacts/`, a run's
  event or artifact folder, a database file): the link is refused in one line and never followed
  (`atomic.refuse_unsafe_target`); a folder the user named may be a link, as `--run` and `--out`;
- a file, a fifo or a device where a folder or a database goes is one line; so is a place that
  cannot be written (`files.require_writable`).

Folders are then made by `atomic.make_folders`, files written by `atomic.writing`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tosca_foundation import atomic, folders
from tosca_foundation.errors import UserError
from tosca_foundation.files import require_writable
from tosca_foundation.text import printable


class TrackerFolder:
    """The folder a tracker writes into: the one the user named (WHERE; it may be a link), or its
    default under the command's runs folder (`runs_root / default`; never a link). Checked when
    the tracker is configured; made at its first run (`make`), through no link tosca names."""

    def __init__(self, named: str | None, runs_root: Path, default: str, flag: str, what: str) -> None:
        self.named = named is not None
        self.path = Path(named) if named is not None else Path(runs_root) / default
        self.runs_root = Path(runs_root)
        self.made = False
        check_folder(self.path, flag, what, named=self.named)

    def make(self) -> Path:
        """The folder, made at the first call."""
        if self.made:
            return self.path
        if self.named:
            self.path.mkdir(parents=True, exist_ok=True)
        else:
            self.runs_root.mkdir(parents=True, exist_ok=True)
            atomic.make_folders(self.path, self.runs_root)
        self.made = True
        return self.path


def check_folder(path: Path, flag: str, what: str, named: bool) -> None:
    """A folder a tracker writes into (made when missing): `named` when the user named it (it may
    then be a link), else one tosca names (never a link)."""
    folders.refuse_inside_owned(path, flag, what)
    if not named:
        refuse_link(path)
    folders.check_output(path, f"{flag}=")  # as every output folder: not a file, not under /proc, writable


def refuse_link(path: Path) -> None:
    """One line when a name tosca makes is a link (dangling or not): it is never followed."""
    if path.is_symlink():
        atomic.refuse_unsafe_target(path)


def check_file(path: Path, flag: str, what: str) -> None:
    """A file a tracker writes (a database): a regular file or nothing yet, never a link, a
    folder, a fifo or a device; its folder checked as one tosca writes into."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise UserError(f"{flag}: cannot use {printable(path)} ({exc.strerror})") from None
    if mode is not None and stat.S_ISLNK(mode):
        atomic.refuse_unsafe_target(path)
    if mode is not None and not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "a fifo, a device or a socket"
        raise UserError(f"{flag}: {printable(path)} is {kind}, not a file for {what}")
    folders.refuse_inside_owned(path.parent, flag, what)
    folders.check_output(path.parent, f"{flag}=", writable=False)  # not under a file, /proc or /dev
    require_writable(path)
