"""What the object-storage tests share: a real S3-protocol server on loopback for each test file
(moto's standalone server, authentication on: `support.object_server`) with a bucket "feats", and
its endpoint and key in the environment of the test that asks for `s3`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    pytest.importorskip("moto")
    pytest.importorskip("s3fs")
    from support.object_server import object_server

    with object_server() as running:
        running.make_bucket("feats")
        yield running


@pytest.fixture
def s3(server: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    for key, value in server.env.items():
        monkeypatch.setenv(key, value)
    return server
