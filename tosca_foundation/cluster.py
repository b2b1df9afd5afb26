"""A local Dask cluster whose workers never run the caller's script, and what they need of it.

Python starts a local cluster's workers with `spawn`, and a spawned process first imports the
main module of the program that started it again (as `__mp_main__`): a plain `python my_sweep.py`
that calls `tosca_heads.sweep(...)` at module level, with no `if __name__ == "__main__":` guard,
would run its sweep again in every worker (which then finds its folder busy, and the cluster never
starts). So tosca starts a local cluster (`local:N`, `local-cuda`, the `--jobs N` of a sweep or a
suite) in a helper process of its own, `python -c` with nothing to import again: its workers
import installed code only, whether the caller is the command line, a script, a notebook or
`python -c`. The helper takes the caller's import path and Dask settings, dies with the caller
(tosca_foundation.processes), and closes the cluster when the caller closes its stdin; the
caller reaches the cluster through a `distributed.Client` at the address the helper sends back.

A worker that does not run the caller's script lacks what the script (or a notebook cell)
registered itself: a router, a baseline, a dataset. `ship_registrations` sends every such entry
of the registries (tosca_foundation.registry) to each worker of a client, now and after a
restart (a Dask worker plugin); a plug-in named in $TOSCA_PLUGINS is imported there by name.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

from distributed import WorkerPlugin

from tosca_foundation.errors import UserError
from tosca_foundation.processes import SAFE_PATH, die_with_parent, local_cluster_config
from tosca_foundation.registry import REGISTRIES, Entry, Registry
from tosca_foundation.scheduler_link import SchedulerStalled
from tosca_foundation.text import reason

# the helper's whole program: its first line of stdin says what to start
BOOT = "import json, sys; s = json.loads(sys.stdin.readline()); sys.path[:] = s['path']; " + (
    "from tosca_foundation.cluster import host; host(s)"
)
# no dashboard; the scheduler's HTTP server (health, metrics: it starts one even so) on a free port
# of this machine, not 8787, which a second cluster or any other program holds ("Port 8787 is
# already in use", a UserWarning leaked to the user's terminal by the helper process)
QUIET = {
    "dashboard_address": None,
    "scheduler_kwargs": {"dashboard_address": "127.0.0.1:0"},
    "silence_logs": logging.ERROR,
}
CLOSE_SECONDS = 60  # a cluster closes within this, or its helper is killed
CLOSE = "close\n"  # what the caller says to the helper when it is done


@contextlib.contextmanager
def hosted_cluster(kind: str, workers: int | None, options: dict[str, Any]) -> Iterator[str]:
    """A local cluster (`kind` local or local-cuda) of `workers` processes started by a helper
    process: its scheduler's address, for as long as the block runs."""
    import dask

    answer_from, answer_to = os.pipe()
    plan = {
        "kind": kind,
        "workers": workers,
        "options": options,
        "parent": os.getpid(),
        "path": sys.path,
        "config": dask.config.config,
        "answer": answer_to,
    }
    helper = subprocess.Popen(
        [sys.executable, "-c", BOOT],
        stdin=subprocess.PIPE,
        env={**os.environ, SAFE_PATH: "1"},
        pass_fds=(answer_to,),
        text=True,
    )
    os.close(answer_to)
    try:
        assert helper.stdin is not None
        helper.stdin.write(json.dumps(plan, default=str) + "\n")
        helper.stdin.flush()
        with os.fdopen(answer_from) as answers:
            address = answers.readline().strip()
        if not address.startswith("address "):
            said = address.partition(" ")[2] or f"its helper process ended with exit code {helper.wait()}"
            raise RuntimeError(f"the local Dask cluster did not start: {said}")
        yield address.partition(" ")[2]
    except SchedulerStalled:  # its scheduler is frozen: it would not hear "close"
        helper.kill()
        raise
    finally:
        with contextlib.suppress(OSError):  # (said, not only closed: a child forked here holds it open)
            helper.stdin.write(CLOSE)  # type: ignore[union-attr]
            helper.stdin.close()  # type: ignore[union-attr]
        try:
            helper.wait(CLOSE_SECONDS)
        except subprocess.TimeoutExpired:
            helper.kill()
            helper.wait()


def host(plan: dict[str, Any]) -> None:
    """The helper process: start the cluster, send its address back, keep it until the caller says
    so. Ctrl-C, which reaches every process of the terminal's group, is the caller's to handle here
    (a handler, not SIG_IGN, which the workers would inherit: they stop on it as they always did)."""
    signal.signal(signal.SIGINT, lambda *_: None)
    die_with_parent(plan["parent"])
    import dask

    dask.config.config.clear()  # the caller's settings, as they are (not merged into the defaults)
    dask.config.config.update(plan["config"])
    dask.config.set(local_cluster_config(dask.config))  # for the helper's whole life
    with os.fdopen(plan["answer"], "w") as answer:
        try:
            cluster = _start(plan["kind"], plan["workers"], plan["options"])
        except Exception as exc:  # said by the caller, in one line
            answer.write(f"error {type(exc).__name__}: {' '.join(str(exc).split())}\n")
            sys.exit(1)
        answer.write(f"address {cluster.scheduler_address}\n")
    for line in sys.stdin:  # until the caller says so or closes it (or dies, and this process with it)
        if line == CLOSE:
            break
    cluster.close()


def _start(kind: str, workers: int | None, options: dict[str, Any]) -> Any:
    if kind == "local-cuda":
        from dask_cuda import LocalCUDACluster

        return LocalCUDACluster(**{**QUIET, **options})
    from distributed import LocalCluster

    defaults = {"n_workers": workers, "threads_per_worker": 1, "processes": True}
    return LocalCluster(**{**defaults, **QUIET, **options})


def ship_registrations(client: Any) -> None:
    """Every registry entry made outside the package (a plug-in, a script, a notebook) sent to the
    client's workers, now and whenever one (re)starts. One that cannot reach them (defined in a
    module they cannot import) stops the work in one line: without it, their figures would lack it."""
    shipped = [(registry, found) for registry in REGISTRIES if (found := registry.made_elsewhere())]
    if not shipped:
        return
    try:
        client.register_plugin(Registrations(shipped), name="tosca-registrations")
    except Exception as exc:  # raised on a worker, or in pickling here
        names = ", ".join(
            f"{registry.kind} {e.name} (from {e.origin})" for registry, found in shipped for e in found
        )
        raise UserError(
            f"what this process registered cannot reach the Dask workers: {names} "
            f"({reason(exc)}); define it in a script, a notebook or "
            "a module named in TOSCA_PLUGINS that the workers can import"
        ) from None


class Registrations(WorkerPlugin):
    """On a worker: the caller's registrations, adopted by the worker's own registries."""

    def __init__(self, shipped: list[tuple[Registry[Any], list[Entry]]]) -> None:
        self.shipped = shipped

    def setup(self, worker: Any) -> None:
        for registry, entries in self.shipped:
            registry.adopt(entries)
