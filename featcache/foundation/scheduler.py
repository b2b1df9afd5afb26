"""One `--scheduler` string -> a Dask client: a local cluster, one worker per GPU, or a running scheduler.

Used by `tosca extract`; written so that any command that spreads work over Dask (`tosca sweep`)
can take the same strings:

    local:N      a LocalCluster of N single-threaded worker processes on this machine (N >= 1)
    local-cuda   dask_cuda.LocalCUDACluster: one worker process per visible GPU, each pinned to
                 its GPU through CUDA_VISIBLE_DEVICES (needs `pip install dask-cuda`)
    ADDRESS      a running scheduler: tcp://host:8786 (any scheme://, or host:port)
    FILE.json    the scheduler file `dask scheduler --scheduler-file FILE.json` wrote (shared FS)

Usage::

    choice = parse_scheduler(text)      # UserError with the valid forms if the text is none of them
    check_available(choice)             # UserError now (not minutes later) if dask-cuda is missing
    with dask_client(choice) as client: # a local cluster lives exactly as long as the block
        ...

Local clusters read Dask's config when they start, so a caller can change worker settings with
`with dask.config.set({...}), dask_client(choice) as client:`. Their workers import installed code
only, never run the caller's script (they are started by a helper process, which takes this
process's Dask settings: featcache.foundation.cluster) and die with this process
(featcache.foundation.processes). What the caller registered itself reaches every worker of a
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

from featcache.foundation.errors import UserError
from featcache.foundation.files import read_json
from featcache.foundation.limits import max_processes, require_at_most

SCHEDULER_FORMS = (
    "local:N (N worker processes here), local-cuda (one worker per GPU, needs dask-cuda), "
    "a scheduler address such as tcp://host:8786, or a scheduler file (.json)"
)
_ADDRESS = re.compile(r"^(?:[a-z][a-z0-9+.-]*://\S+|[^\s:/]+:\d+)$")
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
        return SchedulerChoice("file", target=text)
    if text == "local" or text.startswith(("local:", "local-")):
        raise UserError(f"unknown --scheduler {text!r}: use {SCHEDULER_FORMS}")
    if _ADDRESS.match(text):
        return SchedulerChoice("address", target=text)
    raise UserError(f"unknown --scheduler {text!r}: use {SCHEDULER_FORMS}")


def check_available(choice: SchedulerChoice) -> None:
    """Fail early, in one line, when the choice needs a package that is not installed."""
    if choice.kind == "local-cuda" and importlib.util.find_spec("dask_cuda") is None:
        raise UserError(
            "--scheduler local-cuda needs dask-cuda, which is not installed: pip install dask-cuda "
            "(or use --scheduler local:N, or a scheduler address)"
        )


@contextlib.contextmanager
def dask_client(
    choice: SchedulerChoice, connect_timeout: float = 30, **cluster_options: Any
) -> Iterator[Any]:
    """A `distributed.Client` for the choice; a local cluster is started and closed with the block.

    `cluster_options` go to LocalCluster / LocalCUDACluster (ignored for a running scheduler).
    """
    from distributed import Client

    from featcache.foundation.cluster import hosted_cluster, ship_registrations

    check_available(choice)
    if choice.kind in ("local", "local-cuda"):
        # its workers never run the caller's script, import installed code only and go with this
        # process (featcache.foundation.cluster, featcache.foundation.processes)
        with (
            hosted_cluster(choice.kind, choice.workers, cluster_options) as address,
            Client(address, timeout=connect_timeout) as client,
        ):
            ship_registrations(client)
            yield client
        return
    try:
        if choice.kind == "file":
            client = Client(scheduler_file=choice.target, timeout=connect_timeout)
        else:
            client = Client(choice.target, timeout=connect_timeout)
    except Exception as exc:  # unreachable, timed out, or a scheduler file that is not one
        reason = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        raise UserError(
            f"cannot reach {choice.describe()} within {connect_timeout:.0f} s ({reason}); "
            "start one with `dask scheduler`, or use --scheduler local:N"
        ) from exc
    with client:
        ship_registrations(client)
        yield client
