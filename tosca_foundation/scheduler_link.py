"""The link to a running Dask scheduler: reached within a bound, lost in one line.

Dask's client waits without limit for the handshake of whatever accepts its connection (an HTTP
server on the port, a server that accepts and says nothing), and a scheduler that dies mid-run
surfaces as whatever Dask call ran into it (`FutureCancelledError`, `CommClosedError`, an
`OSError` of its comms, a `TimeoutError`). So, in this one place:

- `check_answers(address, where, seconds)`: nothing listening, a server that is not Dask, or a Dask
  process that is not a scheduler is one line within `seconds` (the caller calls it before it
  makes anything: a sweep's folder, a store);
- `said_when_lost(client, label, resume)`: a block that runs work on the client turns the loss of
  its scheduler into one line (what happened, that what was finished is kept, how to resume), and
  closes the client without Dask's own log of the failed reconnection; `lost_scheduler(exc,
  client)` tells that loss from a task's own error (the extraction's retry of lost scatters asks).

- `said_when_workers_lost(client, label)`: a worker lost mid-run is one line as it is noticed
  (its address, how many are left, that Dask runs its units again on the others and what was
  finished is kept): the watch asks the scheduler for its workers every `WATCH_SECONDS` on a
  thread of its own, each ask its own answer (`workers_of`: never the client's cached
  `scheduler_info`, which the client's own periodic refresh overwrites with a worker-less summary,
  so that a watch reading it in between saw every worker "lost ... (0 left)"). (Subscribing to the
  scheduler's `all` event topic instead breaks the client's connection in distributed 2026.8: some
  event on it carries a WorkerState the scheduler cannot serialize; a scheduler plugin would need
  tosca installed where the scheduler runs.)
- `each_finished(client, futures)` and `result_in_time(client, future)`: the futures as they finish, as `distributed.as_completed`
  gives them, but never a wait without end: a scheduler that stops answering while its connection
  stays open (a frozen process, a network cut that leaves the socket up) or that has had no worker
  for the bound (every worker gone) is one line (`SchedulerStalled`): what happened, that what was
  finished is kept, how to resume. Dask itself waits on both for ever, and so does fetching a
  finished task's result through a frozen scheduler.

The bound is `TOSCA_SCHEDULER_TIMEOUT` seconds (`connect_seconds`), 30 by default: on reaching a
scheduler, on a scheduler's silence, on a cluster without a worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import CancelledError
from typing import Any

from tosca_foundation.errors import UserError
from tosca_foundation.settings import setting
from tosca_foundation.text import tell

CONNECT_SECONDS = 30.0  # the default bound on reaching a scheduler (TOSCA_SCHEDULER_TIMEOUT)
LOST = "scheduler-connection-lost"  # the reason Dask cancels every future with when its scheduler goes
WATCH_SECONDS = 2.0  # how often a running block asks the scheduler which workers it has
START_ONE = "start one with `dask scheduler`, or use --scheduler local:N"


def connect_seconds() -> float:
    """Seconds a command waits for a scheduler to answer (TOSCA_SCHEDULER_TIMEOUT, checked as a setting)."""
    value = setting("TOSCA_SCHEDULER_TIMEOUT")
    return CONNECT_SECONDS if value is None else float(value)


def check_answers(address: str, where: str, seconds: float) -> None:
    """One line within `seconds` unless a Dask scheduler answers at `address` (tcp:// or tls://,
    checked by the caller; `where`: how to name it): nothing listening, a server that speaks
    something else (HTTP, or nothing at all), a Dask worker."""
    deadline = time.monotonic() + seconds
    host, port = _host_port(address)
    try:
        socket.create_connection((host, port), timeout=seconds).close()
    except OSError as exc:
        why = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or type(exc).__name__).lower()
        raise UserError(
            f"cannot reach a Dask scheduler at {where} within {seconds:g} s ({why}); {START_ONE}"
        ) from None
    identity = _identity(address, max(deadline - time.monotonic(), 0.1))
    if identity is None:
        tls = (
            "; Dask's TLS settings (distributed.comm.tls) must hold this client's certificate"
            if address.startswith("tls://")
            else ""
        )
        raise UserError(
            f"{where} accepts connections but is not a Dask scheduler (no Dask answer within {seconds:g} s): "
            f"check the address and port (`dask scheduler` prints its own){tls}; on a slow link, raise TOSCA_SCHEDULER_TIMEOUT"
        )
    kind = identity.get("type")
    if kind != "Scheduler":
        said = f"a Dask {kind}" if isinstance(kind, str) and kind.isidentifier() else "a Dask process"
        raise UserError(
            f"{where} is {said}, not a scheduler: pass the scheduler's address (`dask scheduler` prints it)"
        )


def _host_port(address: str) -> tuple[str, int]:
    place = address.partition("://")[2] or address
    host, _, port = place.rpartition(":")
    return host.strip("[]"), int(port)


def _identity(address: str, seconds: float) -> dict[str, Any] | None:
    """What the Dask process at `address` says it is, or None when no Dask answer came within
    `seconds`. Asked on a thread of its own (with its own event loop: the caller may be running one,
    a notebook's), which is left behind if it overruns: nothing then waits on it."""
    answer: list[Any] = []

    def ask() -> None:
        with contextlib.suppress(BaseException):  # anything but an answer is "no Dask answer"
            answer.append(asyncio.run(asyncio.wait_for(_ask_identity(address, seconds), seconds)))

    thread = threading.Thread(target=ask, name="tosca-scheduler-check", daemon=True)
    thread.start()
    thread.join(seconds + 1)
    return answer[0] if answer and isinstance(answer[0], dict) else None


async def _ask_identity(address: str, seconds: float) -> Any:
    from distributed.comm import connect
    from distributed.security import Security

    comm = await connect(address, timeout=seconds, **Security().get_connection_args("client"))
    try:
        await comm.write({"op": "identity", "reply": True})
        return await comm.read()
    finally:
        comm.abort()


def lost_scheduler(exc: BaseException, client: Any = None) -> bool:
    """Whether `exc`, raised by a Dask call, means the scheduler went away: every future is then
    cancelled for `LOST`; a comm closed, an OSError or a timeout means it only while the client is
    no longer running (the same types raised by a task on a worker are that task's own)."""
    from distributed.comm.core import CommClosedError

    if isinstance(exc, CancelledError) and getattr(exc, "reason", None) == LOST:
        return True
    gone = client is not None and getattr(client, "status", "running") != "running"
    return gone and isinstance(exc, (CancelledError, CommClosedError, OSError, TimeoutError))


class SchedulerStalled(UserError):
    """The scheduler stopped answering, or has had no worker, for the bound: one line."""


@contextlib.contextmanager
def said_when_lost(client: Any, label: str, resume: str) -> Iterator[None]:
    """Run the block's work on `client`; the loss of its scheduler is one line (`resume`: what to do
    besides running the same command again), and the client is closed quietly (Dask logs its
    cancelled reconnection as an error, with a traceback). A stalled scheduler (`each_finished`)
    is closed within a second: it will not answer the client's goodbye."""
    try:
        yield
    except SchedulerStalled:
        with _dask_quiet():
            client.close(timeout=1)
        raise
    except Exception as exc:
        if not lost_scheduler(exc, client):
            raise
        with _dask_quiet():
            client.close()
        raise UserError(
            f"lost {label} mid-run (its connection closed): what was finished is kept; "
            f"run the same command again to resume{resume}"
        ) from None


_WATCHES: dict[int, _WorkerWatch] = {}  # id(client) -> its watch, while its block runs


@contextlib.contextmanager
def said_when_workers_lost(
    client: Any,
    label: str,
    resume: str = "",
    every: float = WATCH_SECONDS,
    bound: float | None = None,
    ask: Callable[[Any, float], set[str] | None] | None = None,
) -> Iterator[None]:
    """Within the block, each worker of `client`'s scheduler that goes away is said in one line
    (`text.tell`), within about `every` seconds and at the latest when the block ends: Dask runs
    the units it held again on the other workers, so the results are whole, but the time lost
    should not be a mystery. A worker that joins (a nanny's restart) is not said; the watch ends
    with the block, before the workers of a local cluster are closed, and says nothing once the
    client is closed (a scheduler's loss is `said_when_lost`'s line). The watch also keeps since
    when the scheduler has left an ask unanswered, or answered with no worker: `each_finished` on
    this client stops waiting `bound` seconds (None: TOSCA_SCHEDULER_TIMEOUT) after it. `ask`: how the scheduler is asked
    for its workers (`workers_of`; a test's stand-in)."""
    watch = _WorkerWatch(client, label, resume, connect_seconds() if bound is None else bound, ask)
    _WATCHES[id(client)] = watch
    stop = threading.Event()

    def keep_watching() -> None:  # asked at least twice within the bound
        while not stop.wait(min(every, watch.bound / 2)) and watch.check():
            pass

    thread = threading.Thread(target=keep_watching, name="tosca-worker-watch", daemon=True)
    thread.start()
    finished = False
    try:
        yield
        finished = True
    finally:
        stop.set()
        _WATCHES.pop(id(client), None)
        if finished:
            thread.join(timeout=every + 30)
            watch.check()  # a loss the last interval had not seen yet


def workers_of(client: Any, seconds: float) -> set[str] | None:
    """The addresses of the workers `client`'s scheduler has now, asked of it (not the client's
    cache: see the module docstring), or None when no answer came within `seconds`."""
    try:
        identity = client.sync(client.scheduler.identity, n_workers=-1, callback_timeout=seconds)
        return set(identity.get("workers", {}))
    except Exception:  # no answer, the scheduler went, or the client closed: said elsewhere
        return None


class _WorkerWatch:
    """The workers a scheduler had when last asked; `check` says those gone since and keeps since
    when an ask has gone unanswered, or every answer listed no worker; `stalled` says, once that is
    `bound` seconds ago, why. A watch thread starved of the CPU (a loaded machine) sets neither:
    each verdict needs an ask made and left unanswered, or answers saying so."""

    def __init__(
        self,
        client: Any,
        label: str,
        resume: str,
        bound: float,
        ask: Callable[[Any, float], set[str] | None] | None,
    ) -> None:
        self.client, self.label, self.resume, self.bound = client, label, resume, bound
        self.ask = ask or workers_of
        self.lock = threading.Lock()
        self.empty: float | None = None  # since when every answer listed no worker (None: the last had one)
        self.asking: float | None = None  # since when an ask has gone unanswered (None: answered)
        self.seen = self._workers() or set()

    def _workers(self) -> set[str] | None:
        if self.asking is None:
            self.asking = time.monotonic()
        now = self.ask(self.client, self.bound)
        if now is not None:
            self.asking = None
            self.empty = None if now else self.empty or time.monotonic()
        return now

    def check(self) -> bool:
        """Say each worker lost since the last ask; False once the client is closed."""
        with self.lock:
            now = self._workers()
            if now is None:
                return getattr(self.client, "status", "running") in ("running", "connecting")
            for address in sorted(self.seen - now):
                tell(
                    f"lost the Dask worker {address} of {self.label} ({len(now)} left): Dask runs the "
                    "units it held again on the others; what was finished is kept",
                    "note",
                )
            self.seen = now
            return True

    def stalled(self) -> SchedulerStalled | None:
        """The one line for a scheduler silent (an ask unanswered), or without a worker, for `bound`
        seconds; else None."""
        now = time.monotonic()
        silent = self.asking is not None and now - self.asking > self.bound
        workerless = self.empty is not None and now - self.empty > self.bound  # answers: no worker
        if not silent and not workerless:
            return None
        kept = "stopped waiting; what was finished is kept"
        again = f"run the same command again to resume{self.resume}"
        if silent:
            return SchedulerStalled(
                f"{self.label} has not answered for {self.bound:g} s (a frozen scheduler, or a network "
                f"cut that left the connection open; TOSCA_SCHEDULER_TIMEOUT): {kept}; {again}"
            )
        return SchedulerStalled(
            f"{self.label} has had no worker for {self.bound:g} s (every worker gone; "
            f"TOSCA_SCHEDULER_TIMEOUT): {kept}; start workers and {again}"
        )


def each_finished(client: Any, futures: Iterable[Any]) -> Iterator[Any]:
    """Each of `futures` as it finishes, within the bound of the watch on `client`
    (`said_when_workers_lost`): `SchedulerStalled` once its scheduler has been silent, or without
    a worker, for that long. Without a watch, as `distributed.as_completed`."""
    from distributed import as_completed, wait

    watch = _WATCHES.get(id(client))
    if watch is None:
        yield from as_completed(list(futures))
        return
    pending = set(futures)
    while pending:
        try:
            with client.as_current():  # `wait` asks the current client
                done, pending = wait(pending, timeout=WATCH_SECONDS, return_when="FIRST_COMPLETED")
        except TimeoutError:
            done = set()
        except CancelledError:  # `wait` raises for a cancelled future (a lost dependency), where
            # `as_completed` yields it: yielded the same, its `result()` raises for the caller
            done = {future for future in pending if future.done()}
            pending -= done
        yield from done
        stalled = watch.stalled()
        if stalled is not None and pending:
            raise stalled


@contextlib.contextmanager
def _dask_quiet() -> Iterator[None]:
    """Dask's loggers (each of which may have a level of its own) silenced within the block."""
    loggers = [
        logging.getLogger(name)
        for name in list(logging.root.manager.loggerDict)
        if name.startswith("distributed")
    ]
    levels = [log.level for log in loggers]
    for log in loggers:
        log.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for log, level in zip(loggers, levels, strict=True):
            log.setLevel(level)


def result_in_time(client: Any, future: Any) -> Any:
    """`future.result()` within the bound of the watch on `client`: a finished task's result is
    fetched from its worker through the scheduler, which a frozen scheduler never answers (the wait
    `each_finished` bounds would only move here). A task's own error is raised as it is."""
    watch = _WATCHES.get(id(client))
    if watch is None or future.status == "error":
        return future.result()
    while True:
        try:
            return future.result(timeout=WATCH_SECONDS)
        except TimeoutError:
            if future.status == "error":  # the task's own TimeoutError, not the fetch's
                return future.result()
            stalled = watch.stalled()
            if stalled is not None:
                raise stalled from None
