"""The processes tosca starts run installed code only, and die with the process that started them.

Installed code only. A Python that multiprocessing or Dask starts with `spawn` or `forkserver`
(a local cluster's workers: `--scheduler local:N`, `tosca sweep --jobs N`, `tosca suite --jobs N`)
runs `python -c ...`, and Python puts the working folder first on such a process's import path:
a `multiprocessing.py` in the folder a sweep was started from (a downloaded dataset, a shared
folder) would run in every worker. `PYTHONSAFEPATH=1` (Python 3.11+, what `python -P` does) keeps
the working folder off a new interpreter's path:
- `installed_code_only()` sets it for every process the command line starts (called once, before
  any command runs);
- `local_cluster_config()` hands it to the workers of a local Dask cluster however it is started
  (`distributed.nanny.pre-spawn-environ`, which the nanny applies before each spawn, a restart
  included), with this module as the workers' preload. (The nannies live in a helper process,
  tosca_foundation.cluster, so a spawned worker never runs the caller's script either.)
After it starts, a spawned child takes its parent's import path (multiprocessing copies it): the
`tosca` command's has no working folder on it. (A Python program that imports tosca from a folder
it runs in has that folder on its own path, and runs its code already; its workers inherit it.)
Loader workers (torch's DataLoader) are forked: they import nothing anew from the working folder.

Die with the parent. A `kill -9` of `tosca extract` must not leave helpers behind that write
into the store (Dask workers) or linger (loader workers; they never hold the store's lock:
filelock closes its copy in every forked child, tosca_foundation.locks): on Linux each helper asks the kernel to kill it when its parent dies
(`prctl(PR_SET_PDEATHSIG, SIGKILL)`): loader workers in `loader_worker_start` (the DataLoader's
`worker_init_fn`), Dask workers of local clusters in the preload (their parent is the cluster's
helper process, which dies with the process that started it: tosca_foundation.cluster). A
rerun takes the lock at once.

Stdout is the command's. A helper shares the command's standard output, which carries its
answers (`--json` among them): loader workers and local Dask workers print to stderr
(`answers_stay_clean`), so a plug-in's print in one never breaks them.

Import-light: stdlib only.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import sys
import threading
import time
from typing import Any

SAFE_PATH = "PYTHONSAFEPATH"
_PR_SET_PDEATHSIG = 1
PRELOAD = __name__  # the module Dask workers of local clusters import first


def installed_code_only() -> None:
    """Every Python process started from here on leaves the working folder off its import path."""
    os.environ[SAFE_PATH] = "1"


def local_cluster_config(config: Any) -> dict[str, Any]:
    """The Dask settings a local cluster's workers start with (given dask.config): the working
    folder off their import path, and this module as their preload (they die with their parent)."""
    environ = dict(config.get("distributed.nanny.pre-spawn-environ", {}) or {})
    environ[SAFE_PATH] = "1"
    preload = list(config.get("distributed.worker.preload", []) or [])
    if PRELOAD not in preload:
        preload.append(PRELOAD)
    return {"distributed.nanny.pre-spawn-environ": environ, "distributed.worker.preload": preload}


def die_with_parent(parent: int | None = None) -> bool:
    """End this process the moment `parent` (default: the process that started this one) ends; True
    when that is arranged. When `parent` is this process's parent, the kernel does it (Linux's
    PR_SET_PDEATHSIG; a parent that died before the request is noticed too); when it is not (a
    forkserver or spawn helper started this one on `parent`'s behalf), a thread waits for `parent`
    to end (through a pidfd where there is one) and ends this process."""
    if parent is None or os.getppid() == parent:
        if not sys.platform.startswith("linux"):
            return False
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
                return False
        except (OSError, AttributeError):
            return False
        if parent is not None and os.getppid() != parent:  # it died before the request was made
            os.kill(os.getpid(), signal.SIGKILL)
        return True
    threading.Thread(target=_end_with, args=(parent,), name="tosca-parent-watch", daemon=True).start()
    return True


def _end_with(parent: int) -> None:
    """Wait until process `parent` ends, then end this one at once."""
    try:
        fd = os.pidfd_open(parent)
    except (AttributeError, OSError):
        fd = None
    if fd is not None:
        select.select([fd], [], [])  # readable when the process has ended
    else:  # pragma: no cover - no pidfd (Linux before 5.3, other systems)
        while True:
            try:
                os.kill(parent, 0)
            except ProcessLookupError:
                break
            except PermissionError:
                pass
            time.sleep(0.2)
    os.kill(os.getpid(), signal.SIGKILL)


def answers_stay_clean() -> None:
    """In a helper process: whatever runs there prints to stderr. The helper shares the command's
    stdout, which carries its answers (`--json` among them); a plug-in's print would break them."""
    sys.stdout = sys.stderr


def loader_worker_start(parent: int, worker_id: int = 0) -> None:
    """A DataLoader's worker_init_fn (bind `parent` with functools.partial): die with the loader,
    print to stderr."""
    die_with_parent(parent)
    answers_stay_clean()


def dask_setup(worker: Any = None) -> None:
    """The preload of a local cluster's workers: a worker process dies with the process that started
    it (a worker running as a thread of this process, `processes=False`, changes nothing)."""
    import multiprocessing

    if multiprocessing.parent_process() is not None:
        die_with_parent()
        answers_stay_clean()
