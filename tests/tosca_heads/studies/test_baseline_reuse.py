"""A baselines folder rerun reuses each baseline made from the same store, task split, parameters
and validation split (issue 49, point 5: the demo's rerun computed RanPAC again, 107 s of 166 s),
its figures checked against its kept answers; anything else asked is computed again."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from support.stores import synthetic_store

import tosca_heads
from tosca_foundation.errors import UserError
from tosca_heads.running import executor

ASKED: dict[str, Any] = {"init_cls": 2, "increment": 2, "val_fraction": 0.2, "with_tosca": False}
RANPAC = {"ranpac_projection_dim": 64}


@pytest.mark.heavy  # five baselines commands
def test_a_rerun_reuses_what_was_made_the_same_way_and_computes_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=6, per_class=20, spread=1.5)
    out = tmp_path / "base"
    first = tosca_heads.baselines(store.path, ["simplecil", "ranpac"], out=out, **ASKED, **RANPAC)
    kept = {m: (out / m / "metrics.json").read_bytes() for m in ("simplecil", "ranpac")}

    computed: list[str] = []
    real = executor.run_baseline

    def counted(name: str, *args: Any, **kwargs: Any) -> Any:
        computed.append(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(executor, "run_baseline", counted)
    again = tosca_heads.baselines(store.path, ["simplecil", "ranpac"], out=out, **ASKED, **RANPAC)
    assert computed == []  # nothing computed again
    pd.testing.assert_frame_equal(again, first)  # the same table, seconds included (those it took)
    assert {m: (out / m / "metrics.json").read_bytes() for m in kept} == kept

    # another RanPAC seed: RanPAC computed again, SimpleCIL (no such parameter) reused
    tosca_heads.baselines(store.path, ["simplecil", "ranpac"], out=out, **ASKED, **RANPAC, ranpac_seed=7)
    assert computed == ["ranpac"]
    assert json.loads((out / "ranpac" / "asked.json").read_text())["params"]["seed"] == 7

    # another validation split: both computed again
    computed.clear()
    tosca_heads.baselines(
        store.path,
        ["simplecil", "ranpac"],
        out=out,
        **{**ASKED, "val_fraction": 0.3},
        **RANPAC,
        ranpac_seed=7,
    )
    assert sorted(computed) == ["ranpac", "simplecil"]

    # a store made again at the same path (another fingerprint): computed again
    computed.clear()
    synthetic_store(tmp_path / "s.zarr", classes=6, per_class=20, spread=1.5, seed=5)
    tosca_heads.baselines(store.path, ["simplecil"], out=out, **{**ASKED, "val_fraction": 0.3})
    assert computed == ["simplecil"]


@pytest.mark.parametrize(
    ("file", "field", "value"), [("measured.json", "parameters", 5), ("measured.json", "seconds", -3)]
)
def test_a_kept_baseline_edited_since_is_refused_not_reused(
    tmp_path: Path, file: str, field: str, value: object
) -> None:
    """Issue 54: an edited parameter count (5) or seconds (-3) of a kept baseline was printed on
    reuse; a cell's files are checked whole against its done.json, so the edit is one line."""
    store = synthetic_store(tmp_path / "s.zarr", classes=6, per_class=20, spread=1.5)
    out = tmp_path / "base"
    tosca_heads.baselines(store.path, ["simplecil"], out=out, **ASKED)
    path = out / "simplecil" / file
    payload = json.loads(path.read_text())
    payload[field] = value
    path.write_text(json.dumps(payload))
    with pytest.raises(UserError, match=rf"{file} is not the file that was written") as refused:
        tosca_heads.baselines(store.path, ["simplecil"], out=out, **ASKED)
    assert "\n" not in str(refused.value) and "delete the folder" in str(refused.value)


def test_an_impossible_seconds_is_refused_even_with_its_digest_made_again(tmp_path: Path) -> None:
    """A measured value no machine gives (negative or non-finite seconds) is one line, even where
    done.json was made again to match it."""
    store = synthetic_store(tmp_path / "s.zarr", classes=6, per_class=20, spread=1.5)
    out = tmp_path / "base"
    tosca_heads.baselines(store.path, ["simplecil"], out=out, **ASKED)
    folder = out / "simplecil"
    for seconds, said in ((-3, "must not be negative"), (float("inf"), "must be a finite number")):
        measured = json.loads((folder / "measured.json").read_text())
        measured["seconds"] = seconds
        (folder / "measured.json").write_text(json.dumps(measured))
        redigest(folder)
        with pytest.raises(UserError, match=said) as refused:
            tosca_heads.baselines(store.path, ["simplecil"], out=out, **ASKED)
        assert "\n" not in str(refused.value)


def redigest(folder: Path) -> None:
    """done.json made again over a cell's files as they are now (an edit that hides itself)."""
    done = json.loads((folder / "done.json").read_text())
    done["sha256"] = {
        name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in done["sha256"]
    }
    (folder / "done.json").write_text(json.dumps(done))


