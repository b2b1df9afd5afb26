"""Which store a command means when no --store is given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.stores import synthetic_store

from featcache.store import FeatureStore
from featcache.store.find import resolve_store
from tosca_foundation.errors import UserError


def test_a_complete_store_is_preferred_over_one_being_extracted(tmp_path: Path) -> None:
    done = synthetic_store(tmp_path / "a" / "done.zarr").path
    half = synthetic_store(tmp_path / "b" / "half.zarr", seed=1).path
    FeatureStore.open(half, mode="r+").mark_undone("train", [0])
    assert resolve_store(None, None, None, tmp_path).path == done


def test_an_incomplete_store_alone_is_returned_so_that_its_own_refusal_names_it(tmp_path: Path) -> None:
    half = synthetic_store(tmp_path / "half.zarr").path
    FeatureStore.open(half, mode="r+").mark_undone("train", [0])
    found = resolve_store(None, None, None, tmp_path)
    with pytest.raises(UserError, match="is not fully extracted"):
        found.require_complete()


def test_an_unreadable_store_is_passed_over_and_counted(tmp_path: Path) -> None:
    good = synthetic_store(tmp_path / "good.zarr").path
    bad = synthetic_store(tmp_path / "bad.zarr", seed=1).path
    meta = json.loads((bad / "zarr.json").read_text())
    meta["attributes"]["schema_version"] = 999  # written by a "newer" tosca
    (bad / "zarr.json").write_text(json.dumps(meta))
    assert resolve_store(None, None, None, tmp_path).path == good
    with pytest.raises(UserError, match=r"1 unreadable store\(s\) passed over"):
        resolve_store(None, "vit_b16", None, tmp_path)


def test_two_complete_matches_are_refused_naming_both(tmp_path: Path) -> None:
    one = synthetic_store(tmp_path / "one.zarr").path
    two = synthetic_store(tmp_path / "two.zarr", seed=1).path
    with pytest.raises(UserError, match="2 stores under") as err:
        resolve_store(None, None, None, tmp_path)
    assert str(one) in str(err.value) and str(two) in str(err.value)
