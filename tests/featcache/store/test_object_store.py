"""Stores on object storage (issue 58, point 5), against a real S3-protocol server on loopback
(moto's standalone server, authentication on: `support.object_server`): a store pushed there
reads as the local one does, `fit` and a sweep on a scheduler with two worker processes give the
local store's figures with the local copy gone, and wrong credentials, a missing bucket and a
server that goes away mid-read are one line each. Where a store is named: `store_location`."""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from featcache.store import FeatureStore, check_readable, read_split
from featcache.store.object_store import ObjectStoreError, ObjectStorePath, store_location
from tosca_foundation.errors import UserError

pytest.importorskip("moto")
pytest.importorskip("s3fs")

from support.commands import error_line
from support.object_server import ObjectServer, object_server
from support.stores import synthetic_store
from typer.testing import CliRunner

from cli import app

RUNNER = CliRunner()
FIT = ["--epochs", "1", "--init-cls", "2", "--increment", "2", "--device", "cpu"]


def _pushed(tmp_path: Path, key: str, **made: float) -> tuple[FeatureStore, str]:
    from featcache.store.push import push_store

    local = synthetic_store(tmp_path / "local.zarr", **made)
    url = f"s3://feats/{key}.zarr"
    pushed = push_store(local.path, url)
    assert pushed.url == url and pushed.objects == sum(1 for p in local.path.rglob("*") if p.is_file())
    return local, url


@contextlib.contextmanager
def _opened_on_a_server_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str
) -> Iterator[tuple[ObjectServer, FeatureStore]]:
    """A store pushed to a server no other test shares, and opened there (its listing and metadata
    read): what a test then does to the server (stop it, revoke the key) touches no other test."""
    with object_server() as server:
        for name, value in server.env.items():
            monkeypatch.setenv(name, value)
        server.make_bucket("feats")
        _, url = _pushed(tmp_path, key)
        yield server, FeatureStore.open(url)


# ------------------------------------------------------------------------------------------ where a store is


@pytest.mark.parametrize(
    ("given", "found"),
    [
        ("s3://bucket/team/c100.zarr", ObjectStorePath("s3", "bucket/team/c100.zarr")),
        (Path("s3://bucket/c100.zarr"), ObjectStorePath("s3", "bucket/c100.zarr")),  # pathlib folds '//'
        ("S3://bucket/c100.zarr/", ObjectStorePath("s3", "bucket/c100.zarr")),
        ("file:///tmp/c100.zarr", Path("/tmp/c100.zarr")),
        ("cache/c100.zarr", Path("cache/c100.zarr")),
        ("C:/stores/c100.zarr", Path("C:/stores/c100.zarr")),  # a drive letter is no scheme
    ],
)
def test_a_store_is_named_by_a_url_or_a_path(given: str | Path, found: object) -> None:
    assert store_location(given) == found


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("s3://bucket", "names a bucket but no store in it"),
        ("s3://bucket/a/../b.zarr", "no empty, '.' or '..' part"),
        ("https://example.org/c100.zarr", "https:// is no object storage tosca reads a store from"),
        ("nosuchproto://bucket/c100.zarr", "nosuchproto:// is no object storage tosca reads a store from"),
        ("ftp://host/c100.zarr", "ftp:// is no object storage tosca reads a store from"),
        ("memory://bucket/c100.zarr", "memory:// is no object storage tosca reads a store from"),
        ("zip://bucket/c100.zarr", "zip:// is no object storage tosca reads a store from"),
        ("s3://bucket/c100.zarr\n", "a location holds no control character"),
    ],
)
def test_a_url_that_names_no_store_is_one_line(given: str, said: str) -> None:
    with pytest.raises(UserError) as refused:
        store_location(given)
    assert said in str(refused.value) and "\n" not in str(refused.value)


def test_a_protocol_whose_package_is_missing_names_that_package() -> None:
    if importlib.util.find_spec("gcsfs") is not None:
        pytest.skip("gcsfs is installed here")
    with pytest.raises(UserError, match=r"needs gcsfs, which is not installed: pip install gcsfs$"):
        store_location("gs://bucket/c100.zarr")


# ------------------------------------------------------------------------------------------ reading


