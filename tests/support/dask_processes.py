"""A Dask cluster as a user starts one: `dask scheduler` and `dask worker` processes on loopback,
each its own program (`python -m distributed.cli.dask_scheduler`, `... dask_worker`, so a clean
clone's environment has them), importing this checkout's code. Started and waited for through
Dask's own calls (a client that retries until the scheduler listens, `wait_for_workers`), never a
sleep; every process is ended when the block ends."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from support import ROOT

START_SECONDS = 60


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Cluster:
    """A running scheduler (`address`) and its workers' nanny processes."""

    address: str
    scheduler: subprocess.Popen[bytes]
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def kill_scheduler(self) -> None:
        """SIGKILL the scheduler, as a machine that goes down would."""
        self.scheduler.send_signal(signal.SIGKILL)
        self.scheduler.wait(30)

    def worker_pids(self) -> dict[str, int]:
        """Each worker's address -> its process id (the process a nanny runs, the one that works)."""
        from distributed import Client

        with Client(self.address, timeout=START_SECONDS) as client:
            return {address: int(pid) for address, pid in client.run(os.getpid).items()}


def _environment(extra: dict[str, str] | None) -> dict[str, str]:
    """This checkout's code (and the tests' support modules) first on the workers' import path."""
    path = os.pathsep.join([str(ROOT), str(ROOT / "tests"), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {**os.environ, "PYTHONPATH": path, **(extra or {})}


@contextlib.contextmanager
def dask_cluster(
    logs: Path, workers: int = 1, preload: Path | None = None, env: dict[str, str] | None = None
) -> Iterator[Cluster]:
    """`dask scheduler` on a free loopback port and `workers` single-threaded `dask worker`s (each
    under a nanny, which starts it again when it dies), with `preload` on each worker and `env` in
    its environment; their output goes to files in `logs`."""
    from distributed import Client

    logs.mkdir(parents=True, exist_ok=True)
    address = f"tcp://127.0.0.1:{free_port()}"
    environ = _environment(env)
    started: list[subprocess.Popen[bytes]] = []

    def launch(name: str, args: list[str]) -> subprocess.Popen[bytes]:
        with open(logs / f"{name}.log", "wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", *args], stdout=out, stderr=subprocess.STDOUT, env=environ, cwd=logs
            )
        started.append(process)
        return process

    try:
        host, port = address.removeprefix("tcp://").split(":")
        scheduler = launch(
            "scheduler",
            ["distributed.cli.dask_scheduler", "--host", host, "--port", port, "--no-dashboard"],
        )
        cluster = Cluster(address, scheduler)
        for n in range(workers):
            args = ["distributed.cli.dask_worker", address, "--nthreads", "1", "--no-dashboard"]
            args += ["--name", f"w{n}", "--memory-limit", "0"]
            cluster.workers.append(
                launch(f"worker-{n}", [*args, *(["--preload", str(preload)] if preload else [])])
            )
        with Client(address, timeout=START_SECONDS) as client:
            client.wait_for_workers(workers, timeout=START_SECONDS)
        yield cluster
    finally:
        for process in reversed(started):  # the workers first; a nanny ends its worker on SIGTERM
            if process.poll() is None:
                process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(30)
