"""A running scheduler is reached within a bound, or refused in one line before anything is made;
losing it mid-run is one line saying what was kept and how to resume (issue 47, points 3 and 4)."""

from __future__ import annotations

import contextlib
import http.server
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.dask_processes import dask_cluster
from support.images import TINY_VIT, make_image_tree
from support.stores import synthetic_store
from typer.testing import CliRunner

from cli import app
from tosca_foundation.errors import UserError
from tosca_foundation.scheduler import dask_client, parse_scheduler

BOUND = 1.0  # seconds a test gives an address to answer (TOSCA_SCHEDULER_TIMEOUT)
SLACK = 3.0  # what the refusal may take beyond the bound (a loaded machine)


class _QuietHTTP(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def impostor(kind: str) -> Iterator[str]:
    """A loopback server that is not Dask: `http` (a web server), `silent` (accepts, says
    nothing), `closes` (accepts and closes at once), or `nothing` (a port nobody listens on)."""
    if kind == "http":
        web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _QuietHTTP)
        threading.Thread(target=web.serve_forever, daemon=True).start()
        try:
            yield f"tcp://127.0.0.1:{web.server_address[1]}"
        finally:
            web.shutdown()
            web.server_close()
        return
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    if kind == "nothing":
        listener.close()
        yield f"tcp://127.0.0.1:{port}"
        return
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:  # closed: the test is over
                return
            if kind == "closes":
                conn.close()
            else:
                held.append(conn)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"tcp://127.0.0.1:{port}"
    finally:
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        for conn in held:
            conn.close()


NOT_DASK = "accepts connections but is not a Dask scheduler (no Dask answer within 1 s)"
REFUSED = "cannot reach a Dask scheduler at tcp://127.0.0.1:"


@pytest.mark.parametrize(
    ("kind", "said"), [("http", NOT_DASK), ("silent", NOT_DASK), ("closes", NOT_DASK), ("nothing", REFUSED)]
)
def test_an_address_where_no_dask_scheduler_answers_is_one_line_within_the_bound(
    kind: str, said: str
) -> None:
    with impostor(kind) as address:
        start = time.monotonic()
        with pytest.raises(UserError) as refused, dask_client(parse_scheduler(address), BOUND):
            pass
    assert said in str(refused.value) and "\n" not in str(refused.value)
    assert time.monotonic() - start < BOUND + SLACK


def test_a_dask_worker_is_not_taken_for_its_scheduler() -> None:
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, processes=False, protocol="tcp", dashboard_address=None) as cluster:
        (worker,) = (w.address for w in cluster.workers.values())
        with (
            pytest.raises(UserError, match="is a Dask Worker, not a scheduler"),
            dask_client(parse_scheduler(worker), BOUND),
        ):
            pass


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("inproc://x", "not inproc://"),
        ("inproc://10.0.0.1/123/1", "not inproc://"),
        ("ucx://", "not ucx://"),
        ("ucx://head:8786", "not ucx://"),
        ("tcp://head", "unknown --scheduler 'tcp://head'"),
        ("tcp://head:99999", "unknown --scheduler 'tcp://head:99999'"),
    ],
)
def test_schemes_and_addresses_tosca_cannot_reach_are_refused_with_the_valid_ones(
    text: str, said: str
) -> None:
    with pytest.raises(UserError, match=said) as refused:
        parse_scheduler(text)
    assert "tcp://host:8786, tls://host:8786 or host:8786" in str(refused.value)


def test_a_scheduler_file_naming_an_address_tosca_cannot_reach_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "scheduler.json"
    path.write_text('{"type": "Scheduler", "address": "ucx://10.0.0.1:8786"}')
    with pytest.raises(UserError, match=r"the address in scheduler file .* not ucx://"):
        parse_scheduler(str(path))


def _one_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    return lines[0]


