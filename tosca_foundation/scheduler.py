"""One `--scheduler` string -> a Dask client: a local cluster, one worker per GPU, or a running scheduler.

Used by `tosca extract`; written so that any command that spreads work over Dask (`tosca sweep`)
can take the same strings:

    local:N      a LocalCluster of N single-threaded worker processes on this machine (N >= 1)
    local-cuda   dask_cuda.LocalCUDACluster: one worker process per visible GPU, each pinned to
                 its GPU through CUDA_VISIBLE_DEVICES (needs `pip install dask-cuda`)
    ADDRESS      a running scheduler: tcp://host:8786, tls://host:8786, or host:8786 (tcp)
    FILE.json    the scheduler file `dask scheduler --scheduler-file FILE.json` wrote (shared FS)

Other schemes (inproc:// lives inside one process, ucx:// needs ucx-py) are refused here, in one
line. A running scheduler is checked at the caller's edge, before it makes anything
(`check_scheduler`): one that does not answer as a Dask scheduler within TOSCA_SCHEDULER_TIMEOUT
seconds is one line, and so is losing it mid-run (tosca_foundation.scheduler_link).

Usage::

    choice = parse_scheduler(text)      # UserError with the valid forms if the text is none of them
    check_scheduler(choice)             # UserError now (not minutes later): dask-cuda missing, no scheduler there
    with dask_client(choice) as client: # a local cluster lives exactly as long as the block
        ...

Local clusters read Dask's config when they start, so a caller can change worker settings with
`with dask.config.set({...}), dask_client(choice) as client:`. Their workers import installed code
only, never run the caller's script (they are started by a helper process, which takes this
process's Dask settings: tosca_foundation.cluster) and die with this process
(tosca_foundation.processes). What the caller registered itself reaches every worker of a
client, local or remote.
"""

from __future__ import annotations

import contextlib
import importlib.util
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tosca_foundation.errors import UserError
from tosca_foundation.files import read_json
from tosca_foundation.limits import max_processes, require_at_most
from tosca_foundation.scheduler_link import (
    START_ONE,
    check_answers,
    connect_seconds,
    said_when_lost,
    said_when_workers_lost,
)
from tosca_foundation.text import reason

SCHEDULER_FORMS = (
    "local:N (N worker processes here), local-cuda (one worker per GPU, needs dask-cuda), "
    "a scheduler address tcp://host:8786, tls://host:8786 or host:8786, or a scheduler file (.json)"
)
SCHEMES = ("tcp", "tls")  # what a command reaches a running scheduler over
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_HOST_PORT = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")
_LOCAL = re.compile(r"^local:(-?\d+)$")


@dataclass(frozen=True)
class SchedulerChoice:
    """A parsed `--scheduler`: kind is local, local-cuda, address or file."""

    kind: str
    workers: int | None = None  # local:N
    target: str | None = None  # the address, or the scheduler file's path

    def describe(self) -> str:
        if self.kind == "local":
            return f"a local cluster of {self.workers} worker process{'es' if self.workers != 1 else ''}"
        if self.kind == "local-cuda":
            return "a local CUDA cluster (one worker per GPU)"
        if self.kind == "file":
            return f"the scheduler in {self.target}"
        return f"the scheduler at {self.target}"


def parse_scheduler(text: str) -> SchedulerChoice:
    """Parse a `--scheduler` value; a UserError names what was wrong and the valid forms."""
    text = text.strip()
    if text == "local-cuda":
        return SchedulerChoice("local-cuda")
    local = _LOCAL.match(text)
    if local:
        n = int(local.group(1))
        if n < 1:
            raise UserError(f"--scheduler {text}: N must be at least 1; use {SCHEDULER_FORMS}")
        require_at_most(
            "--scheduler local:N, N =",
            n,
            max_processes(),
            "processes",
            "at most 4 per usable core, and 64 anywhere",
        )
        return SchedulerChoice("local", workers=n)
    if text.endswith(".json"):
        if not Path(text).is_file():
            raise UserError(f"--scheduler {text}: no such scheduler file; use {SCHEDULER_FORMS}")
        written = read_json(Path(text), "scheduler file", f"use {SCHEDULER_FORMS}")
        if not isinstance(written.get("address"), str):
            raise UserError(
                f"--scheduler {text} is not a scheduler file (no address in it): pass the file "
                "`dask scheduler --scheduler-file FILE` wrote"
            )
        check_address(written["address"], f"the address in scheduler file {text}")
        return SchedulerChoice("file", target=text)
    if text == "local" or text.startswith(("local:", "local-")):
        raise UserError(f"unknown --scheduler {text!r}: use {SCHEDULER_FORMS}")
    return SchedulerChoice("address", target=check_address(text, f"--scheduler {text!r}"))


