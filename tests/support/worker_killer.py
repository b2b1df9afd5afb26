"""Dask worker preload for tests: the first worker to write a view of the training split writes
garbage in its place and then SIGKILLs itself, leaving a half-written chunk behind; and (a second
marker) the first worker to start a stage-2 work (a sweep's points) SIGKILLs itself as it starts.

Enabled by `distributed.worker.preload` (or `dask worker --preload`) pointing at this file and the
environment variable TOSCA_TEST_KILL_MARKER (a chunk's write) or TOSCA_TEST_KILL_WORK_MARKER (a
work) naming a file that records what was killed; a marker is created exclusively, so exactly one
worker dies, once, whatever restarts follow.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any


def _first(marker: str, what: str) -> bool:
    """Whether this call is the first of every worker's to claim `marker` (then it records `what`)."""
    try:
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        return False
    os.write(fd, what.encode())
    os.close(fd)
    return True


def _kill_at_first_work(marker: str) -> None:
    """The pickled task names `executor.run_work` by module and name: it finds this one."""
    from tosca_heads.running import executor

    original = executor.run_work

    def run_work(work: Any, *args: Any, **kwargs: Any) -> Any:
        if _first(marker, f"{os.getpid()} {work.kind} {len(work.trains)}"):
            os.kill(os.getpid(), signal.SIGKILL)
        return original(work, *args, **kwargs)

    executor.run_work = run_work


def dask_setup(worker: Any) -> None:
    work_marker = os.environ.get("TOSCA_TEST_KILL_WORK_MARKER")
    if work_marker:
        _kill_at_first_work(work_marker)
    marker = os.environ.get("TOSCA_TEST_KILL_MARKER")
    if not marker:
        return
    import zarr.storage._local as local

    original = local._put

    def put(path: Path, value: Any, exclusive: bool = False) -> int:
        if "/train/views/c/" in str(path) and _first(marker, str(path)):
            size = len(bytes(value.as_buffer_like()))
            original(path, type(value).from_bytes(os.urandom(size)), exclusive=exclusive)
            os.kill(os.getpid(), signal.SIGKILL)
        return original(path, value, exclusive=exclusive)

    local._put = put
