"""Which files of a folder are images to use: one rule for `tosca extract` and `tosca predict`.

- A name that starts with "." (hidden files and folders, macOS `._x` resource forks) and the
  `__MACOSX` folder that macOS puts into zip files are left out, with everything inside them.
- A file whose suffix is not an image suffix (`IMAGE_SUFFIXES`) is left out, and so is anything
  that is not a regular file (a broken link, a link loop, a pipe, a device: nothing an image can
  be read from).
- Every other file is used, whatever its name (a class folder named `_background_` is a class).
- Each file is used once: a file or folder reached a second time (a link to something already
  used, a hard link, a link cycle) is left out, and counted.
- Links are followed when they stay inside the folder being listed or point out of the data
  folder altogether (a class folder of links into a shared pool of images); a link to anywhere
  else in the data folder, or to a folder that holds it, is left out and counted: an image
  counts only in its own class folder of its own split, so a link can never put a class's images
  under another class, nor a training image into the test split.
- The same file in two class folders, or in both splits (hard links, or links from both to one
  file outside the data folder), is refused in one line: which label or split it has cannot be
  told, and tested on what it was trained on it would make the test figure wrong.

Archives are unpacked by `featcache.sources.archives`, which keeps links that stay inside the
archive and counts the ones that do not; the unpacked folder is then listed by this rule.

What is left out is counted by reason (`LeftOut`), recorded in the store's attrs and shown by
`tosca cache info` and `tosca extract`: filtering is said, never silent.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from featcache.store.left_out import (
    HIDDEN,
    LINK_INSIDE,
    NOT_A_FILE,
    NOT_AN_IMAGE,
    OUTSIDE_CLASSES,
    REACHED_TWICE,
    LeftOut,
)
from tosca_foundation.errors import UserError
from tosca_foundation.text import printable

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".ppm")
MACOS_FOLDER = "__MACOSX"
Identity = tuple[int, int]  # (st_dev, st_ino): one file, whatever name or link reaches it


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


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


class FolderListing:
    """The images of one data folder's class folders (or of any folders `tosca predict` is
    given), by the rule of the module docstring.

    `fence`: the folders a link may not lead into from elsewhere (the data folder, its split
    and class folders). `files(folder, split, name)` lists the class folder of class `name` in
    `split` (both empty for a plain folder); a file listed for two of them is refused.
    """

    def __init__(self, left_out: LeftOut, fence: Iterable[Path] = ()):
        self.left_out = left_out
        self.fence = sorted({os.path.realpath(f) for f in fence})
        self._placed: dict[Identity, tuple[tuple[str, str], Path]] = {}

    def files(self, folder: Path, split: str = "", name: str = "") -> list[Path]:
        """Every image file under `folder` the rule keeps, sorted by path; each file once: of the
        paths reaching one file, one without a link if there is one, else the first by name."""
        own = os.path.realpath(folder)
        fence = [*self.fence, own]
        holds = next((f for f in self.fence if f != own and _within(f, own)), None)
        if holds is not None:  # a class folder linked to `/` or `..`: it would walk the whole data folder
            raise UserError(
                f"class folder {printable(folder)} leads to {printable(own)}, which holds {printable(holds)} "
                "(the data folder or another class folder): a class folder must hold its own images"
            )
        reached: dict[Identity, list[tuple[bool, Path]]] = {}  # file -> (through a link?, path)
        walked: set[Identity] = set()
        # folders to walk: reached without a link (walked first, depth first), then through one
        to_walk: dict[bool, list[tuple[Path, Identity]]] = {False: [], True: []}

        def link_leaves(target: str, is_dir: bool) -> bool:
            if _within(target, own):
                return False
            return any(_within(target, f) or (is_dir and _within(f, target)) for f in fence)

        def walk(here: Path, linked: bool) -> None:
            try:
                entries = sorted(os.scandir(here), key=lambda e: e.name)
            except OSError as exc:
                raise UserError(
                    f"cannot list {printable(here)} ({exc.strerror or type(exc).__name__})"
                ) from None
            for entry in entries:
                path = Path(entry.path)
                if skipped_name(entry.name) is not None:
                    self.left_out.add(HIDDEN, path)
                    continue
                try:
                    info = entry.stat()  # follows a link
                except OSError:  # a dangling link, a link loop, gone meanwhile
                    self.left_out.add(NOT_A_FILE, path)
                    continue
                is_dir, is_link = stat.S_ISDIR(info.st_mode), entry.is_symlink()
                if is_link and link_leaves(os.path.realpath(path), is_dir):
                    self.left_out.add(LINK_INSIDE, path)
                    continue
                identity = (info.st_dev, info.st_ino)
                if is_dir:
                    to_walk[linked or is_link].append((checked_name(path), identity))
                elif not stat.S_ISREG(info.st_mode):
                    self.left_out.add(NOT_A_FILE, path)  # a pipe, a device: nothing to read
                elif not is_image_name(entry.name):
                    self.left_out.add(NOT_AN_IMAGE, path)
                else:
                    reached.setdefault(identity, []).append((linked or is_link, path))

        try:
            top = os.stat(folder)
        except OSError as exc:
            raise UserError(
                f"cannot list {printable(folder)} ({exc.strerror or type(exc).__name__})"
            ) from None
        to_walk[False].append((Path(folder), (top.st_dev, top.st_ino)))
        while to_walk[False] or to_walk[True]:  # a loop, not recursion: any depth of folders is fine
            linked = not to_walk[False]
            here, identity = to_walk[False].pop() if not linked else to_walk[True].pop(0)
            if identity in walked:  # a link cycle, or a folder reached through a link as well
                self.left_out.add(REACHED_TWICE, here)
                continue
            walked.add(identity)
            walk(here, linked)
        found = []
        for identity, paths in reached.items():
            kept, *again = sorted(paths)
            for _, path in again:
                self.left_out.add(REACHED_TWICE, path)
            self._place(identity, (split, name), kept[1])
            found.append(checked_name(kept[1]))
        return sorted(found)

    def _place(self, identity: Identity, place: tuple[str, str], path: Path) -> None:
        """Record where a file is used; refused when it is used in another class folder already."""
        first = self._placed.setdefault(identity, (place, path))
        if first[0] == place:
            return
        harm = (
            "a test image that is also a training image makes the test figure wrong"
            if first[0][0] != place[0]
            else "an image under two classes would carry two labels"
        )
        where = " and ".join(printable("/".join(filter(None, p))) for p in (first[0], place))
        raise UserError(
            f"{printable(first[1])} and {printable(path)} are one file (a hard link, or links to one file) "
            f"in {where}: {harm}; keep one copy"
        )


def image_files(folder: Path, left_out: LeftOut) -> list[Path]:
    """Every image file under `folder` the rule keeps, sorted by path; each file once, a link to a
    folder holding `folder` left out (`tosca predict`'s listing of a folder it is given)."""
    return FolderListing(left_out).files(folder)
