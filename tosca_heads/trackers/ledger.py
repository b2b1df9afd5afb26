"""A sweep's or suite's record of what it told its trackers: `.trackers.json` in its folder, so a
rerun of the same folder (after a kill, or to grow the grid) continues the same parent run.

Per tracker (`Logger.place`): the parent run's id, a digest of the params it was logged with,
whether it was finished, the children logged whole (point or cell key -> run id) and those started
but not ended ("open": a kill cut their logging short; the rerun discards and logs them again).
The file is written whole or not at all (`tosca_foundation.atomic`), only by the process that
holds the folder's lock; a dry run never writes it. It is read bounded and checked: a file that is
not one tosca wrote is one line, and the rerun logs a new parent, as if there were none.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tosca_foundation import atomic
from tosca_foundation.errors import UserError
from tosca_foundation.files import read_json
from tosca_foundation.text import tell

LEDGER = ".trackers.json"
FORMAT = 1


def _valid(entry: Any) -> bool:
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("parent"), str)
        and isinstance(entry.get("params"), str)
        and isinstance(entry.get("finished"), bool)
        and all(
            isinstance(entry.get(part), dict) and all(isinstance(v, str) for v in entry[part].values())
            for part in ("children", "open")
        )
    )


@dataclass
class Ledger:
    folder: Path
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        path = self.folder / LEDGER
        if not path.exists() and not path.is_symlink():
            return
        try:
            data = read_json(path, "tracker ledger", "")
            found = data.get("trackers")
            if (
                data.get("format") != FORMAT
                or not isinstance(found, dict)
                or not all(map(_valid, found.values()))
            ):
                raise UserError("not one tosca wrote")
        except UserError as exc:
            tell(f"{path} is unreadable ({exc}); its trackers get a new parent run", "warning")
            return
        self.entries = found

    unsaved: bool = False

    def save(self) -> None:
        """Write the ledger; one that cannot be written (a full disk) is said once, and costs only
        that a rerun logs a new parent."""
        try:
            atomic.write_text(
                self.folder / LEDGER,
                json.dumps({"format": FORMAT, "trackers": self.entries}, indent=1) + "\n",
            )
        except (OSError, UserError) as exc:
            if not self.unsaved:
                self.unsaved = True
                tell(f"cannot write {self.folder / LEDGER} ({exc}); a rerun logs a new parent run", "warning")