def test_a_baseline_stopped_by_a_full_disk_is_computed_again_not_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 54: a baseline that stopped on a full disk was "reused" on the rerun and its
    comparison never written. Its done.json is written last, so a cell without one is computed
    again (the disk fills as done.json is synced, as `test_disk_full` injects it)."""
    import errno
    import os

    store = synthetic_store(tmp_path / "s.zarr", classes=6, per_class=20, spread=1.5)
    out = tmp_path / "base"
    real_fsync = os.fsync

    def full_at_done(fd: int) -> None:
        if "done.json" in os.path.basename(os.readlink(f"/proc/self/fd/{fd}")):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    with monkeypatch.context() as full:
        full.setattr(os, "fsync", full_at_done)
        with pytest.raises((OSError, UserError), match="No space left on device"):
            tosca_heads.baselines(store.path, ["simplecil"], out=out, **ASKED)
    assert (out / "simplecil" / "asked.json").is_file() and not (out / "simplecil" / "done.json").exists()
    assert not (out / "comparison.csv").exists()

    computed: list[str] = []
    real = executor.run_baseline

    def counted(name: str, *args: Any, **kwargs: Any) -> Any:
        computed.append(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(executor, "run_baseline", counted)
    table = tosca_heads.baselines(store.path, ["simplecil"], out=out, **ASKED)
    assert computed == ["simplecil"]  # computed again, never "reused" half-written
    assert (out / "simplecil" / "done.json").is_file() and (out / "comparison.csv").is_file()
    assert 0 < float(table.loc[table["method"] == "simplecil", "A_last"].iloc[0]) <= 1
    tosca_heads.baselines(store.path, ["simplecil"], out=out, **ASKED)
    assert computed == ["simplecil"]  # now finished: reused


def test_a_parameter_count_edited_into_measured_json_changes_nothing_printed(tmp_path: Path) -> None:
    """Issue 54 point 1: a baseline's count is worked out from what was asked (its parameters, the
    store's d and classes), never read from a file: a count written into measured.json, with
    done.json made again to hide the edit, leaves the rows, the kept metrics.json and the printed
    comparison as they were."""
    store = synthetic_store(tmp_path / "s.zarr", classes=6, per_class=20, spread=1.5)
    out = tmp_path / "base"
    first = tosca_heads.baselines(store.path, ["simplecil", "ranpac"], out=out, **ASKED, **RANPAC)
    # SimpleCIL: 6 prototypes of d = 32; RanPAC: the 32 x 64 projection and 64 x 6 weights
    assert dict(zip(first["method"], first["parameters"], strict=True)) == {"simplecil": 192, "ranpac": 2432}
    for method in ("simplecil", "ranpac"):
        measured = json.loads((out / method / "measured.json").read_text())
        assert "parameters" not in measured  # no count kept to edit
        (out / method / "measured.json").write_text(json.dumps({**measured, "parameters": 5}))
        redigest(out / method)
    again = tosca_heads.baselines(store.path, ["simplecil", "ranpac"], out=out, **ASKED, **RANPAC)
    assert list(again["parameters"]) == [192, 2432]
    assert json.loads((out / "ranpac" / "metrics.json").read_text())["parameters"] == 2432
    table = (out / "comparison.md").read_text()
    assert "2,432" in table and "| 5 |" not in table


def test_a_baseline_cell_asked_without_the_store_dim_is_one_line(tmp_path: Path) -> None:
    """A cell written before asked.json held the store's d and classes has nothing to count its
    parameters from: refused in one line (the tool is unreleased), never a count read elsewhere."""
    store = synthetic_store(tmp_path / "s.zarr", classes=6, per_class=20, spread=1.5)
    out = tmp_path / "base"
    tosca_heads.baselines(store.path, ["simplecil"], out=out, **ASKED)
    asked = json.loads((out / "simplecil" / "asked.json").read_text())
    assert (asked["store"]["dim"], asked["store"]["classes"]) == (32, 6)
    del asked["store"]["dim"], asked["store"]["classes"]
    (out / "simplecil" / "asked.json").write_text(json.dumps(asked))
    redigest(out / "simplecil")
    with pytest.raises(UserError, match="no feature dim and classes to count the parameters from") as refused:
        tosca_heads.baselines(store.path, ["simplecil"], out=out, **ASKED)
    assert "\n" not in str(refused.value) and "delete the folder" in str(refused.value)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("dim", "32"),
        ("dim", True),
        ("dim", 0),
        ("dim", -32),
        ("classes", 6.0),
        ("classes", None),
        ("classes", [6]),
    ],
)
def test_a_hostile_store_dim_or_classes_in_asked_json_is_one_line(
    tmp_path: Path, field: str, value: object
) -> None:
    """The new way in (issue 54 point 1): asked.json's store `dim` and `classes`, which the count
    is worked out from, each a whole number above 0 or the cell is refused in one line, even with
    done.json made again to hide the edit."""
    store = synthetic_store(tmp_path / "s.zarr", classes=6, per_class=20, spread=1.5)
    out = tmp_path / "base"
    tosca_heads.baselines(store.path, ["simplecil"], out=out, **ASKED)
    asked = json.loads((out / "simplecil" / "asked.json").read_text())
    asked["store"][field] = value
    (out / "simplecil" / "asked.json").write_text(json.dumps(asked))
    redigest(out / "simplecil")
    with pytest.raises(UserError, match="no feature dim and classes to count the parameters from") as refused:
        tosca_heads.baselines(store.path, ["simplecil"], out=out, **ASKED)
    assert "\n" not in str(refused.value)


def test_an_edited_store_dim_is_asked_otherwise_and_computed_again(tmp_path: Path) -> None:
    """A valid but edited dim (64 for the store's 32) is another question: the cell is computed
    again, and the count printed is the store's, never the edit's."""
    store = synthetic_store(tmp_path / "s.zarr", classes=6, per_class=20, spread=1.5)
    out = tmp_path / "base"
    tosca_heads.baselines(store.path, ["simplecil"], out=out, **ASKED)
    asked = json.loads((out / "simplecil" / "asked.json").read_text())
    asked["store"]["dim"] = 64
    (out / "simplecil" / "asked.json").write_text(json.dumps(asked))
    redigest(out / "simplecil")
    again = tosca_heads.baselines(store.path, ["simplecil"], out=out, **ASKED)
    assert list(again["parameters"]) == [192]
    assert json.loads((out / "simplecil" / "asked.json").read_text())["store"]["dim"] == 32
