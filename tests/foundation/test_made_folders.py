"""Folders tosca makes for others' files (a tracker's event and artifact folders): never entered
through a link planted at their name, never a file taken for a folder, never inside a zarr store or
a tosca folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tosca_foundation import atomic, folders
from tosca_foundation.errors import UserError


def test_folders_are_made_below_their_base_and_never_through_a_link(tmp_path: Path) -> None:
    made = atomic.make_folders(tmp_path / "a" / "b" / "c", tmp_path)
    assert made.is_dir() and atomic.make_folders(made, tmp_path) == made  # again: nothing to make
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "a" / "link").symlink_to(elsewhere)
    with pytest.raises(UserError, match=r"link is a symbolic link: tosca never writes through one"):
        atomic.make_folders(tmp_path / "a" / "link" / "x", tmp_path)
    (tmp_path / "a" / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(UserError, match=r"dangling is a symbolic link"):
        atomic.make_folders(tmp_path / "a" / "dangling", tmp_path)
    assert not (tmp_path / "nowhere").exists() and os.listdir(elsewhere) == []
    (tmp_path / "a" / "file").write_text("x")
    with pytest.raises(UserError, match=r"file is a file where tosca makes a folder"):
        atomic.make_folders(tmp_path / "a" / "file" / "x", tmp_path)
    base_link = tmp_path / "base-link"
    base_link.symlink_to(elsewhere)  # the caller's base itself is taken as it is
    assert atomic.make_folders(base_link / "ok", base_link).is_dir() and os.listdir(elsewhere) == ["ok"]


def test_a_place_inside_a_store_or_a_tosca_folder_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "s.zarr"
    (store / "train").mkdir(parents=True)
    (store / "zarr.json").write_text("{}")
    (store / "train" / "zarr.json").write_text("{}")
    with pytest.raises(
        UserError, match=rf"--log x {store}/train/tb lies inside the zarr store {store}: pass a folder"
    ):
        folders.refuse_inside_owned(store / "train" / "tb", "--log x", "its files")
    run = folders.claim(tmp_path / "run", "run", "--run")
    with pytest.raises(UserError, match=rf"lies inside the tosca run folder {run}"):
        folders.refuse_inside_owned(run / "deep" / "tb", "--log x", "its files")
    with pytest.raises(UserError, match=r"is a tosca run folder"):
        folders.refuse_inside_owned(run, "--log x", "its files")
    folders.refuse_inside_owned(tmp_path / "free" / "tb", "--log x", "its files")  # anywhere else: fine