def test_a_pushed_store_reads_as_the_local_one(s3: ObjectServer, tmp_path: Path) -> None:
    local, url = _pushed(tmp_path, "read", views=2)
    remote = FeatureStore.open(url)
    assert str(remote.path) == url and str(remote.path.resolve()) == url
    assert remote.shape == local.shape and remote.fingerprint == local.fingerprint
    assert remote.size_bytes() == local.size_bytes()
    check_readable(remote)
    for split in ("train", "test"):
        features, views = read_split(remote, split)
        expected, expected_views = read_split(local, split)
        np.testing.assert_array_equal(features, expected)
        np.testing.assert_array_equal(remote.labels(split), local.labels(split))
        if split == "train":
            np.testing.assert_array_equal(views, expected_views)


@pytest.mark.heavy  # whole commands end to end, seconds each: `make test` stays within its time
def test_fit_from_object_storage_gives_the_local_stores_figures(s3: ObjectServer, tmp_path: Path) -> None:
    local, url = _pushed(tmp_path, "fit", views=2)
    figures = {}
    for name, store in (("local", str(local.path)), ("remote", url)):
        run = tmp_path / name
        result = RUNNER.invoke(app, ["fit", "--store", store, "--run", str(run), *FIT])
        assert result.exit_code == 0, result.output
        figures[name] = json.loads((run / "metrics.json").read_text())["routers"]
    assert figures["remote"] == figures["local"]
    asked = json.loads((tmp_path / "remote" / "asked.json").read_text())
    assert asked["store"] == url  # the run names where its store is
    again = RUNNER.invoke(
        app, ["eval", str(tmp_path / "remote"), "--json"]
    )  # the run's store, reopened there
    assert again.exit_code == 0, again.output
    assert json.loads(again.output)["routers"] == figures["local"]


@pytest.mark.heavy
def test_a_sweep_on_two_workers_reads_the_store_from_object_storage_alone(
    s3: ObjectServer, tmp_path: Path
) -> None:
    """A scheduler and two worker processes that share no store on disk with the client: the
    local copy is deleted before the sweep, and its grid is the local store's."""
    from support.dask_processes import dask_cluster

    local, url = _pushed(tmp_path, "sweep", classes=4, spread=2.5)
    grid = ["--r", "2,4", "--epochs", "1", "--init-cls", "2", "--increment", "2", "--device", "cpu"]
    before = RUNNER.invoke(
        app, ["sweep", "--store", str(local.path), *grid, "--jobs", "1", "--out", str(tmp_path / "here")]
    )
    assert before.exit_code == 0, before.output
    shutil.rmtree(local.path)
    with dask_cluster(tmp_path / "logs", workers=2, env=s3.env) as cluster:
        there = RUNNER.invoke(
            app,
            [
                "sweep",
                "--store",
                url,
                *grid,
                "--scheduler",
                cluster.address,
                "--out",
                str(tmp_path / "there"),
            ],
        )
    assert there.exit_code == 0, there.output

    def figures(folder: Path) -> list[list[str]]:
        rows = list(csv.DictReader((folder / "results.csv").open()))
        wanted = ("key", "split", "router", "A_bar", "A_last", "forgetting", "routing_accuracy", "A_t")
        return sorted([row[k] for k in wanted] for row in rows)

    here, there_ = figures(tmp_path / "here"), figures(tmp_path / "there")
    assert here == there_ and len(here) >= 4
    assert len({row[4] for row in here}) > 1 or float(here[0][4]) < 1  # figures a mix-up would change
    assert json.loads((tmp_path / "there" / "sweep.json").read_text())["store"] == url


SUITE = """
name = "cloud"
seeds = [0]
[tosca]
routers = ["entropy", "lda"]
flags = {{ epochs = 1, batch_size = 8 }}
[baselines]
methods = ["simplecil"]
[[stores]]
name = "A"
path = "{path}"
init_cls = 2
increment = 2
"""


@pytest.mark.heavy
def test_a_suite_on_two_workers_reads_its_store_from_object_storage(s3: ObjectServer, tmp_path: Path) -> None:
    """A suite file naming the store by its URL, its cells on a scheduler with two worker
    processes and no store on disk: the tables of the same suite on the local store."""
    import pandas as pd
    from support.dask_processes import dask_cluster

    from tosca_heads.studies.suite import load_suite, run_suite

    local, url = _pushed(tmp_path, "suite", classes=6, spread=2.5)
    (tmp_path / "here.toml").write_text(SUITE.format(path=local.path))
    (tmp_path / "there.toml").write_text(SUITE.format(path=url))
    here = run_suite(load_suite(tmp_path / "here.toml"), tmp_path / "here", jobs=1, device="cpu")
    shutil.rmtree(local.path)
    spec = load_suite(tmp_path / "there.toml")
    assert str(spec.stores[0].path) == url
    with dask_cluster(tmp_path / "logs", workers=2, env=s3.env) as cluster:
        there = run_suite(spec, tmp_path / "there", scheduler=cluster.address, device="cpu")
    assert {c.status for c in there.cells} == {"ran"}
    columns = ["method", "store", "metric", "mean", "std", "n"]
    pd.testing.assert_frame_equal(there.tables.table[columns], here.tables.table[columns])


