"""A local sweep says nothing of Dask's own: no dashboard, and no warning leaked from the cluster
it starts (issue 49, point 5), even when port 8787 is held by another program."""

from __future__ import annotations

import contextlib
import socket
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.stores import synthetic_store
from typer.testing import CliRunner

from cli import app

DASHBOARD_PORT = 8787  # Dask's default: a second cluster, or any program, may hold it


@contextlib.contextmanager
def port_held(port: int) -> Iterator[None]:
    """`port` on 127.0.0.1 held for the block (already held by another program: as good)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        with contextlib.suppress(OSError):
            sock.bind(("127.0.0.1", port))
            sock.listen()
        yield


@pytest.mark.heavy  # a local cluster of two worker processes
def test_a_local_sweep_with_port_8787_taken_leaks_no_warning(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=4, per_class=12)
    args = ["sweep", "--store", str(store.path), "--r", "2,4", "--epochs", "2", "--batch-size", "8"]
    args += [
        "--init-cls",
        "2",
        "--increment",
        "2",
        "--device",
        "cpu",
        "--jobs",
        "2",
        "--out",
        str(tmp_path / "sw"),
    ]
    with port_held(DASHBOARD_PORT), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    helper = capfd.readouterr()  # what the cluster's helper process and its workers wrote (fd level)
    everything = result.output + helper.out + helper.err
    assert "already in use" not in everything and "UserWarning" not in everything, everything
    assert "8787" not in everything
    assert not [w for w in caught if "distributed" in str(w.filename) or "Port" in str(w.message)]
