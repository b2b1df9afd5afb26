"""Which files of a folder are images to use: one rule for `tosca extract` and `tosca predict`.

- A name that starts with "." (hidden files and folders, macOS `._x` resource forks) and the
  `__MACOSX` folder that macOS puts into zip files are left out, with everything inside them.
- A file whose suffix is not an image suffix (`IMAGE_SUFFIXES`) is left out, and so is anything
  that is not a regular file (a broken link, a pipe, a device: nothing an image can be read from).
- Every other file is used, whatever its name (a class folder named `_background_` is a class).
- Links are followed: a symbolic link to a file is the file it points to, a link to a folder is
  walked like a folder, and a folder reached twice (a link cycle) is walked once. Archives are
  unpacked by `featcache.archives`, which keeps links that stay inside the archive and counts the
  ones that do not.

What is left out is counted by reason (`LeftOut`), recorded in the store's attrs and shown by
`tosca cache info` and `tosca extract`: filtering is said, never silent.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".ppm")
HIDDEN = "hidden"
NOT_AN_IMAGE = "not an image"
OUTSIDE_CLASSES = "outside the class folders"
NOT_A_FILE = "not a regular file"
MACOS_FOLDER = "__MACOSX"
EXAMPLES = 3  # paths kept per reason, for the message
# reason -> (one, many), for the summary line
PHRASES = {
    HIDDEN: ("hidden file or folder", "hidden files or folders"),
    NOT_AN_IMAGE: ("file that is not an image", "files that are not images"),
    OUTSIDE_CLASSES: ("file outside the class folders", "files outside the class folders"),
    NOT_A_FILE: (
        "entry that is not a regular file (a broken link, a pipe)",
        "entries that are not regular files (broken links, pipes)",
    ),
    "link outside the archive": ("link pointing outside the archive", "links pointing outside the archive"),
}


@dataclass
class LeftOut:
    """What a listing left out: a count and a few example paths per reason."""

    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def add(self, reason: str, path: Path) -> None:
        self.counts[reason] += 1
        kept = self.examples.setdefault(reason, [])
        if len(kept) < EXAMPLES:
            kept.append(str(path))

    def __bool__(self) -> bool:
        return bool(self.counts)

    def summary(self) -> str:
        """'2 hidden files or folders, 1 file that is not an image'."""
        return ", ".join(
            f"{n} {PHRASES.get(reason, (reason, reason))[n != 1]}"
            for reason, n in sorted(self.counts.items())
        )

    def attrs(self) -> dict[str, dict[str, object]]:
        return {r: {"count": n, "examples": self.examples.get(r, [])} for r, n in sorted(self.counts.items())}

    @classmethod
    def from_attrs(cls, attrs: object) -> LeftOut:
        """What `attrs()` wrote (in a store's attrs, or an unpacking's done mark); anything else
        there (an edited file) reads as nothing left out."""
        left_out = cls()
        for reason, entry in (attrs if isinstance(attrs, dict) else {}).items():
            if isinstance(entry, dict) and isinstance(entry.get("count"), int):
                left_out.counts[str(reason)] = entry["count"]
                left_out.examples[str(reason)] = [str(e) for e in entry.get("examples") or []][:EXAMPLES]
        return left_out

    def described(self) -> str:
        """The summary with an example name per reason: '2 hidden files or folders (e.g. .DS_Store)'."""
        parts = []
        for reason, n in sorted(self.counts.items()):
            names = ", ".join(Path(e).name for e in self.examples.get(reason, [])[:2])
            parts.append(
                f"{n} {PHRASES.get(reason, (reason, reason))[n != 1]}" + (f" (e.g. {names})" if names else "")
            )
        return "; ".join(parts)


def skipped_name(name: str) -> str | None:
    """Why an entry is left out by its name alone (hidden, macOS metadata), or None."""
    if name.startswith(".") or name == MACOS_FOLDER:
        return HIDDEN
    return None


def is_image_name(name: str) -> bool:
    return Path(name).suffix.lower() in IMAGE_SUFFIXES


def subfolders(folder: Path, left_out: LeftOut | None = None) -> list[Path]:
    """The folders directly inside `folder` that the rule keeps (class folders), by name."""
    kept = []
    for entry in sorted(Path(folder).iterdir(), key=lambda p: p.name):
        reason = skipped_name(entry.name) or (None if entry.is_dir() else OUTSIDE_CLASSES)
        if reason is None:
            kept.append(entry)
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
                walk(path)
            elif not entry.is_file():
                left_out.add(NOT_A_FILE, path)  # a dangling link, a pipe, a device: nothing to read
            elif is_image_name(entry.name):
                found.append(path)
            else:
                left_out.add(NOT_AN_IMAGE, path)

    walk(Path(folder))
    return sorted(found)
