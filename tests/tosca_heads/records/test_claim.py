"""The one folder claim (`records.claim`), kind by kind: a fresh folder is made, marked and given its
config; a resumed one with the same config is taken as it is; one made with another config is
refused in one line naming the difference and the flag; a locked one is refused naming its holder;
a stranger's folder, a folder of another kind and a planted link are refused before anything is
written, not even a lock file beside them. A group is checked whole before any lock is made."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tosca_foundation.errors import UserError
from tosca_foundation.folders import MARKER, marked_kind
from tosca_foundation.locks import FolderBusy, lock_path
from tosca_heads.method.protocol import NO_VALIDATION, StreamConfig, ValidationConfig
from tosca_heads.method.recipe import TrainConfig
from tosca_heads.records import FORMAT, PRE_RELEASE, claim
from tosca_heads.records.baselines_folder import BASELINES_FOLDER
from tosca_heads.records.run_config import (
    RUN_FOLDER,
    config_differences,
    make_run_config,
    read_run_config,
)
from tosca_heads.records.scenario_folder import SCENARIO_FOLDER, SCENARIO_SWEEP_FOLDER
from tosca_heads.records.sweep import SWEEP_FOLDER, sweep_config
from tosca_heads.studies.suite.suite_runner import SUITE_FOLDER

STORE = SimpleNamespace(  # what a config reads of a store
    path=Path("/stores/a.zarr"),
    fingerprint="f" * 64,
    identity={"dataset": {"name": "eurosat"}, "backbone": {"alias": "vit"}},
    dim=32,
    views=0,
)
OTHER_STORE = SimpleNamespace(**{**vars(STORE), "fingerprint": "e" * 64, "path": Path("/stores/b.zarr")})
PROTOCOL = {"said": "B0 Inc2"}


def _run_config(
    r: int = 4, store: Any = STORE, validation: ValidationConfig = NO_VALIDATION
) -> dict[str, Any]:
    held = ("img-1", "img-2") if validation.enabled else ()
    return make_run_config(
        store, StreamConfig(2, 2), validation, held, PROTOCOL, TrainConfig(r=r, s=4, epochs=1)
    )


def _sweep_config(
    keys: tuple[str, ...] = ("a", "b"), store: Any = STORE, validation: ValidationConfig = NO_VALIDATION
) -> dict[str, Any]:
    held = ("img-1",) if validation.enabled else ()
    return sweep_config(store, keys, validation, held, PROTOCOL)


def _claim(folder: Path, kind: claim.FolderKind, config: dict[str, Any] | None) -> None:
    with claim.claim_folder(folder, kind, config):
        pass


def _claim_all(dirs: list[Path], kind: claim.FolderKind, configs: list[dict[str, Any] | None]) -> None:
    with claim.claim_folders(dirs, kind, configs):
        pass


# each kind with its config file and a config of its own (None: the kind records none)
KINDS = {
    "run": (RUN_FOLDER, "asked.json", _run_config),
    "sweep": (SWEEP_FOLDER, "sweep.json", _sweep_config),
    "baselines": (BASELINES_FOLDER, None, lambda: None),
    "suite": (SUITE_FOLDER, None, lambda: None),
    "scenario": (SCENARIO_FOLDER, None, lambda: None),
    "scenario-sweep": (SCENARIO_SWEEP_FOLDER, None, lambda: None),
}


@pytest.mark.parametrize("name", list(KINDS))
def test_a_fresh_folder_is_made_marked_locked_and_given_its_config(tmp_path: Path, name: str) -> None:
    kind, config_file, config = KINDS[name]
    folder = tmp_path / "new" / name
    with claim.claim_folder(folder, kind, config()) as claimed:
        assert claimed == folder and marked_kind(folder) == kind.name
        assert lock_path(folder).is_file()  # held for the with-block
        if config_file is not None:
            assert json.loads((folder / config_file).read_text()) == config()
        else:
            assert sorted(p.name for p in folder.iterdir()) == [MARKER]
    assert not lock_path(folder).exists()  # given up when the block ends


@pytest.mark.parametrize("name", list(KINDS))
def test_a_resumed_folder_of_the_same_config_is_taken_as_it_is(tmp_path: Path, name: str) -> None:
    kind, _, config = KINDS[name]
    folder = tmp_path / name
    _claim(folder, kind, config())
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert claim.check(folder, kind, config()) is True  # already one of this kind
    _claim(folder, kind, config())
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_a_run_of_another_config_is_refused_in_one_line_with_its_differences(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    _claim(folder, RUN_FOLDER, _run_config(r=4))
    with pytest.raises(UserError) as refused:
        claim.check(folder, RUN_FOLDER, _run_config(r=8))
    said = str(refused.value)
    assert said == f"run {folder} was made with another config or store (train.r: 4 -> 8); pass another --run"
    assert not lock_path(folder).exists()  # refused before a lock file was made beside it
    with pytest.raises(UserError, match=r"another config or store \(store_fingerprint: f+\.\.\. -> e+"):
        _claim(folder, RUN_FOLDER, _run_config(r=4, store=OTHER_STORE))
    assert read_run_config(folder)["train"]["r"] == 4  # nothing rewritten


def test_many_differences_are_counted_after_the_first_three(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    _claim(folder, RUN_FOLDER, _run_config())
    other = _run_config()
    other["train"] = {**other["train"], "r": 9, "s": 9, "epochs": 9, "lr": 9.0, "seed": 9}
    with pytest.raises(UserError) as refused:
        claim.check(folder, RUN_FOLDER, other)
    said = str(refused.value)
    assert said.count("->") == 3 and "; and 2 more); pass another --run" in said and "\n" not in said


def test_a_moved_store_or_another_format_is_the_same_run(tmp_path: Path) -> None:
    """The store's path, the format and the protocol's words are informational."""
    moved = SimpleNamespace(**{**vars(STORE), "path": Path("/elsewhere/a.zarr")})
    folder = tmp_path / "run"
    _claim(folder, RUN_FOLDER, _run_config())
    assert claim.check(folder, RUN_FOLDER, {**_run_config(store=moved), "protocol": {"said": "other"}})
    assert config_differences(_run_config(), {**_run_config(), "format": 1}) == []


def test_a_sweep_of_another_store_or_validation_split_is_refused_in_its_own_words(tmp_path: Path) -> None:
    folder = tmp_path / "sweep"
    _claim(folder, SWEEP_FOLDER, _sweep_config())
    with pytest.raises(UserError) as store:
        claim.check(folder, SWEEP_FOLDER, _sweep_config(store=OTHER_STORE))
    assert str(store.value) == (
        f"sweep folder {folder} holds results of another store (/stores/a.zarr); pass another --out"
    )
    with pytest.raises(UserError) as split:
        claim.check(folder, SWEEP_FOLDER, _sweep_config(validation=ValidationConfig(0.1, 0)))
    assert str(split.value) == (
        f"sweep folder {folder} holds points without a validation split (ranked on test); pass "
        "--val-fraction 0 to resume it, or another --out"
    )
    assert not lock_path(folder).exists()


def test_a_grown_grid_is_added_to_its_sweep_file(tmp_path: Path) -> None:
    folder = tmp_path / "sweep"
    _claim(folder, SWEEP_FOLDER, _sweep_config(("a", "b")))
    grown = _sweep_config(("a", "b", "c"))
    _claim(folder, SWEEP_FOLDER, grown)
    recorded = json.loads((folder / "sweep.json").read_text())
    assert recorded["grid"] == _sweep_config(("a", "b"))["grid"] and recorded["grids"] == [grown["grid"]]
    with claim.claim_folder(folder, SWEEP_FOLDER, grown):  # known now: the file stays as it is
        pass
    assert json.loads((folder / "sweep.json").read_text()) == recorded


def test_a_damaged_config_file_is_one_line_before_anything_is_written(tmp_path: Path) -> None:
    folder = tmp_path / "sweep"
    _claim(folder, SWEEP_FOLDER, _sweep_config())
    (folder / "sweep.json").write_text(json.dumps({"format": FORMAT, "grid": "x"}))
    with pytest.raises(
        UserError, match=r"records no store fingerprint: it was edited or damaged; pass another --out"
    ):
        claim.check(folder, SWEEP_FOLDER, _sweep_config())
    run = tmp_path / "run"
    _claim(run, RUN_FOLDER, _run_config())
    (run / "asked.json").write_text(json.dumps({**_run_config(), "format": max(PRE_RELEASE) + 1}))
    with pytest.raises(UserError, match="written by a newer tosca"):
        claim.check(run, RUN_FOLDER, _run_config())


@pytest.mark.parametrize("name", list(KINDS))
def test_a_locked_folder_is_refused_naming_its_holder(tmp_path: Path, name: str) -> None:
    kind, _, config = KINDS[name]
    folder = tmp_path / name
    with claim.claim_folder(folder, kind, config()), pytest.raises(FolderBusy) as busy:
        _claim(folder, kind, config())
    said = str(busy.value)
    assert said.startswith(
        f"{kind.noun} {folder} is being written by another tosca process (pid {os.getpid()}"
    )
    assert socket.gethostname() in said and f"pass another {kind.flag}" in said


@pytest.mark.parametrize("name", list(KINDS))
def test_a_strangers_folder_is_refused_without_a_lock_file(tmp_path: Path, name: str) -> None:
    kind, _, config = KINDS[name]
    folder = tmp_path / name
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(UserError) as refused:
        _claim(folder, kind, config())
    assert str(refused.value) == (
        f"refusing to write into {folder}: it holds files tosca did not write (notes.txt); "
        f"pass a new or empty folder as {kind.flag}"
    )
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"] and not lock_path(folder).exists()


def test_a_folder_of_another_kind_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    _claim(folder, RUN_FOLDER, _run_config())
    with pytest.raises(UserError) as refused:
        claim.check(folder, SWEEP_FOLDER, _sweep_config())
    assert (
        str(refused.value) == f"--out {folder} is a tosca run folder, not a sweep folder: pass another --out"
    )


@pytest.mark.parametrize("name", list(KINDS))
def test_a_planted_link_is_refused_before_anything_is_written(tmp_path: Path, name: str) -> None:
    kind, _, config = KINDS[name]
    folder = tmp_path / name
    _claim(folder, kind, config())
    target = tmp_path / "elsewhere.txt"
    target.write_text("not tosca's")
    (folder / "results.csv").symlink_to(target)
    with pytest.raises(
        UserError, match=r"holds results\.csv, a symbolic link: tosca never writes through one"
    ):
        _claim(folder, kind, config())
    assert target.read_text() == "not tosca's" and not lock_path(folder).exists()


def test_a_group_is_checked_whole_before_any_lock_or_marker(tmp_path: Path) -> None:
    """G run folders: the last one a stranger's, so none is made, locked or marked."""
    first, stranger = tmp_path / "a", tmp_path / "b"
    stranger.mkdir()
    (stranger / "mine.csv").write_text("1")
    with pytest.raises(UserError, match="holds files tosca did not write"):
        _claim_all([first, stranger], RUN_FOLDER, [_run_config(4), _run_config(8)])
    assert not first.exists() and not lock_path(first).exists() and not lock_path(stranger).exists()