def check_address(text: str, named: str) -> str:
    """A scheduler address tosca can reach (tcp:// or tls://, or host:port, which Dask reads as
    tcp), as given; anything else is one line (`named`: how to name it) with the valid forms."""
    scheme = _SCHEME.match(text)
    if scheme and scheme.group(1).lower() not in SCHEMES:
        raise UserError(
            f"{named}: tosca reaches a scheduler over tcp:// or tls://, not {scheme.group(1)[:20]}://; "
            f"use {SCHEDULER_FORMS}"
        )
    place = _HOST_PORT.match(text[scheme.end() :] if scheme else text)
    if place is None or not 1 <= int(place.group(1)) <= 65535:
        unknown = f"unknown {named}" if named.startswith("--scheduler") else f"{named} is no address"
        raise UserError(f"{unknown}: use {SCHEDULER_FORMS}")
    return text


def check_available(choice: SchedulerChoice) -> None:
    """Fail early, in one line, when the choice needs a package that is not installed."""
    if choice.kind == "local-cuda" and importlib.util.find_spec("dask_cuda") is None:
        raise UserError(
            "--scheduler local-cuda needs dask-cuda, which is not installed: pip install dask-cuda "
            "(or use --scheduler local:N, or a scheduler address)"
        )


def address_of(choice: SchedulerChoice) -> str | None:
    """The running scheduler's address (read from its file for a scheduler file), None for a local one."""
    if choice.kind == "file":
        assert choice.target is not None
        address = read_json(Path(choice.target), "scheduler file", f"use {SCHEDULER_FORMS}").get("address")
        if not isinstance(address, str):
            raise UserError(f"--scheduler {choice.target} is not a scheduler file (no address in it)")
        return check_address(address, f"the address in scheduler file {choice.target}")
    return choice.target if choice.kind == "address" else None


def check_scheduler(choice: SchedulerChoice, seconds: float | None = None) -> None:
    """Fail early, in one line, when the choice cannot run work: a package missing (local-cuda), or
    no Dask scheduler answering at a running one's address within `seconds` (None: the setting
    TOSCA_SCHEDULER_TIMEOUT). Call it before anything is made (a sweep's folder, a store)."""
    check_available(choice)
    address = address_of(choice)
    if address is not None:
        where = address if choice.kind == "address" else f"{address} (from {choice.target})"
        check_answers(address, where, connect_seconds() if seconds is None else seconds)


@contextlib.contextmanager
def dask_client(
    choice: SchedulerChoice, connect_timeout: float | None = None, **cluster_options: Any
) -> Iterator[Any]:
    """A `distributed.Client` for the choice; a local cluster is started and closed with the block.

    A running scheduler is checked first (`check_scheduler`, within `connect_timeout` seconds; None:
    TOSCA_SCHEDULER_TIMEOUT); losing the scheduler within the block is one line saying that what
    was finished is kept and how to resume, whatever Dask call ran into it, and so is a scheduler
    silent, or without a worker, for as long, where the block waits through
    `scheduler_link.each_finished`.
    `cluster_options` go to LocalCluster / LocalCUDACluster (ignored for a running scheduler).
    """
    from distributed import Client

    from tosca_foundation.cluster import hosted_cluster, ship_registrations

    seconds = connect_seconds() if connect_timeout is None else connect_timeout
    check_scheduler(choice, seconds)
    label = choice.describe()
    if choice.kind in ("local", "local-cuda"):
        # its workers never run the caller's script, import installed code only and go with this
        # process (tosca_foundation.cluster, tosca_foundation.processes)
        with (
            hosted_cluster(choice.kind, choice.workers, cluster_options) as address,
            Client(address, timeout=seconds) as client,
            said_when_lost(client, label, ""),
            said_when_workers_lost(client, label, bound=seconds),
        ):
            ship_registrations(client)
            yield client
        return
    address = address_of(choice)
    try:
        client = Client(address, timeout=seconds)
    except Exception as exc:  # it went between the check and now
        raise UserError(f"cannot reach {label} within {seconds:g} s ({reason(exc)}); {START_ONE}") from None
    resume = f", once a scheduler answers at {address} (or with another --scheduler)"
    with (
        client,
        said_when_lost(client, label, resume),
        said_when_workers_lost(client, label, resume, bound=seconds),
    ):
        ship_registrations(client)
        yield client
