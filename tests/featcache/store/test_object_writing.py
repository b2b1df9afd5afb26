"""Stores written in place on object storage (issue 58, point 5), against a real S3-protocol server
on loopback (moto's standalone server, authentication on): `tosca import` and `tosca extract` with a
store's URL write the store the local command writes (every array and the fingerprint equal), one
writer at a time through the store's lock object (a second is refused naming the first; a dead
holder's lock is taken over), a killed writer leaves nothing marked done that is not whole and the
same command finishes it, and `cache verify --fix` mends a store there in place."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from featcache.store import FeatureStore
from featcache.store.object_store import filesystem, open_zarr_group, store_location
from tosca_foundation.errors import UserError

pytest.importorskip("moto")
pytest.importorskip("s3fs")

from support.arrays import class_names, made_up_columns, write_as
from support.commands import error_line
from support.object_server import ObjectServer, object_server
from typer.testing import CliRunner

from cli import app

RUNNER = CliRunner()
FIT = ["--device", "cpu", "--epochs", "1", "--init-cls", "2", "--increment", "1"]
ARRAYS = ("features", "views", "labels", "ids", "done", "checksums")


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    (found,) = write_as(
        "npz", made_up_columns(3, 6, 4, views=2), class_names(3), tmp_path_factory.mktemp("arrays")
    )
    return found


def _args(source: Path, store: str, *more: str) -> list[str]:
    return [
        "import",
        str(source),
        "--store",
        store,
        "--encoder",
        "e5",
        "--modality",
        "text",
        "--name",
        "words",
        "--chunk-size",
        "4",
        *more,
    ]


def _arrays(group: zarr.Group) -> dict[str, np.ndarray]:
    return {
        f"{split}/{name}": np.asarray(group[f"{split}/{name}"][:])
        for split in ("train", "test")
        for name in ARRAYS
        if name in group[split]
    }


def _remote_arrays(url: str) -> dict[str, np.ndarray]:
    return _arrays(open_zarr_group(store_location(url)))  # type: ignore[arg-type]


def _objects(key: str) -> list[str]:
    fs = filesystem("s3")
    fs.invalidate_cache()
    return sorted(name.removeprefix("feats/") for name in fs.find(f"feats/{key}"))


class Killed(BaseException):
    """A writer stopped where it stands (nothing catches it on the way out)."""


def _ok(args: list[str]) -> str:
    result = RUNNER.invoke(app, args)
    assert result.exit_code == 0, result.output
    return result.output


# ------------------------------------------------------------------------------------------ written there


@pytest.mark.heavy  # whole commands end to end on the server, seconds each
def test_an_import_to_object_storage_writes_the_local_imports_store(
    s3: ObjectServer, source: Path, tmp_path: Path
) -> None:
    url = "s3://feats/import.zarr"
    said = _ok(_args(source, url))
    assert f"-> {url}" in said and "5 written" in said
    _ok(_args(source, str(tmp_path / "local.zarr")))
    remote, local = FeatureStore.open(url), FeatureStore.open(tmp_path / "local.zarr")
    assert remote.fingerprint == local.fingerprint and remote.is_complete()
    expected = _arrays(local.group)
    for name, values in _remote_arrays(url).items():
        np.testing.assert_array_equal(values, expected[name], err_msg=name)
    assert "import.zarr.lock" not in _objects("")  # the lock object goes with its writer
    assert _ok(["cache", "verify", url]).strip() == f"OK {url}"
    again = _ok(_args(source, url))  # the same import again: nothing to do
    assert "nothing to do" in again


@pytest.mark.heavy  # whole commands end to end on the server, seconds each
def test_overwrite_replaces_a_store_there_and_never_other_things(
    s3: ObjectServer, source: Path, tmp_path: Path
) -> None:
    url = "s3://feats/replaced.zarr"
    _ok(_args(source, url))
    other = write_as("npz", made_up_columns(3, 5, 6, views=0), class_names(3), tmp_path / "other")[0]
    line = error_line(_args(other, url))
    assert "holds other features" in line and "--overwrite" in line
    _ok(_args(other, url, "--overwrite"))
    replaced = FeatureStore.open(url)
    assert replaced.dim == 6 and replaced.views == 0 and replaced.is_complete()
    assert not any(name.startswith("replaced.zarr/train/views") for name in _objects("replaced.zarr"))
    fs = filesystem("s3")
    fs.pipe("feats/notes.zarr/readme.txt", b"someone else's")
    for more in (["--overwrite"], []):
        line = error_line(_args(source, "s3://feats/notes.zarr", *more))
        assert "s3://feats/notes.zarr holds 1 object(s) that are no tosca store (such as readme.txt)" in line
    assert _objects("notes.zarr") == ["notes.zarr/readme.txt"]


def test_a_store_key_on_object_storage_ends_in_zarr(s3: ObjectServer, source: Path) -> None:
    assert "a store's key on object storage ends in .zarr" in error_line(_args(source, "s3://feats/plain"))
    assert _objects("plain") == []


def test_a_creation_cut_short_is_no_store_and_the_rerun_finishes_it(
    s3: ObjectServer, source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Object storage renames nothing: a store's top zarr.json is written last, so a writer that
    dies before it leaves objects that no reader takes for a store, and the next writer clears."""
    url = "s3://feats/cut.zarr"
    fs = filesystem("s3")  # the filesystem the command writes with (one per process and settings)
    put_file = fs.put_file

    def dies_at_the_top(local: str, remote: str, **kw: object) -> None:
        if remote.endswith("cut.zarr/zarr.json"):
            raise Killed  # the writer stops here, as a kill would stop it
        put_file(local, remote, **kw)

    monkeypatch.setattr(fs, "put_file", dies_at_the_top)
    with pytest.raises(Killed):
        RUNNER.invoke(app, _args(source, url), catch_exceptions=False)
    monkeypatch.setattr(fs, "put_file", put_file)
    left = _objects("cut.zarr")
    assert left and "cut.zarr/zarr.json" not in left and "cut.zarr/train/zarr.json" in left
    line = error_line(["fit", "--store", url, *FIT])
    assert "not a feature store yet: s3://feats/cut.zarr (its creation or copy was interrupted)" in line
    _ok(_args(source, url))
    assert FeatureStore.open(url).is_complete()


