"""Amounts of memory as people write and read them: `parse_bytes("2.5GiB")` and `human_bytes(1536)`.

Both the settings (which check `--memory-budget`) and the limits (which say what a flag would
need) use them; they sit here, below both, so neither has to import the other back.
Import-light (stdlib only).
"""

from __future__ import annotations

import re

_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
_UNITS |= {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
_AMOUNT = re.compile(r"^(\d+(?:\.\d+)?)\s*([A-Za-z]*)$")


def parse_bytes(value: str) -> int | None:
    """A number of bytes as a person writes it: 3000000000, 3GB, 2.5GiB, 512 MiB (None when it is
    none of those)."""
    found = _AMOUNT.match(value.strip())
    if not found or found.group(2) not in _UNITS:
        return None
    return int(float(found.group(1)) * _UNITS[found.group(2)])


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{int(n)} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"  # pragma: no cover - the loop returns
