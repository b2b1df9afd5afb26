"""Sizes checked before work starts: a flag that would allocate more memory or disk than there is
stops with one line naming what it would need and the limit, instead of an OOM kill, a swap storm
or a traceback asking for terabytes.

The limits are what this machine has now (available memory, free disk), read once per check;
`TOSCA_MEMORY_LIMIT` (bytes) caps the memory figure for tests and shared machines.
`TOSCA_MEMORY_BUDGET` (`memory_budget`) is what one fit may hold: a store larger is read task by task.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tosca_foundation.errors import UserError, UserValueError
from tosca_foundation.settings import setting
from tosca_foundation.units import human_bytes, parse_bytes

GiB = 1 << 30


def available_memory() -> int:
    """Bytes of memory a new allocation can have without swapping: MemAvailable on Linux, else
    the physical memory; capped by TOSCA_MEMORY_LIMIT when set."""
    found = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError, IndexError):
        pass
    if found is None:
        try:
            found = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            found = 1 << 62
    cap = setting("TOSCA_MEMORY_LIMIT")
    if cap is not None:
        found = min(found, int(cap))
    return found


BUDGET_SHARE = 0.5  # of the available memory: the default memory budget of a fit


def memory_budget() -> int:
    """Bytes a fit may hold (its features, the engine, evaluation): TOSCA_MEMORY_BUDGET (set by
    `tosca --memory-budget`) when given, else half the memory available now. A store whose
    features fit within it with the rest is held whole; a larger one is read task by task."""
    given = setting("TOSCA_MEMORY_BUDGET")
    if given is not None:
        return int(parse_bytes(given) or 0)
    return int(available_memory() * BUDGET_SHARE)


def usable_cores() -> int:
    """The cores this process may run on (its affinity, e.g. a container's CPU set), not the host's."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def max_processes() -> int:
    """The most worker processes a flag may ask for on this machine: 4 per usable core, at least 64."""
    return max(64, 4 * usable_cores())


def free_disk(path: str | Path) -> int:
    """Free bytes on the filesystem that holds `path` (or its nearest existing parent)."""
    here = Path(path).absolute()
    while not here.exists() and here != here.parent:
        here = here.parent
    try:
        return shutil.disk_usage(here).free
    except OSError:
        return 1 << 62  # unknowable: let the write itself report a full disk


def require_memory(what: str, need: int, hint: str, share: float = 0.8) -> None:
    """Refuse when `need` bytes exceed `share` of the available memory: a value the caller asked
    for is too large (a UserValueError: `hint` names it in the caller's words)."""
    limit = int(available_memory() * share)
    if need > limit:
        raise UserValueError(
            f"{what} would need {human_bytes(need)} of memory; the limit here is {human_bytes(limit)} "
            f"({share:.0%} of what is available): {hint}"
        )


def require_disk(what: str, need: int, where: str | Path, hint: str) -> None:
    """Refuse when `need` bytes exceed the free space where they would be written."""
    free = free_disk(where)
    if need > free:
        raise UserError(
            f"{what} would need {human_bytes(need)} of disk in {where}; {human_bytes(free)} is free: {hint}"
        )


def require_at_most(flag: str, value: int, limit: int, unit: str, why: str) -> None:
    """A count flag over a fixed limit: one line naming both."""
    if value > limit:
        raise UserValueError(f"{flag} {value} is over the limit of {limit:,} {unit}: {why}")
