"""A running scheduler is reached within a bound, or refused in one line before anything is made;
losing it mid-run is one line saying what was kept and how to resume (issue 47, points 3 and 4)."""

from __future__ import annotations

import contextlib
import http.server
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

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
    """A client whose scheduler answers each call with the next set of workers, the last one for
    good; `drained` is set once the last was asked for (the watch has said what came before it)."""

    def __init__(self, *states: set[str]) -> None:
        self.states = [dict.fromkeys(s) for s in states]
        self.drained = threading.Event()

    def scheduler_info(self, n_workers: int = -1) -> dict[str, dict[str, None]]:
        if len(self.states) == 1:
            self.drained.set()
            return {"workers": self.states[0]}
        return {"workers": self.states.pop(0)}


def test_a_worker_lost_mid_run_is_one_line_and_one_that_joins_is_not_said() -> None:
    """Issue 49, point 4: Dask reruns a lost worker's units silently; the watch says each loss once
    (its address, how many are left), never a worker that joins (a nanny's restart)."""
    from tosca_foundation.scheduler_link import said_when_workers_lost
    from tosca_foundation.text import telling

    said: list[tuple[str, str]] = []
    client = _Workers({"tcp://a:1", "tcp://b:2"}, {"tcp://a:1", "tcp://b:2"}, {"tcp://b:2", "tcp://c:3"})
    place = "the Dask scheduler at tcp://s:8786"
    with (
        telling(lambda line, label: said.append((label, line))),
        said_when_workers_lost(client, place, every=0.001),
    ):
        assert client.drained.wait(10)
    assert said == [
        (
            "note",
            "lost the Dask worker tcp://a:1 of the Dask scheduler at tcp://s:8786 (2 left): Dask runs "
            "the units it held again on the others; what was finished is kept",
        )
    ]


def test_a_scheduler_that_cannot_be_asked_ends_the_watch_without_a_word() -> None:
    from tosca_foundation.scheduler_link import said_when_workers_lost
    from tosca_foundation.text import telling

    class Gone:
        asked = threading.Event()
        calls = 0

        def scheduler_info(self, n_workers: int = -1) -> dict[str, dict[str, None]]:
            self.calls += 1
            if self.calls == 2:  # the watch's own ask, after the block's first
                self.asked.set()
            raise OSError("connection closed")

    said: list[str] = []
    gone = Gone()
    with telling(lambda line, label: said.append(line)), said_when_workers_lost(gone, "x", every=0.001):
        assert gone.asked.wait(10)
    assert said == []