def test_a_group_holds_every_lock_for_its_block(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    with claim.claim_folders(dirs, RUN_FOLDER, [_run_config(4), _run_config(8)]):
        assert all(lock_path(d).is_file() for d in dirs)
        assert [read_run_config(d)["train"]["r"] for d in dirs] == [4, 8]
    assert not any(lock_path(d).exists() for d in dirs)


def test_what_a_killed_writer_left_half_written_is_removed(tmp_path: Path) -> None:
    """Temporary files of a writer whose process is gone go; a live writer's stay. (A sweep
    point's cell left unfinished is removed whole when it is computed again:
    `sweep_points.write_point`.)"""
    folder = tmp_path / "sweep"
    kind = SWEEP_FOLDER
    with claim.claim_folder(folder, kind, _sweep_config()):
        pass
    dead = 2**22 + 12345  # above any pid this machine hands out (pid_max is at most 2^22)
    stale = [folder / f".results.csv.{dead}.tmp", folder / f".sweep.json.{dead}.tmp"]
    live = folder / f".results.csv.{os.getpid()}.tmp"
    for path in [*stale, live]:
        path.write_text("half")
    with claim.claim_folder(folder, kind, _sweep_config()):
        assert not any(p.exists() for p in stale) and live.exists()


def test_a_folder_claimed_for_workers_is_marked_without_a_lock(tmp_path: Path) -> None:
    """A suite's baselines folder: marked by the process that holds the suite's lock, for the
    workers that write it at once; marking it again changes nothing."""
    folder = tmp_path / "cells" / "baselines"
    assert claim.mark(folder, BASELINES_FOLDER) == folder
    assert marked_kind(folder) == "baselines" and not lock_path(folder).exists()
    marker = (folder / MARKER).read_bytes()
    claim.mark(folder, BASELINES_FOLDER)
    assert (folder / MARKER).read_bytes() == marker


def test_the_config_a_plan_builds_is_what_the_reader_reads_back(tmp_path: Path) -> None:
    """make_run_config and read_run_config side by side: written by the claim, read back equal, no
    differences; the validation split recorded only when one is held out."""
    held = ValidationConfig(0.1, 3)
    config = _run_config(validation=held)
    folder = tmp_path / "run"
    _claim(folder, RUN_FOLDER, config)
    assert read_run_config(folder) == config and config_differences(read_run_config(folder), config) == []
    assert config["validation"]["fraction"] == 0.1 and config["validation"]["samples"] == 2
    assert "validation" not in _run_config()
    assert config["store"] == "/stores/a.zarr" and config["feature_dim"] == 32 and config["format"] == FORMAT


@pytest.mark.parametrize("was", ["new", "empty"])
def test_a_command_refused_in_a_folder_it_claimed_for_nothing_leaves_nothing(
    tmp_path: Path, was: str
) -> None:
    """Issue 57, point 10: a refused FeCAM run left its claimed folder (`.tosca`) behind. A
    command refused (a UserError) inside the claim of a folder it found new or empty, having
    written nothing but the claim's own files, gives the folder back: a new one is gone, lock and
    parents with it, an empty one is empty again."""
    folder = tmp_path / "out" / "baselines"
    if was == "empty":
        folder.mkdir(parents=True)
    with pytest.raises(UserError, match="refused"), claim.claim_folder(folder, BASELINES_FOLDER):
        assert (folder / MARKER).is_file()
        raise UserError("refused")
    if was == "new":
        assert not (tmp_path / "out").exists()
    else:
        assert folder.is_dir() and not any(folder.iterdir())
    assert not lock_path(folder).exists()


def test_a_refused_command_keeps_what_it_wrote_and_a_folder_it_did_not_make(tmp_path: Path) -> None:
    """What a command wrote before its refusal is work (a resumed run finds it), and a folder of
    this kind from before is the user's: both stay whole."""
    written = tmp_path / "written"
    with pytest.raises(UserError), claim.claim_folder(written, BASELINES_FOLDER):
        (written / "simplecil").mkdir()
        raise UserError("refused after a method was written")
    assert (written / MARKER).is_file() and (written / "simplecil").is_dir()
    with pytest.raises(UserError), claim.claim_folder(written, BASELINES_FOLDER):  # claimed before
        raise UserError("refused")
    assert (written / MARKER).is_file() and (written / "simplecil").is_dir()
