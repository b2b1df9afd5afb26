"""Stage 2 checks what it reads: a store whose values or attrs do not hold up stops fit, eval, sweep,
baselines and predict with one line naming the fault and `tosca cache verify --fix`, before a number
is printed or a file of the run is rewritten (a store without checksums is one written before the
first release: refused when opened, `tests/featcache/store/test_integrity.py`)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from support.cells import edit_asked
from support.images import make_image_tree
from support.messages import after_the_plan
from support.stores import synthetic_store
from typer.testing import CliRunner

from cli import app
from featcache.store import StoreDamaged, check_readable, read_split
from tosca_foundation.fingerprints import fingerprint

runner = CliRunner()
SPLIT = ["--init-cls", "2", "--increment", "2", "--device", "cpu"]


def _invoke(*args: str) -> tuple[int, list[str]]:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, after_the_plan(result.output)


def _chunk(store: Path, array: str = "train/features", key: str = "1/0") -> Path:
    return store / array / "c" / key


def _flip(store: Path) -> str:
    path = _chunk(store)
    data = bytearray(path.read_bytes())
    data[18] ^= 0x01  # a low mantissa bit of one value: finite, slightly off
    path.write_bytes(bytes(data))
    return "train chunk 1: values do not match the checksum recorded when it was written"


def _delete(store: Path) -> str:
    _chunk(store).unlink()  # zarr would read zeros
    return "train chunk 1: its file train/features/c/1/0 is missing"


def _truncate(store: Path) -> str:
    path = _chunk(store)
    path.write_bytes(path.read_bytes()[:100])
    return "train chunk 1: cannot be read (ValueError)"


def _edit_attrs(store: Path) -> str:
    meta = json.loads((store / "zarr.json").read_text())
    meta["attributes"]["identity"]["seed"] = 7  # the fingerprint no longer fits the identity
    (store / "zarr.json").write_text(json.dumps(meta))
    return "fingerprint does not match the identity attrs (edited after the store was made)"


def _attrs_off_arrays(store: Path) -> str:
    meta = json.loads((store / "zarr.json").read_text())
    identity = meta["attributes"]["identity"]
    identity["dataset"]["samples"]["train"] = 999  # re-fingerprinted: only the arrays can tell
    meta["attributes"]["fingerprint"] = fingerprint(identity)
    (store / "zarr.json").write_text(json.dumps(meta))
    return "train: 40 rows, attrs say 999"


DAMAGES: dict[str, Callable[[Path], str]] = {
    "flipped bit": _flip,
    "deleted chunk file": _delete,
    "truncated chunk file": _truncate,
    "attrs edited": _edit_attrs,
    "attrs that do not fit the arrays": _attrs_off_arrays,
}


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A store (40 train rows in 16-row chunks) and a finished run on it."""
    root = tmp_path_factory.mktemp("verified")
    store = synthetic_store(root / "store.zarr", classes=4, per_class=10).path
    run = root / "run"
    code, lines = _invoke(
        "fit", "--store", store, "--run", run, "--epochs", "2", "--r", "4", "--s", "4", *SPLIT
    )
    assert code == 0, lines
    return store, run


def _copy(finished: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    store, run = tmp_path / "store.zarr", tmp_path / "run"
    shutil.copytree(finished[0], store)
    shutil.copytree(finished[1], run)
    edit_asked(run, store=str(store))
    return store, run


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_every_stage_2_command_stops_on_a_damaged_store(
    damage: str, finished: tuple[Path, Path], tmp_path: Path
) -> None:
    store, run = _copy(finished, tmp_path)
    metrics = (run / "metrics.json").read_bytes()
    reason = DAMAGES[damage](store)
    images = make_image_tree(tmp_path / "new", classes=1, train=1, test=1)
    commands = {
        "fit": ["fit", "--store", store, "--run", tmp_path / "run2", "--epochs", "1", *SPLIT],
        "eval": ["eval", run, "--device", "cpu"],
        "sweep": [
            "sweep",
            "--store",
            store,
            "--r",
            "4",
            "--epochs",
            "1",
            "--out",
            tmp_path / "sw",
            "--jobs",
            "1",
            *SPLIT,
        ],
        "baselines": ["baselines", "--store", store, "--no-tosca", "--out", tmp_path / "b", *SPLIT],
    }
    if damage in ("attrs edited", "attrs that do not fit the arrays"):
        commands["predict"] = ["predict", run, images, "--device", "cpu"]  # predict reads attrs, not chunks
    for name, argv in commands.items():
        code, lines = _invoke(*argv)
        assert code == 2 and len(lines) == 1, (name, lines)
        assert lines[0].startswith(f"error: store {store} cannot be used: "), (name, lines)
        assert reason in lines[0] and f"`tosca cache verify {store} --fix`" in lines[0], (name, lines)
    assert (run / "metrics.json").read_bytes() == metrics  # eval did not rewrite the run's numbers
    assert not (tmp_path / "run2").exists() and not any((tmp_path / "b").glob("*/metrics.json"))


def test_reads_are_checked_in_the_library_too(tmp_path: Path) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=4, per_class=10, views=2)
    features, views = read_split(store, "train")
    assert features.shape == (40, 32) and views is not None and views.shape == (2, 40, 32)
    view_chunk = store.path / "train" / "views" / "c" / "1" / "2" / "0"
    view_chunk.write_bytes(bytes(len(view_chunk.read_bytes())))
    check_readable(store)  # attrs and completeness still hold: the values do not
    with pytest.raises(StoreDamaged, match="train chunk 2: values do not match the checksum"):
        read_split(store, "train")
    view_chunk.unlink()
    with pytest.raises(StoreDamaged, match="its file train/views/c/1/2/0 is missing"):
        read_split(store, "train")