# ------------------------------------------------------------------------------------------ one writer


def _held(url: str, heard: float = 0.0, **record: object) -> None:
    """A lock object as another tosca writer leaves it while it writes, last heard of `heard`
    seconds ago."""
    location = store_location(url)
    base = {"pid": 4242, "host": "elsewhere", "started": "2026-12-07T10:00:00Z", "token": "x" * 32}
    filesystem("s3").pipe_file(
        f"{location.key}.lock", json.dumps({**base, "beat": time.time() - heard, **record}).encode()
    )


def test_a_second_writer_is_refused_naming_the_first(s3: ObjectServer, source: Path, tmp_path: Path) -> None:
    url = "s3://feats/busy.zarr"
    _held(url)
    line = error_line(_args(source, url))
    assert (
        "store s3://feats/busy.zarr is being written by another tosca process (pid 4242 on elsewhere" in line
    )
    assert "last heard of" in line and _objects("busy.zarr") == []
    local = tmp_path / "local.zarr"
    _ok(_args(source, str(local)))
    line = error_line(["cache", "push", str(local), url])
    assert "is being written by another tosca process" in line  # a push takes the same lock


@pytest.mark.parametrize(
    ("record", "taken"),
    [
        ({"host": socket.gethostname(), "pid": 2**22 + 7}, True),  # a dead process of this host
        pytest.param({"heard": 3600}, True, marks=pytest.mark.heavy),  # silent for an hour
        ({"heard": 5}, False),  # heard of a moment ago
    ],
    ids=["dead here", "silent elsewhere", "alive elsewhere"],
)
def test_a_dead_writers_lock_is_taken_over(
    s3: ObjectServer, source: Path, record: dict[str, Any], taken: bool, request: pytest.FixtureRequest
) -> None:
    url = f"s3://feats/stale-{request.node.callspec.id.replace(' ', '-')}.zarr"
    _held(url, **record)
    if taken:
        _ok(_args(source, url))
        assert FeatureStore.open(
            url
        ).is_complete() and f"{url.removeprefix('s3://feats/')}.lock" not in _objects("")
    else:
        assert "is being written by another tosca process" in error_line(_args(source, url))


@pytest.mark.parametrize(
    "planted",
    [b"mine", b"[" * 3000 + b"]" * 3000, json.dumps({"pid": 1, "host": "h"}).encode(), b"\xff\xfe"],
    ids=["text", "deeply nested", "no token", "not utf-8"],
)
def test_a_lock_object_tosca_did_not_write_is_never_taken(
    s3: ObjectServer, source: Path, planted: bytes, request: pytest.FixtureRequest
) -> None:
    key = f"planted-{request.node.callspec.id.replace(' ', '-')}.zarr"
    filesystem("s3").pipe_file(f"feats/{key}.lock", planted)
    line = error_line(_args(source, f"s3://feats/{key}"))
    assert f"s3://feats/{key}.lock is in the way of tosca's lock" in line
    assert filesystem("s3").cat_file(f"feats/{key}.lock") == planted