@pytest.mark.heavy  # whole commands end to end, seconds each: `make test` stays within its time
def test_the_cache_commands_read_a_store_there(s3: ObjectServer, tmp_path: Path) -> None:
    """`cache ls` lists the stores under a bucket's prefix, `cache info` and `cache verify` read
    one, and `fit --model --dataset --cache-dir` finds it there, as under a local cache root."""
    local, url = _pushed(tmp_path, "team/cached/synthetic-none")
    listed = RUNNER.invoke(app, ["cache", "ls", "--cache-dir", "s3://feats/team", "--json"])
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.output)
    assert [row["store"] for row in rows] == [url] and rows[0]["complete"] is True
    info = RUNNER.invoke(app, ["cache", "info", url, "--json"])
    assert info.exit_code == 0 and json.loads(info.output)["fingerprint"] == local.fingerprint, info.output
    verified = RUNNER.invoke(app, ["cache", "verify", url])
    assert verified.exit_code == 0 and f"OK {url}" in verified.output, verified.output
    args = ["fit", "--model", "none", "--dataset", "synthetic", "--cache-dir", "s3://feats/team"]
    found = RUNNER.invoke(app, [*args, "--run", str(tmp_path / "found"), *FIT])
    assert found.exit_code == 0, found.output
    assert json.loads((tmp_path / "found" / "asked.json").read_text())["store"] == url


# ------------------------------------------------------------------------------------------ one line each


