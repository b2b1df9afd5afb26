"""Read-only places are the user's to fix: every command that would write into a read-only cache,
store, run, sweep or baselines folder stops with one line naming the place, exit 2, no traceback.

The folders are made read-only with a read-only bind mount (EROFS, as a read-only disk gives),
which needs root with CAP_SYS_ADMIN; elsewhere these tests are skipped."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.images import FAST_CNN, make_image_tree
from support.stores import synthetic_store
from typer.testing import CliRunner

from cli import app
from featcache.store import FeatureStore

runner = CliRunner()
SPLIT = ["--init-cls", "2", "--increment", "2", "--device", "cpu"]


def _can_mount() -> bool:
    return os.geteuid() == 0 and shutil.which("mount") is not None


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    done = subprocess.run(["mount", "--bind", str(path), str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {done.stderr.decode().strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], check=True, capture_output=True)
        yield
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


pytestmark = pytest.mark.skipif(not _can_mount(), reason="read-only mounts need root with CAP_SYS_ADMIN")


def _invoke(*args: object) -> tuple[int, list[str]]:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, [
        line for line in result.output.splitlines() if line.strip() and not line.startswith("warning")
    ]


def _refused(lines: list[str], where: Path) -> bool:
    return (
        len(lines) == 1
        and lines[0].startswith("error: cannot write ")
        and str(where) in lines[0]
        and ("(Read-only file system)" in lines[0])
    )


def test_a_read_only_cache_folder(tmp_path: Path) -> None:
    tree = make_image_tree(tmp_path / "imgs", classes=2, train=2, test=1)
    cache = tmp_path / "cache"
    cache.mkdir()
    with read_only(cache):
        code, lines = _invoke(
            *("extract", "--model", FAST_CNN, "--dataset", "imagefolder", "--data-root", tree),
            *("--cache-dir", cache, "--random-init", "--workers", "0", "--device", "cpu"),
        )
    assert code == 2 and _refused(lines, cache), lines


def test_read_only_run_sweep_and_baselines_folders(tmp_path: Path) -> None:
    store = synthetic_store(tmp_path / "store.zarr", classes=4, per_class=10).path
    run = tmp_path / "run"
    fit = ["fit", "--store", store, "--run", run, "--epochs", "1", "--r", "4", "--s", "4", *SPLIT]
    assert _invoke(*fit, "--task", "0")[0] == 0
    sweep, baselines = tmp_path / "sweep", tmp_path / "baselines"
    sweep.mkdir()
    baselines.mkdir()
    commands = {
        "fit": fit,
        "eval": ["eval", run, "--device", "cpu"],
        "sweep": [
            "sweep",
            "--store",
            store,
            "--r",
            "4",
            "--epochs",
            "1",
            "--jobs",
            "1",
            "--out",
            sweep,
            *SPLIT,
        ],
        "baselines": ["baselines", "--store", store, "--no-tosca", "--out", baselines, *SPLIT],
    }
    places = {"fit": run, "eval": run, "sweep": sweep, "baselines": baselines}
    for name, argv in commands.items():
        with read_only(places[name]):
            code, lines = _invoke(*argv)
        assert code == 2 and _refused(lines, places[name]), (name, lines)


def test_a_read_only_parent_of_a_new_run(tmp_path: Path) -> None:
    store = synthetic_store(tmp_path / "store.zarr", classes=4, per_class=10).path
    parent = tmp_path / "runs"
    parent.mkdir()
    with read_only(parent):
        code, lines = _invoke("fit", "--store", store, "--run", parent / "new", "--epochs", "1", *SPLIT)
    assert code == 2 and _refused(lines, parent), lines


def test_fixing_a_read_only_store(tmp_path: Path) -> None:
    store = synthetic_store(tmp_path / "store.zarr", classes=4, per_class=10).path
    chunk = store / "train" / "features" / "c" / "0" / "0"
    chunk.write_bytes(bytes(len(chunk.read_bytes())))
    with read_only(store):
        code, lines = _invoke("cache", "verify", store, "--fix")
    assert code == 2 and _refused(lines, store), lines
    assert FeatureStore.open(store).done("train").all()  # nothing was changed
