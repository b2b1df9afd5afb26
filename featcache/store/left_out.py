"""What an extraction left out of its data root and why, as a store records it (`left_out` in its
attrs): a count and a few example paths per reason. The rule that decides is
`featcache.sources.listing`; this is the record, read by `tosca cache info` without the data side.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

HIDDEN = "hidden"
NOT_AN_IMAGE = "not an image"
OUTSIDE_CLASSES = "outside the class folders"
NOT_A_FILE = "not a regular file"
LINK_OUTSIDE = "link outside the archive"
LINK_INSIDE = "link to elsewhere in the data folder"
REACHED_TWICE = "reached a second time"
EXAMPLES = 3  # paths kept per reason, for the message
# reason -> (one, many), for the summary line
PHRASES = {
    HIDDEN: ("hidden file or folder", "hidden files or folders"),
    NOT_AN_IMAGE: ("file that is not an image", "files that are not images"),
    OUTSIDE_CLASSES: ("file outside the class folders", "files outside the class folders"),
    NOT_A_FILE: (
        "entry that is not a regular file (a broken link, a pipe, a device)",
        "entries that are not regular files (broken links, pipes, devices)",
    ),
    LINK_OUTSIDE: ("link pointing outside the archive", "links pointing outside the archive"),
    LINK_INSIDE: (
        "link to elsewhere in the data folder (an image counts only in its own class folder)",
        "links to elsewhere in the data folder (an image counts only in its own class folder)",
    ),
    REACHED_TWICE: (
        "file or folder reached a second time (a link or hard link to one already used)",
        "files or folders reached a second time (links or hard links to ones already used)",
    ),
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
