"""Helpers for tests that edit a cell's files (`records.cell`) on purpose."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


def redigest(folder: Path) -> None:
    """done.json made again over a cell's files as they are now: the edit a test makes (a store
    moved, a hostile edit that hides itself) is then what the cell holds, so what the files
    themselves say is what gets checked."""
    done = json.loads((Path(folder) / "done.json").read_text())
    done["sha256"] = {
        name: hashlib.sha256((Path(folder) / name).read_bytes()).hexdigest() for name in done["sha256"]
    }
    (Path(folder) / "done.json").write_text(json.dumps(done))


def edit_asked(folder: Path, **changes: object) -> None:
    """A run's (or any cell's) asked.json given `changes` at its top level, done.json made again."""
    path = Path(folder) / "asked.json"
    asked = json.loads(path.read_text())
    asked.update(changes)
    path.write_text(json.dumps(asked))
    redigest(folder)