@pytest.mark.parametrize("kind", ["silent", "http", "inproc"])
def test_a_refused_scheduler_leaves_no_sweep_folder_and_no_store(
    tmp_path: Path, image_tree: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Checked at the edge, before the sweep's folder or the store (or its cache folder) is made."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TOSCA_SCHEDULER_TIMEOUT", str(BOUND))
    store = synthetic_store(tmp_path / "s.zarr", classes=4)
    with contextlib.ExitStack() as stack:
        address = "inproc://x" if kind == "inproc" else stack.enter_context(impostor(kind))
        runner = CliRunner()
        start = time.monotonic()
        swept = runner.invoke(
            app, ["sweep", "--store", str(store.path), "--r", "2,4", "--scheduler", address]
        )
        extracted = runner.invoke(
            app,
            [
                *("extract", "--model", TINY_VIT, "--dataset", "imagefolder", "--data-root", str(image_tree)),
                *("--random-init", "--cache-dir", str(tmp_path / "c"), "--scheduler", address),
            ],
        )
        took = time.monotonic() - start
    for result in (swept, extracted):
        assert result.exit_code == 2, result.output
        line = _one_line(result.output)
        assert ("not inproc://" if kind == "inproc" else NOT_DASK) in line, line
    assert took < 2 * (BOUND + SLACK)
    assert not (tmp_path / "runs").exists() and not (tmp_path / "c").exists()


# ------------------------------------------------------------------------------------------ a scheduler that dies


SWEEP_GRID = {"r": "2,4", "seed": "0,1", "epochs": "3", "batch_size": "8", "init_cls": "2", "increment": "2"}


@pytest.mark.heavy
def test_a_scheduler_killed_mid_sweep_is_one_line_and_the_same_command_resumes(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """`dask scheduler` SIGKILLed as the first point lands: one line (no traceback, no Dask log),
    the finished point kept (its cell, and its rows in results.csv); the sweep run again (here on this machine) computes
    only the others, and its results equal an undisturbed sweep's."""
    from tosca_heads.requests.command_requests import SweepRequest
    from tosca_heads.routers import resolve_routers
    from tosca_heads.studies.results import by_point
    from tosca_heads.studies.sweeps import sweep

    store = synthetic_store(tmp_path / "s.zarr", classes=4)

    def request(out: str, **how: object) -> SweepRequest:
        return SweepRequest(
            store=store.path, out=tmp_path / out, device="cpu", grid=SWEEP_GRID, group=1, **how
        )  # type: ignore[arg-type]

    with dask_cluster(tmp_path / "dask") as cluster:
        killed: list[int] = []

        def kill_scheduler(rows: list[dict], finished: int, total: int) -> None:
            if not killed:
                killed.append(finished)
                cluster.kill_scheduler()

        capfd.readouterr()
        with pytest.raises(UserError) as lost:
            sweep(request("hit", scheduler=cluster.address), on_point=kill_scheduler)
        said = capfd.readouterr()
    assert str(lost.value).startswith(f"lost the scheduler at {cluster.address} mid-run")
    assert "what was finished is kept; run the same command again to resume" in str(lost.value)
    assert "\n" not in str(lost.value) and "Traceback" not in said.err and "distributed" not in said.err
    kept = (tmp_path / "hit" / "results.csv").read_text()
    resumed = sweep(request("hit", jobs=1))
    calm = sweep(request("calm", jobs=1))
    assert killed and resumed.ran == 4 - resumed.already_done and 1 <= resumed.already_done < 4
    again = (tmp_path / "hit" / "results.csv").read_text().splitlines()
    assert set(kept.splitlines()) <= set(again)  # the finished point's rows, drawn again as they were
    a = by_point(resumed.frame).set_index("key").sort_index()
    b = by_point(calm.frame).set_index("key").sort_index()
    assert list(a.index) == list(b.index) and len(a) == 4
    for router in resolve_routers(None):
        assert (a[f"A_last_{router}"] == b[f"A_last_{router}"]).all(), router


@pytest.mark.heavy
def test_a_scheduler_killed_mid_extraction_is_one_line_and_the_same_command_resumes(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """`dask scheduler` SIGKILLed as the first chunk lands: one line, the finished chunks kept;
    the extraction run again (here on this machine) computes only the others, to the arrays of an
    undisturbed one."""
    from featcache.extraction import ExtractRequest, plan_extraction, run_extraction
    from featcache.store import FeatureStore

    common: dict = dict(
        model=TINY_VIT,
        dataset="imagefolder",
        data_root=make_image_tree(tmp_path / "images", classes=2, train=2, test=1),
        cache_dir=tmp_path / "c",
        random_init=True,
        views=1,
        seed=2,
        chunk_size=1,
        batch_size=1,
        workers=0,
        device="cpu",
    )
    with dask_cluster(tmp_path / "dask") as cluster:
        killed: list[str] = []

        def kill_scheduler(split: str, done: int, total: int) -> None:
            if not killed:
                killed.append(split)
                cluster.kill_scheduler()

        capfd.readouterr()
        request = ExtractRequest(store=tmp_path / "hit.zarr", scheduler=cluster.address, **common)
        with pytest.raises(UserError) as lost:
            run_extraction(plan_extraction(request), kill_scheduler)
        said = capfd.readouterr()
    assert str(lost.value).startswith(f"lost the scheduler at {cluster.address} mid-run")
    assert "\n" not in str(lost.value) and "Traceback" not in said.err and "distributed" not in said.err
    resumed = run_extraction(plan_extraction(ExtractRequest(store=tmp_path / "hit.zarr", **common)))
    calm = FeatureStore.open(
        run_extraction(plan_extraction(ExtractRequest(store=tmp_path / "calm.zarr", **common))).store
    )
    assert killed and resumed.chunks_skipped >= 1 and resumed.chunks_computed >= 1
    hit = FeatureStore.open(resumed.store)
    assert hit.is_complete()
    for split in ("train", "test"):
        np.testing.assert_array_equal(hit.features(split), calm.features(split))
    np.testing.assert_array_equal(
        np.asarray(hit.group["train/views"][:]), np.asarray(calm.group["train/views"][:])
    )


class _Workers:
    """A scheduler that answers each ask with the next set of workers, the last one for good;
    `drained` is set once the last was asked for (the watch has said what came before it)."""

    def __init__(self, *states: set[str]) -> None:
        self.states = [set(s) for s in states]
        self.drained = threading.Event()

    def __call__(self, client: object, seconds: float) -> set[str]:
        if len(self.states) == 1:
            self.drained.set()
            return self.states[0]
        return self.states.pop(0)


def test_a_worker_lost_mid_run_is_one_line_and_one_that_joins_is_not_said() -> None:
    """Issue 49, point 4: Dask reruns a lost worker's units silently; the watch says each loss once
    (its address, how many are left), never a worker that joins (a nanny's restart)."""
    from tosca_foundation.scheduler_link import said_when_workers_lost
    from tosca_foundation.text import telling

    said: list[tuple[str, str]] = []
    ask = _Workers({"tcp://a:1", "tcp://b:2"}, {"tcp://a:1", "tcp://b:2"}, {"tcp://b:2", "tcp://c:3"})
    place = "the Dask scheduler at tcp://s:8786"
    with (
        telling(lambda line, label: said.append((label, line))),
        said_when_workers_lost(object(), place, every=0.001, ask=ask),
    ):
        assert ask.drained.wait(10)
    assert said == [
        (
            "note",
            "lost the Dask worker tcp://a:1 of the Dask scheduler at tcp://s:8786 (2 left): Dask runs "
            "the units it held again on the others; what was finished is kept",
        )
    ]


def test_a_client_that_is_closed_ends_the_watch_without_a_word() -> None:
    from tosca_foundation.scheduler_link import said_when_workers_lost
    from tosca_foundation.text import telling

    class Closed:
        status = "closed"

    asked = threading.Event()
    calls: list[int] = []

    def gone(client: object, seconds: float) -> None:
        calls.append(1)
        if len(calls) == 2:  # the watch's own ask, after the block's first
            asked.set()

    said: list[str] = []
    with (
        telling(lambda line, label: said.append(line)),
        said_when_workers_lost(Closed(), "x", every=0.001, ask=gone),
    ):
        assert asked.wait(10)
    assert said == []


# ------------------------------------------------------------------------------------------ issue 57, point 11


def test_the_clients_own_refresh_of_its_cache_is_never_taken_for_lost_workers() -> None:
    """Issue 57, point 11: a plain local run said "lost the Dask worker ... (0 left)" for every
    worker on a loaded machine. The client refreshes its cached `scheduler_info` every 2 s with a
    summary that lists no worker; a watch that read the cache after that refresh (the race: the
    refresh landing between the watch's ask and its read) saw every worker gone. Here the refresh
    is made to land there every time: the watch asks the scheduler itself, says nothing, and still
    says the one worker really closed, with how many are left."""
    from distributed import Client, LocalCluster

    from tosca_foundation.scheduler_link import said_when_workers_lost
    from tosca_foundation.text import telling

    said: list[str] = []
    with (
        LocalCluster(n_workers=2, processes=False, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        client.wait_for_workers(2)
        refresh = client._update_scheduler_info

        async def refreshed_at_the_worst_time(n_workers: int = 0) -> Any:
            asked = await refresh(n_workers=n_workers)
            await refresh(n_workers=0)  # the periodic refresh, right after any ask: no workers
            return asked  # distributed >= 2026.11 hands the ask's own answer back (None before)

        client._update_scheduler_info = refreshed_at_the_worst_time  # type: ignore[method-assign]
        client.scheduler_info(n_workers=-1)
        assert client._scheduler_identity["workers"] == {}  # the cache a reader would see
        with (
            telling(lambda line, label: said.append(line)),
            said_when_workers_lost(client, "here", every=3600),
        ):
            assert said == []
            gone = sorted(w.address for w in cluster.workers.values())[0]
            client.retire_workers([gone], close_workers=True)  # returns once the scheduler let it go
        # the block's end asks once more: the one worker closed, and only it
    assert len(said) == 1 and f"lost the Dask worker {gone} of here (1 left)" in said[0], said


# ------------------------------------------------------------------------------------------ issue 57, point 6


@contextlib.contextmanager
def _running_forever(client: Any) -> Iterator[list[Any]]:
    """Two futures on `client` that never finish by themselves (released when the block ends:
    its cluster's workers are threads of this process, `processes=False`, so no message to the
    scheduler is needed, which a cut link would never carry)."""
    from support.held import RELEASE, held

    RELEASE.clear()
    futures = [client.submit(held, pure=False) for _ in range(2)]
    try:
        yield futures
    finally:
        RELEASE.set()


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (None, "has not answered for 0.5 s (a frozen scheduler, or a network cut"),
        (set(), "has had no worker for 0.5 s (every worker gone; TOSCA_SCHEDULER_TIMEOUT)"),
    ],
)
def test_a_scheduler_silent_or_without_workers_ends_the_wait_in_one_line_within_the_bound(
    answer: set[str] | None, said: str
) -> None:
    """Dask waits for ever on a scheduler that stops answering over an open connection, and on one
    whose every worker is gone; `each_finished` stops at the bound, in one line: what happened,
    that what was finished is kept, how to resume."""
    from distributed import Client, LocalCluster

    from tosca_foundation.scheduler_link import SchedulerStalled, each_finished, said_when_workers_lost

    with (
        LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster,
        Client(cluster) as client,
        _running_forever(client) as futures,
    ):
        start = time.monotonic()
        with (
            pytest.raises(SchedulerStalled) as stalled,
            said_when_workers_lost(
                client,
                "the scheduler at X",
                ", once it answers",
                every=0.05,
                bound=0.5,
                ask=lambda client, seconds: answer,
            ),
        ):
            list(each_finished(client, futures))
        took = time.monotonic() - start
    line = str(stalled.value)
    assert line.startswith(f"the scheduler at X {said}") and "\n" not in line
    assert line.endswith(
        "stopped waiting; what was finished is kept; "
        + ("run" if answer is None else "start workers and run")
        + " the same command again to resume, once it answers"
    )
    assert 0.5 <= took < 0.5 + SLACK + 2  # the bound, and at most one wait of each_finished past it


def test_futures_that_finish_are_each_given_once_and_a_live_scheduler_is_never_stalled() -> None:
    from distributed import Client, LocalCluster

    from tosca_foundation.scheduler_link import each_finished, said_when_workers_lost

    with (
        LocalCluster(n_workers=2, processes=False, dashboard_address=None) as cluster,
        Client(cluster) as client,
        said_when_workers_lost(client, "here", every=0.05, bound=0.2),
    ):
        futures = [client.submit(time.sleep, 0.1 * n, pure=False) for n in range(8)]  # past the bound
        finished = list(each_finished(client, futures))
    assert sorted(map(id, finished)) == sorted(map(id, futures))


class _Future:
    """A Dask future as `result_in_time` sees it: finished, its result never arriving (fetched
    through a frozen scheduler), or in error with a TimeoutError of its own task."""

    def __init__(self, status: str) -> None:
        self.status = status

    def result(self, timeout: float | None = None) -> object:
        if self.status == "error":
            raise TimeoutError("the task's own")
        if timeout is None:
            raise AssertionError("waited without a bound")
        time.sleep(min(timeout, 0.05))
        raise TimeoutError


def test_a_finished_tasks_result_fetched_through_a_silent_scheduler_is_bounded_too() -> None:
    """A sweep's second point had finished when the scheduler froze: fetching its result waited for
    ever (found by the heavy test below). `result_in_time` stops at the bound in the same one line;
    a task whose own error is a TimeoutError gets that error, at once."""
    from tosca_foundation.scheduler_link import SchedulerStalled, result_in_time, said_when_workers_lost

    client = object.__new__(type("Client", (), {}))
    asked: list[int] = []

    def silent(client: object, seconds: float) -> set[str] | None:
        asked.append(1)
        return None if len(asked) > 1 else {"tcp://w:1"}  # answered once, then silence

    with said_when_workers_lost(client, "the scheduler at X", every=0.05, bound=0.3, ask=silent):
        start = time.monotonic()
        with pytest.raises(SchedulerStalled, match=r"has not answered for 0\.3 s"):
            result_in_time(client, _Future("finished"))
        assert time.monotonic() - start < 0.3 + SLACK
        with pytest.raises(TimeoutError, match="the task's own"):
            result_in_time(client, _Future("error"))


class _Cuttable:
    """A loopback TCP relay to `target` that can be cut: it stops carrying bytes both ways but keeps
    every connection open (a network that drops packets, not one that resets)."""

    def __init__(self, target: str) -> None:
        self.host, port = target.removeprefix("tcp://").rsplit(":", 1)
        self.port = int(port)
        self.cut = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"tcp://127.0.0.1:{self.listener.getsockname()[1]}"
        self.held: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                near, _ = self.listener.accept()
            except OSError:
                return
            far = socket.create_connection((self.host, self.port))
            self.held += [near, far]
            for a, b in ((near, far), (far, near)):
                threading.Thread(target=self._carry, args=(a, b), daemon=True).start()

    def _carry(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if self.cut.is_set():
                    continue  # swallowed: the connection stays up, nothing arrives
                sink.sendall(data)

    def close(self) -> None:
        self.listener.close()
        for conn in self.held:
            with contextlib.suppress(OSError):
                conn.close()


def test_a_network_cut_that_keeps_the_connection_open_is_one_line_within_the_bound() -> None:
    """The client reaches the scheduler through a relay that is cut mid-run (bytes dropped, the
    connection left open): no close, no error from Dask, only silence; `dask_client`'s watch ends
    the wait at TOSCA_SCHEDULER_TIMEOUT, in one line, and the command's client is closed within
    seconds (a frozen scheduler would not answer its goodbye)."""
    from distributed import LocalCluster

    from tosca_foundation.scheduler_link import SchedulerStalled, each_finished

    with LocalCluster(n_workers=1, processes=False, protocol="tcp", dashboard_address=None) as cluster:
        relay = _Cuttable(cluster.scheduler_address)
        try:
            start = time.monotonic()
            with (
                pytest.raises(SchedulerStalled) as stalled,
                dask_client(parse_scheduler(relay.address), 2.0) as client,
                _running_forever(client) as futures,
            ):
                relay.cut.set()
                list(each_finished(client, futures))
            took = time.monotonic() - start
        finally:
            relay.close()
    line = str(stalled.value)
    assert line.startswith(f"the scheduler at {relay.address} has not answered for 2 s"), line
    assert "what was finished is kept; run the same command again to resume, once a scheduler answers" in line
    assert took < 2.0 + 2 * SLACK + 2


def _helper_of_a_local_cluster() -> int:
    """The process that hosts this process's local Dask cluster (its scheduler runs there:
    tosca_foundation.cluster)."""
    import psutil

    from tosca_foundation.cluster import BOOT

    (helper,) = [p for p in psutil.Process().children() if BOOT in " ".join(p.cmdline())]
    return int(helper.pid)


def _wake(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


@pytest.mark.heavy
@pytest.mark.parametrize("what", ["frozen scheduler", "frozen local cluster", "every worker gone"])
def test_a_stalled_cluster_mid_sweep_is_one_line_within_the_bound_and_the_sweep_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], what: str
) -> None:
    """Issue 57, point 6: as the first point lands, the scheduler is frozen (SIGSTOP: `dask
    scheduler`, or the helper process that hosts a `--jobs 2` sweep's local cluster), or every
    worker of a running scheduler is killed (their nannies first, so none is started again). Dask
    would wait for ever; the sweep stops within TOSCA_SCHEDULER_TIMEOUT in one line (what
    happened, that what was finished is kept, how to resume), the finished point is in
    results.csv, and the same sweep run again here computes only the others."""
    from tosca_heads.requests.command_requests import SweepRequest
    from tosca_heads.studies.sweeps import sweep

    bound = 20.0  # a 2-core machine shared by several sessions starves a scheduler for seconds
    monkeypatch.setenv("TOSCA_SCHEDULER_TIMEOUT", str(bound))
    store = synthetic_store(tmp_path / "s.zarr", classes=4)

    def request(**how: object) -> SweepRequest:
        return SweepRequest(
            store=store.path, out=tmp_path / "hit", device="cpu", grid=SWEEP_GRID, group=1, **how
        )  # type: ignore[arg-type]

    with contextlib.ExitStack() as stack:
        cluster = (
            None
            if what == "frozen local cluster"
            else stack.enter_context(dask_cluster(tmp_path / "dask", workers=2))
        )
        stopped: list[int] = []
        pids = cluster.worker_pids() if cluster is not None and what == "every worker gone" else {}
        stalled_at: list[float] = []

        def stall(rows: list[dict], finished: int, total: int) -> None:
            if stalled_at:
                return
            if what == "every worker gone":
                assert cluster is not None
                for nanny in cluster.workers:
                    nanny.kill()
                    nanny.wait(30)
                for pid in pids.values():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                stalled_at.append(time.monotonic())  # the bound runs from the last worker gone
                return
            stalled_at.append(time.monotonic())
            pid = cluster.scheduler.pid if cluster is not None else _helper_of_a_local_cluster()
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
            stack.callback(_wake, stopped)  # (a local cluster's frozen helper is killed: gone)

        how = {"jobs": 2} if cluster is None else {"scheduler": cluster.address}
        capfd.readouterr()
        with pytest.raises(UserError) as stalled:
            sweep(request(**how), on_point=stall)
        assert stalled_at, str(stalled.value)  # the sweep got as far as its first point
        took = time.monotonic() - stalled_at[0]
        said = capfd.readouterr()
    line = str(stalled.value)
    why = "has had no worker for 20 s" if what == "every worker gone" else "has not answered for 20 s"
    assert why in line and "\n" not in line, line
    assert (
        "stopped waiting; what was finished is kept" in line
        and "run the same command again to resume" in line
    )
    assert "Traceback" not in said.err and "distributed." not in said.err, said.err
    assert bound - 5 <= took < bound + 60, (
        took
    )  # the bound (its clock may start as the last worker dies), its asks, closing
    kept = (tmp_path / "hit" / "results.csv").read_text()
    resumed = sweep(request(jobs=1))
    assert resumed.already_done >= 1 and resumed.ran == 4 - resumed.already_done
    again = set((tmp_path / "hit" / "results.csv").read_text().splitlines())
    assert (
        set(kept.splitlines()) <= again
    )  # the kept points' rows drawn again as they were (a view in flag order)
