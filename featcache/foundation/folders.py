"""Folders tosca writes (runs, sweeps, baselines, suites) are claimed before the first write, so
tosca never writes into a folder it did not make.

A claimed folder holds a marker file, `.tosca`, naming its kind (`{"kind": "run"}`). Claiming a
folder succeeds when it does not exist yet (it is created), is empty, already carries the marker
of the same kind, or is a folder of that kind written before markers existed (each kind says how
to recognise those). It is refused, in one line, when the folder is a file, lies inside a zarr
store, is another kind of tosca folder, or holds anything else: a user's own `results.csv` is
never replaced.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from featcache.foundation import atomic
from featcache.foundation.errors import UserError
from featcache.foundation.files import disk_errors, require_writable
from featcache.foundation.text import printable

MARKER = ".tosca"
KINDS = ("run", "sweep", "baselines", "suite")


def zarr_root(path: Path) -> Path | None:
    """The zarr store (a folder with zarr.json) that `path` is or lies inside, if any."""
    here = Path(path).absolute()
    for folder in (here, *here.parents):
        if (folder / "zarr.json").is_file():
            return folder
    return None


def marked_kind(folder: Path) -> str | None:
    """The kind recorded in a folder's marker (None: no readable marker)."""
    try:
        data = json.loads((Path(folder) / MARKER).read_text())
    except (OSError, ValueError):
        return None
    kind = data.get("kind") if isinstance(data, dict) else None
    return kind if isinstance(kind, str) else None


def _shown(folder: Path) -> str:
    names = sorted(p.name for p in folder.iterdir())
    listed = ", ".join(printable(n) for n in names[:3])
    return listed + (f" and {len(names) - 3} more" if len(names) > 3 else "")


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
    require_writable(folder)
    if not folder.is_dir() or not any(folder.iterdir()):
        return False
    found = marked_kind(folder)
    if found == kind:
        return True
    if found is not None:
        raise UserError(
            f"{flag} {folder} is a tosca {found} folder, not a {kind} folder: pass another {flag}"
        )
    if written_before is not None and written_before(folder):
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
