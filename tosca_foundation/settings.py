"""Every setting tosca reads from the environment, checked like a flag, in one place.

A setting is read only through `setting(name)`, which checks its value against the table below:
a value that is not one of those allowed stops the command in one line naming the setting, the
value and what is valid, never silently taken for the default (`TOSCA_OVERLAP_EVAL=yes` would
otherwise mean "no"). `check_settings()` checks all of them at once: the command line calls it
before any command runs, and the library's entry points (fit, sweep, suite, a dry run as the real
run) call it before they write anything. An empty value means unset, as for any variable.

Import-light (stdlib only).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass

from tosca_foundation.errors import UserError
from tosca_foundation.units import human_bytes, parse_bytes

_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*(:[A-Za-z_][A-Za-z0-9_.]*)?$")


@dataclass(frozen=True)
class Setting:
    """An environment variable tosca reads: what it means, and the one line for a bad value (None
    when the value is fine)."""

    name: str
    meaning: str
    problem: Callable[[str], str | None]


def _one_of(name: str, allowed: tuple[str, ...], said: str) -> Callable[[str], str | None]:
    def problem(value: str) -> str | None:
        return None if value in allowed else f"{name}={value[:40]!r}: {said}"

    return problem


MIN_MEMORY_LIMIT = 1_000_000  # bytes: less than no command can be planned in (1 was taken, "0 B")


def _bytes(value: str) -> str | None:
    if not value.isdigit() or int(value) < 1:
        return f"TOSCA_MEMORY_LIMIT={value[:40]!r} is not a number of bytes (a whole number >= 1)"
    if int(value) < MIN_MEMORY_LIMIT:
        return (
            f"TOSCA_MEMORY_LIMIT={value[:40]} is under {MIN_MEMORY_LIMIT:,} bytes, less than any command "
            "can be planned in (the value is in bytes: 8000000000 for 8 GB)"
        )
    return None


def _budget(value: str) -> str | None:
    amount = parse_bytes(value)
    if amount is None:
        return (
            f"TOSCA_MEMORY_BUDGET={value[:40]!r} (--memory-budget) is not an amount of memory: give bytes (3000000000) or "
            "a number with a unit (3GB, 2.5GiB, 512MiB)"
        )
    if amount < MIN_MEMORY_LIMIT:
        return (
            f"TOSCA_MEMORY_BUDGET={value[:40]} (--memory-budget) is under {MIN_MEMORY_LIMIT:,} bytes, "
            "less than any fit can hold"
        )
    machine = physical_memory()
    if amount > machine:  # refused, not warned: a fit held to it would swap, or be killed, mid-run
        return (
            f"TOSCA_MEMORY_BUDGET={value[:40]} (--memory-budget) is more than this machine's "
            f"{human_bytes(machine)} of memory: give at most that (omit it for half the available memory)"
        )
    return None


def physical_memory() -> int:
    """This machine's memory in bytes (its physical pages); unbounded where it cannot be read."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 1 << 62


def _modules(value: str) -> str | None:
    bad = [name.strip() for name in value.split(",") if name.strip() and not _MODULE.match(name.strip())]
    if bad:
        return f"TOSCA_PLUGINS names {bad[0][:60]!r}, which is no module name: give importable module names, comma-separated"
    return None


def _seconds(value: str) -> str | None:
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if 0 <= seconds <= 86_400:
        return None
    return f"TOSCA_PROGRESS_EVERY={value[:40]!r} is not a number of seconds (0 to 86400)"


def _timeout(value: str) -> str | None:
    try:
        seconds = float(value) if value.isascii() else 0.0  # float() takes any script's digits
    except ValueError:
        seconds = 0.0
    if 0 < seconds <= 3_600:
        return None
    return f"TOSCA_SCHEDULER_TIMEOUT={value[:40]!r} is not a number of seconds (more than 0, at most 3600)"


def _threads(value: str) -> str | None:
    if value.isdigit() and 1 <= int(value) <= 1024:
        return None
    return f"TOSCA_LINALG_THREADS={value[:40]!r} is not a number of threads (a whole number from 1 to 1024)"


def _any(value: str) -> str | None:
    """A place (any path the user names): what is there is checked where it is used."""
    return None


SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in (
        Setting(
            "TOSCA_STEP",
            "the SGD step: auto (the compiled step on a CPU when it builds), native or torch",
            lambda v: (
                None
                if v in ("auto", "native", "torch")
                else f"unknown TOSCA_STEP={v[:40]!r}: use one of auto, native, torch"
            ),
        ),
        Setting(
            "TOSCA_STEP_THREADS",
            "threads of the compiled step: 1 or 2",
            _one_of("TOSCA_STEP_THREADS", ("1", "2"), "use 1 or 2"),
        ),
        Setting(
            "TOSCA_LINALG_THREADS",
            "threads of RanPAC's tiled linear algebra (default: OMP_NUM_THREADS, else every usable core); the same numbers on any",
            _threads,
        ),
        Setting(
            "TOSCA_OVERLAP_EVAL",
            "evaluate task t on a second thread while task t+1 trains: 1 or 0",
            _one_of(
                "TOSCA_OVERLAP_EVAL", ("0", "1"), "use 1 (evaluate on a second thread) or 0 (after each task)"
            ),
        ),
        Setting(
            "TOSCA_PROGRESS",
            "how long jobs show progress: auto (a bar on a terminal, plain lines elsewhere), bar (or 1), lines, off (or 0)",
            _one_of(
                "TOSCA_PROGRESS",
                ("auto", "bar", "lines", "off", "1", "0"),
                "use auto (a bar on a terminal, plain lines elsewhere), bar (or 1), lines or off (or 0)",
            ),
        ),
        Setting(
            "TOSCA_PROGRESS_EVERY",
            "seconds between two plain progress lines of one job (default 10)",
            _seconds,
        ),
        Setting("TOSCA_MEMORY_LIMIT", "the memory tosca plans with, in bytes", _bytes),
        Setting(
            "TOSCA_SCHEDULER_TIMEOUT",
            "seconds a command waits for a --scheduler address to answer as a Dask scheduler (default 30)",
            _timeout,
        ),
        Setting(
            "TOSCA_MEMORY_BUDGET",
            "the memory a fit may hold features in (default: half the available memory): a store "
            "over it is read task by task",
            _budget,
        ),
        Setting("TOSCA_PLUGINS", "modules to import before a command runs, comma-separated", _modules),
        Setting("TOSCA_KERNEL_CACHE", "where the compiled step is built", _any),
        Setting("TOSCA_DATA", "the real data for the demo and the paper suites", _any),
        Setting("TOSCA_PAPER_DATA", "the real data for the paper suites", _any),
    )
}


def setting(name: str) -> str | None:
    """The value of a setting (None when unset or empty), refused in one line when it is not valid."""
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    problem = SETTINGS[name].problem(value)
    if problem is not None:
        raise UserError(problem)
    return value


def check_settings() -> None:
    """Refuse the first setting with a bad value, in one line, before anything is done."""
    for name in SETTINGS:
        setting(name)