def test_wrong_credentials_are_one_line(
    s3: ObjectServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, url = _pushed(tmp_path, "keys")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    line = error_line(["fit", "--store", url, "--run", str(tmp_path / "r"), *FIT])
    assert "access refused" in line and "check the credentials" in line
    assert not (tmp_path / "r").exists()


def test_a_missing_bucket_is_one_line(s3: ObjectServer, tmp_path: Path) -> None:
    line = error_line(["fit", "--store", "s3://no-such-bucket/c100.zarr", "--run", str(tmp_path / "r"), *FIT])
    assert "its bucket 'no-such-bucket' does not exist" in line


def test_a_key_with_no_store_is_one_line(s3: ObjectServer, tmp_path: Path) -> None:
    line = error_line(["fit", "--store", "s3://feats/nothing-here.zarr", "--run", str(tmp_path / "r"), *FIT])
    assert "not a feature store: s3://feats/nothing-here.zarr" in line


@pytest.mark.heavy
def test_a_server_gone_mid_read_is_one_line_never_a_damaged_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store opened (its listing and metadata read), then the server goes: the reads after it
    say object storage could not be reached, not that a chunk is damaged."""
    with _opened_on_a_server_of_its_own(tmp_path, monkeypatch, "gone") as (server, remote):
        server.stop()
        with pytest.raises(ObjectStoreError) as refused:
            read_split(remote, "train")
    said = str(refused.value)
    assert "could not be reached" in said and "\n" not in said and "damaged" not in said


def _flip(fs: object, key: str) -> None:
    name = f"{key}/train/features/c/1/0"
    fs.pipe(name, bytes(len(fs.cat(name))))  # type: ignore[attr-defined]  # zeros: decodes, wrong values


PLANTED = [  # what a hostile or unlucky bucket holds, and the one line it must give
    ("deep", lambda fs, k: fs.pipe(f"{k}/a/b/c/d/e/f/g/h/i/j/x", b"1"), "keys nested deeper than a store's"),
    (
        "not json",
        lambda fs, k: fs.pipe(f"{k}/train/labels/zarr.json", b"{no"),
        "unreadable array metadata (JSONDecodeError",
    ),
    (
        "nested",
        lambda fs, k: fs.pipe(f"{k}/train/zarr.json", b"[" * 200 + b"]" * 200),
        "nests more than 64 levels",
    ),
    (
        "chunk too large",
        lambda fs, k: fs.pipe(f"{k}/train/features/c/1/0", b"x" * 200_000),
        "more than a chunk of",
    ),
    (
        "chunk gone",
        lambda fs, k: fs.rm(f"{k}/train/features/c/1/0"),
        "its file train/features/c/1/0 is missing",
    ),
    ("chunk flipped", _flip, "do not match the checksum recorded"),
    ("top metadata not json", lambda fs, k: fs.pipe(f"{k}/zarr.json", b"hello"), "unreadable metadata"),
]


@pytest.mark.parametrize(("name", "plant", "said"), PLANTED, ids=[p[0] for p in PLANTED])
def test_a_store_tampered_with_on_object_storage_is_one_line(
    s3: ObjectServer, tmp_path: Path, name: str, plant: object, said: str
) -> None:
    """The checks of a local store's walk and reads, from the listing: one line each, and a
    damaged store there is mended there (`cache verify URL --fix`, then the same command)."""
    from featcache.store.object_store import filesystem

    _, url = _pushed(tmp_path, f"planted-{name.replace(' ', '-')}")
    plant(filesystem("s3"), url.removeprefix("s3://"))  # type: ignore[operator]
    line = error_line(["fit", "--store", url, "--run", str(tmp_path / "r"), *FIT])
    assert said in line, line
    if "chunk" in name:  # mended in place there, as on a disk
        assert f"tosca cache verify {url} --fix`" in line


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        (
            {"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None},
            "access refused while listing the store (NoCredentialsError",
        ),
        (
            {"AWS_ENDPOINT_URL": "not-a-url"},
            "could not be reached while listing the store (ValueError: Invalid endpoint",
        ),
    ],
    ids=["no credentials", "an endpoint that is no url"],
)
def test_settings_that_cannot_reach_the_store_are_one_line(
    s3: ObjectServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    setting: dict[str, str | None],
    said: str,
) -> None:
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    for key, value in setting.items():
        if value is None:
            monkeypatch.delenv(key)
        else:
            monkeypatch.setenv(key, value)
    assert said in error_line(["fit", "--store", "s3://feats/any.zarr", "--run", str(tmp_path / "r"), *FIT])


def test_a_bucket_s3_cannot_name_is_one_line(s3: ObjectServer, tmp_path: Path) -> None:
    line = error_line(["fit", "--store", "s3://Bad_Bucket!/x.zarr", "--run", str(tmp_path / "r"), *FIT])
    assert "s3://Bad_Bucket!/x.zarr is no valid s3 location" in line


def test_an_object_gone_since_the_store_was_opened_is_never_read_as_fill_values(
    s3: ObjectServer, tmp_path: Path
) -> None:
    """zarr reads a missing chunk as its fill value: one the listing held at open and gone since
    (deleted, or a push replacing the store under a reader) is said to be gone, not damage."""
    from featcache.store.object_store import filesystem

    _, url = _pushed(tmp_path, "vanishing")
    remote = FeatureStore.open(url)
    filesystem("s3").rm(url.removeprefix("s3://") + "/train/features/c/1/0")
    with pytest.raises(ObjectStoreError) as refused:
        read_split(remote, "train")
    said = str(refused.value)
    assert "train/features/c/1/0 was there when the store was opened and is gone now" in said
    assert "damaged" not in said and "\n" not in said


def test_a_suite_naming_a_url_with_no_store_is_one_line(s3: ObjectServer, tmp_path: Path) -> None:
    """Never an extraction into a bucket (model and dataset given): one line naming `cache push`."""
    spec = tmp_path / "SUITE.toml"
    path = "s3://feats/never-pushed.zarr"
    spec.write_text(SUITE.format(path=path) + 'model = "effnet_lite0"\ndataset = "eurosat"\n')
    line = error_line(["suite", str(spec), "--out", str(tmp_path / "out"), "--device", "cpu"])
    assert f"no tosca store at {path}" in line and "tosca cache push" in line


def test_stores_are_found_under_a_prefix_with_glob_characters(s3: ObjectServer, tmp_path: Path) -> None:
    from featcache.store.find import find_stores

    _, url = _pushed(tmp_path, "br[ab]/y")
    assert [str(found) for found in find_stores("s3://feats/br[ab]")] == [url]
    assert url in [str(found) for found in find_stores("s3://feats")]


def test_an_unreachable_store_is_never_passed_over_for_another(
    s3: ObjectServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--model/--dataset under a --cache-dir on object storage: a refusal of the object store is
    said, not taken for an unreadable store among others ("no store matches")."""
    _pushed(tmp_path, "reach/a/synthetic-none")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    args = ["fit", "--model", "none", "--dataset", "synthetic", "--cache-dir", "s3://feats/reach"]
    line = error_line([*args, "--run", str(tmp_path / "r"), *FIT])
    assert "access refused" in line and "no store" not in line


@pytest.mark.heavy
def test_credentials_revoked_mid_read_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store opened, then the key's rights taken away: its listings (a split's arrays) and its
    reads say access was refused, never a raw PermissionError or a damaged store."""
    from zarr.core.sync import collect_aiterator, sync

    with _opened_on_a_server_of_its_own(tmp_path, monkeypatch, "revoked") as (server, remote):
        server.revoke()
        with pytest.raises(ObjectStoreError, match="access refused while listing the store"):
            sync(collect_aiterator(remote.group.store.list_dir("")))  # what zarr lists a group by
        with pytest.raises(ObjectStoreError, match=r"access refused while reading test/zarr\.json"):
            remote.has("test", "views")
        with pytest.raises(ObjectStoreError, match="access refused while reading train/"):
            read_split(remote, "train")


# ------------------------------------------------------------------------------------------ pushing


def test_a_push_killed_before_its_last_object_leaves_no_store(s3: ObjectServer, tmp_path: Path) -> None:
    from featcache.store.push import push_store

    local = synthetic_store(tmp_path / "local.zarr")
    total = sum(1 for p in local.path.rglob("*") if p.is_file())

    def killed(done: int, of: int) -> None:
        if done == of - 1:  # every object but the store's own zarr.json
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        push_store(local.path, "s3://feats/killed.zarr", on_object=killed)
    with pytest.raises(UserError, match="not a feature store"):
        FeatureStore.open("s3://feats/killed.zarr")
    with pytest.raises(UserError, match=f"already holds {total - 1} object"):
        push_store(local.path, "s3://feats/killed.zarr")
    push_store(local.path, "s3://feats/killed.zarr", overwrite=True)  # finished by the same push
    assert FeatureStore.open("s3://feats/killed.zarr").fingerprint == local.fingerprint


def test_push_never_deletes_what_is_not_a_store(s3: ObjectServer, tmp_path: Path) -> None:
    """--overwrite replaces a store or a killed push's leftovers, never a prefix of other stores;
    and a store's key ends in .zarr, as `cache ls` finds stores."""
    from featcache.store.push import push_store

    local, first = _pushed(tmp_path, "team/c100/vit")
    push_store(local.path, "s3://feats/team/c100/dino.zarr")
    with pytest.raises(UserError, match=r"\.zarr \(`cache ls` and --cache-dir find stores by it\)"):
        push_store(local.path, "s3://feats/team/c100", overwrite=True)
    (tmp_path / "loose.txt").write_text("not a store")
    from featcache.store.object_store import filesystem

    filesystem("s3").put_file(str(tmp_path / "loose.txt"), "feats/other.zarr/notes.txt")
    with pytest.raises(UserError, match=r"no tosca store \(such as notes\.txt\)"):
        push_store(local.path, "s3://feats/other.zarr", overwrite=True)
    assert FeatureStore.open(first).fingerprint == local.fingerprint  # nothing was deleted


