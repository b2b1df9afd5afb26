"""Which files of a folder are images to use: one rule for `tosca extract` and `tosca predict`.

- A name that starts with "." (hidden files and folders, macOS `._x` resource forks) and the
  `__MACOSX` folder that macOS puts into zip files are left out, with everything inside them.
- A file whose suffix is not an image suffix (`IMAGE_SUFFIXES`) is left out, and so is anything
  that is not a regular file (a broken link, a pipe, a device: nothing an image can be read from).
- Every other file is used, whatever its name (a class folder named `_background_` is a class).
- Links are followed: a symbolic link to a file is the file it points to, a link to a folder is
  walked like a folder, and a folder reached twice (a link cycle) is walked once. Archives are
  unpacked by `featcache.sources.archives`, which keeps links that stay inside the archive and counts the
  ones that do not.

What is left out is counted by reason (`LeftOut`), recorded in the store's attrs and shown by
`tosca cache info` and `tosca extract`: filtering is said, never silent.
"""

from __future__ import annotations

import os
from pathlib import Path

from featcache.foundation.errors import UserError
from featcache.store.left_out import HIDDEN, NOT_A_FILE, NOT_AN_IMAGE, OUTSIDE_CLASSES, LeftOut

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".ppm")
MACOS_FOLDER = "__MACOSX"


def skipped_name(name: str) -> str | None:
    """Why an entry is left out by its name alone (hidden, macOS metadata), or None."""
    if name.startswith(".") or name == MACOS_FOLDER:
        return HIDDEN
    return None


def checked_name(path: Path) -> Path:
    """A kept file or class folder whose name is text: one that is not valid UTF-8 (bytes from
    another encoding) cannot be recorded in the store nor shown, and is refused naming it."""
    try:
        path.name.encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(path).decode("ascii", "backslashreplace")
        raise UserError(
            f"{shown} has a name that is not valid UTF-8: rename it (tosca records names as text)"
        ) from None
    return path


def is_image_name(name: str) -> bool:
    return Path(name).suffix.lower() in IMAGE_SUFFIXES


def subfolders(folder: Path, left_out: LeftOut | None = None) -> list[Path]:
    """The folders directly inside `folder` that the rule keeps (class folders), by name."""
    kept = []
    for entry in sorted(Path(folder).iterdir(), key=lambda p: p.name):
        reason = skipped_name(entry.name) or (None if entry.is_dir() else OUTSIDE_CLASSES)
        if reason is None:
            kept.append(checked_name(entry))
        elif left_out is not None:
            left_out.add(reason, entry)
    return kept


def image_files(folder: Path, left_out: LeftOut) -> list[Path]:
    """Every image file under `folder` the rule keeps, sorted by path; links followed, once each."""
    found: list[Path] = []
    seen: set[tuple[int, int]] = set()

    def walk(here: Path) -> None:
        try:
            stat = here.stat()
        except OSError:
            return
        if (stat.st_dev, stat.st_ino) in seen:
            return
        seen.add((stat.st_dev, stat.st_ino))
        for entry in sorted(os.scandir(here), key=lambda e: e.name):
            path = Path(entry.path)
            if skipped_name(entry.name) is not None:
                left_out.add(HIDDEN, path)
            elif entry.is_dir():  # follows links
                walk(checked_name(path))
            elif not entry.is_file():
                left_out.add(NOT_A_FILE, path)  # a dangling link, a pipe, a device: nothing to read
            elif is_image_name(entry.name):
                found.append(checked_name(path))
            else:
                left_out.add(NOT_AN_IMAGE, path)

    walk(Path(folder))
    return sorted(found)