def test_a_lock_record_is_said_on_one_line_whatever_it_holds(s3: ObjectServer, source: Path) -> None:
    _held("s3://feats/odd.zarr", host="evil\nerror: planted", pid="1\x1b[31m")
    line = error_line(_args(source, "s3://feats/odd.zarr"))
    assert "(pid 1\\x1b[31m on evil\\x0aerror: planted since" in line


def test_an_object_store_without_conditional_writes_is_refused(
    s3: ObjectServer, source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fs = filesystem("s3")
    pipe_file = fs.pipe_file

    def unconditional(path: str, value: bytes, mode: str = "overwrite", **kw: object) -> None:
        if mode == "create":
            raise NotImplementedError("no conditional writes here")
        pipe_file(path, value, **kw)

    monkeypatch.setattr(fs, "pipe_file", unconditional)
    line = error_line(_args(source, "s3://feats/plain-server.zarr"))
    assert "offers no conditional write" in line and "tosca cache push STORE URL" in line


def test_a_writer_whose_lock_was_taken_over_says_so(s3: ObjectServer) -> None:
    from featcache.store.object_lock import object_lock

    url = "s3://feats/lost.zarr"
    with pytest.raises(UserError) as said, object_lock(store_location(url)) as lock:  # type: ignore[arg-type]
        assert lock.beat_once()  # its own: beats on
        _held(url, pid=99, host="other")  # a second writer found it unheard of and took it
        assert not lock.beat_once()
    line = str(said.value)
    assert "this writer's lock was taken over by pid 99 on other" in line and "tosca cache verify" in line
    assert json.loads(filesystem("s3").cat_file("feats/lost.zarr.lock"))["pid"] == 99  # never deleted


# ------------------------------------------------------------------------------------------ mended there


@pytest.mark.heavy  # whole commands end to end on the server, seconds each
def test_cache_verify_fix_mends_a_store_there_in_place(s3: ObjectServer, source: Path) -> None:
    url = "s3://feats/mend.zarr"
    _ok(_args(source, url))
    fs = filesystem("s3")
    key = "feats/mend.zarr/train/features/c/1/0"
    data = bytearray(fs.cat_file(key))
    data[0] ^= 0xFF
    fs.pipe_file(key, bytes(data))
    line = error_line(["fit", "--store", url, *FIT])
    assert f"run `tosca cache verify {url} --fix`" in line
    fixed = RUNNER.invoke(app, ["cache", "verify", url, "--fix"])
    assert fixed.exit_code == 1 and "fixed train chunk 1: values do not match the checksum" in fixed.output
    assert not FeatureStore.open(url).is_complete()
    said = _ok(_args(source, url))
    assert "1 written" in said
    assert _ok(["cache", "verify", url]).strip() == f"OK {url}"


# ------------------------------------------------------------------------------------------ extraction


@pytest.mark.heavy  # a backbone on images, on a scheduler and two worker processes
def test_an_extraction_on_two_workers_writes_the_local_extractions_store_there(
    s3: ObjectServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers that share no disk with the client write the chunks to object storage; the store
    there holds the values, checksums and views of the same extraction run here on one disk."""
    from support.dask_processes import dask_cluster
    from support.images import TINY_VIT, make_image_tree

    monkeypatch.chdir(tmp_path)  # where a local ./cache would appear
    tree = make_image_tree(tmp_path / "images", classes=2, train=3, test=1)
    args = ["extract", "--model", TINY_VIT, "--dataset", "imagefolder", "--data-root", str(tree)]
    args += ["--random-init", "--views", "1", "--seed", "3", "--chunk-size", "2", "--batch-size", "2"]
    args += ["--workers", "0", "--device", "cpu"]
    url = "s3://feats/extracted.zarr"
    with dask_cluster(tmp_path / "logs", workers=2, env=s3.env) as cluster:
        said = _ok([*args, "--store", url, "--scheduler", cluster.address])
    assert f"-> {url}" in said
    _ok([*args, "--store", str(tmp_path / "here.zarr")])
    there, here = FeatureStore.open(url), FeatureStore.open(tmp_path / "here.zarr")
    assert there.fingerprint == here.fingerprint and there.is_complete()
    expected = _arrays(here.group)
    for name, values in _remote_arrays(url).items():
        np.testing.assert_array_equal(values, expected[name], err_msg=name)
    assert _ok(["cache", "verify", url]).strip() == f"OK {url}"
    by_cache_dir = _ok([*args, "--cache-dir", "s3://feats/cache"])  # CACHE_DIR/<dataset>/<model>.zarr there
    assert f"-> s3://feats/cache/imagefolder/{TINY_VIT}.zarr" in by_cache_dir
    assert not Path("cache").exists()  # no store, no folder made here
    listed = _ok(["cache", "ls", "--cache-dir", "s3://feats/cache"])
    assert "imagefolder" in listed and "yes" in listed


@pytest.mark.heavy  # a child process killed with SIGKILL, then the same command again
def test_a_killed_writer_there_is_never_done_and_the_same_command_finishes_it(
    s3: ObjectServer, source: Path, tmp_path: Path
) -> None:
    """Killed between a chunk's values and its done flag (zarr's writes there go through
    FsspecStore.set): the store is no whole one, its lock (of a dead process of this host) is
    taken over by the rerun, which writes the arrays of an uninterrupted import."""
    from support.crash_harness import PauseAt, run, start

    url = "s3://feats/killed.zarr"
    child = start(
        _args(source, url),
        tmp_path / "killed",
        PauseAt(function="zarr.storage._fsspec:FsspecStore.set", occurrence=7),
        env=s3.env,
    )
    child.wait_paused()
    child.kill()
    assert child.process.exitcode == -9
    assert "killed.zarr.lock" in _objects("")  # left by the dead writer
    line = error_line(["fit", "--store", url, *FIT])
    assert "is not fully imported" in line
    code, _, stderr = run(_args(source, url), tmp_path / "rerun", env=s3.env)
    assert code == 0, stderr
    _ok(_args(source, str(tmp_path / "clean.zarr")))
    expected = _arrays(FeatureStore.open(tmp_path / "clean.zarr").group)
    for name, values in _remote_arrays(url).items():
        np.testing.assert_array_equal(values, expected[name], err_msg=name)
    assert "killed.zarr.lock" not in _objects("")


def test_an_object_named_as_the_store_is_never_written_under(s3: ObjectServer, source: Path) -> None:
    filesystem("s3").pipe_file("feats/taken.zarr", b"someone's file")
    line = error_line(_args(source, "s3://feats/taken.zarr"))
    assert "s3://feats/taken.zarr is an object of its own, not a store" in line
    assert _objects("taken.zarr") == ["taken.zarr"]


@pytest.mark.heavy  # the client's retries against a closed port take seconds
def test_a_server_gone_mid_write_is_one_line(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server goes away after the store was made and one chunk written: one line saying so
    (never a store called damaged, never a traceback)."""
    from featcache.store import format as store_format

    with object_server() as server:  # a server of its own: this test stops it
        for name, value in server.env.items():
            monkeypatch.setenv(name, value)
        server.make_bucket("feats")
        write_chunk = store_format.FeatureStore.write_chunk
        calls = []

        def server_goes(self: FeatureStore, *args: object, **kw: object) -> None:
            calls.append(args)
            if len(calls) == 2:
                server.stop()
            write_chunk(self, *args, **kw)

        monkeypatch.setattr(store_format.FeatureStore, "write_chunk", server_goes)
        line = error_line(_args(source, "s3://feats/gone.zarr"))
    assert "s3://feats/gone.zarr: object storage could not be reached while" in line, line
    assert "check the endpoint" in line and len(calls) == 2


@pytest.mark.heavy  # a whole import there first: seconds
def test_cache_verify_names_the_writer_holding_the_lock_there(s3: ObjectServer, source: Path) -> None:
    url = "s3://feats/being-written.zarr"
    _ok(_args(source, url))
    FeatureStore.open(url, mode="r+").mark_undone("train", [1])  # as a writer leaves it mid-way
    _held(url)
    result = RUNNER.invoke(app, ["cache", "verify", url])
    assert result.exit_code == 1 and "1/3 chunks not done" in result.output, result.output
    assert (
        "an extraction is writing it now (pid 4242 on elsewhere since 2026-12-07T10:00:00Z)" in result.output
    )


def test_a_store_there_with_damaged_metadata_is_said_so_and_kept(s3: ObjectServer, source: Path) -> None:
    """As on a disk: a rerun names the damage (never "no tosca store", never a new store over it)."""
    url = "s3://feats/damaged-top.zarr"
    _ok(_args(source, url))
    before = _objects("damaged-top.zarr")
    filesystem("s3").pipe_file("feats/damaged-top.zarr/zarr.json", b"garbage")
    line = error_line(_args(source, url))
    assert f"{url} has unreadable metadata (JSONDecodeError" in line and "re-extract it" in line
    assert _objects("damaged-top.zarr") == before