def test_push_leaves_a_writers_temporaries_behind_and_waits_for_no_writer(
    s3: ObjectServer, tmp_path: Path
) -> None:
    from featcache.store.object_store import listing, store_location
    from featcache.store.push import push_store
    from tosca_foundation.locks import folder_lock

    local = synthetic_store(tmp_path / "local.zarr")
    (local.path / "train" / "features" / "c" / "0" / "0.partial").write_bytes(b"half")
    push_store(local.path, "s3://feats/temporaries.zarr")
    assert not any(rel.endswith(".partial") for rel in listing(store_location("s3://feats/temporaries.zarr")))
    with (
        folder_lock(local.path),  # an extraction writing it
        pytest.raises(UserError, match="wait for it to finish, then push"),
    ):
        push_store(local.path, "s3://feats/locked.zarr")


def test_push_refuses_what_it_must_not_copy(s3: ObjectServer, tmp_path: Path) -> None:
    local, url = _pushed(tmp_path, "twice")
    line = error_line(["cache", "push", str(local.path), url])
    assert "already holds a store: pass --overwrite" in line
    assert "a local path" in error_line(["cache", "push", str(local.path), str(tmp_path / "elsewhere.zarr")])
    local.mark_undone("train", [0])
    assert "not fully extracted" in error_line(["cache", "push", str(local.path), url, "--overwrite"])
    assert FeatureStore.open(url).is_complete()  # the store there was left as it was
    os.chmod(tmp_path, 0o755)
