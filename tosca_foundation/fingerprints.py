"""Fingerprints: one canonical JSON form, its sha256, and the readable list of what differs.

A store's identity, a run's configuration and a sweep's grid are compared through these, so
"the same" means the same thing everywhere: every field that decides the numbers, in sorted
order, nothing else.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def fingerprint(identity: Any) -> str:
    """sha256 of the canonical JSON form."""
    return hashlib.sha256(canonical_json(identity).encode()).hexdigest()


def _short(value: Any) -> str:
    text = str(value)
    return text[:40] + "..." if len(text) > 43 else text


def identity_differences(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    """Human-readable list of the fields that differ, e.g. 'views: 0 -> 4'."""
    diffs = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            diffs += identity_differences(a, b, f"{prefix}{key}.")
        elif canonical_json(a) != canonical_json(b):
            diffs.append(f"{prefix}{key}: {_short(a)} -> {_short(b)}")
    return diffs


def file_sha256(path: str | Path, block: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(block):
            digest.update(chunk)
    return digest.hexdigest()
