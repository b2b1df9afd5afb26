"""Dask worker preload for tests: the first worker to write a view of the training split writes
garbage in its place and then SIGKILLs itself, leaving a half-written chunk behind.

Enabled by `distributed.worker.preload` pointing at this file and the environment variable
TOSCA_TEST_KILL_MARKER naming a file that records which write was killed; the marker is created
exclusively, so exactly one worker dies, once, whatever restarts follow.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any


def dask_setup(worker: Any) -> None:
    marker = os.environ.get("TOSCA_TEST_KILL_MARKER")
    if not marker:
        return
    import zarr.storage._local as local

    original = local._put

    def put(path: Path, value: Any, exclusive: bool = False) -> int:
        if "/train/views/c/" in str(path):
            try:
                fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            except FileExistsError:
                return original(path, value, exclusive=exclusive)
            os.write(fd, str(path).encode())
            os.close(fd)
            size = len(bytes(value.as_buffer_like()))
            original(path, type(value).from_bytes(os.urandom(size)), exclusive=exclusive)
            os.kill(os.getpid(), signal.SIGKILL)
        return original(path, value, exclusive=exclusive)

    local._put = put
