"""A sweep point is a cell (issue 54): points/KEY/ holds what it was asked, what it measured and its
answers, done.json last. It is reused only when finished, whole and asked the same; one never
finished is computed again; one edited after it finished, or a stranger in the points, is one line;
results.csv is a view rewritten from the points; a folder of the old layout is refused."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from support.stores import synthetic_store

import tosca_heads
from tosca_foundation.errors import UserError
from tosca_heads.records import cell
from tosca_heads.records.sweep_points import (
    POINTS_FOLDER,
    check_points,
    figures_of_points,
    read_points,
    reusable_point,
)

SPLIT = {"init_cls": 2, "increment": 2, "epochs": 1, "batch_size": 8}


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A store and a finished sweep of two points (read-only: copied by tests)."""
    root = tmp_path_factory.mktemp("points")
    store = synthetic_store(root / "s.zarr", classes=4, per_class=12, test_per_class=6)
    tosca_heads.sweep(store, {"r": [2, 4]}, root / "sweep", jobs=1, **SPLIT)
    return {"store": store.path, "sweep": root / "sweep"}


def _copy(made: dict[str, Path], tmp_path: Path) -> Path:
    out = tmp_path / "sweep"
    shutil.copytree(made["sweep"], out)
    return out


def _rerun(made: dict[str, Path], out: Path) -> object:
    return tosca_heads.sweep(made["store"], {"r": [2, 4]}, out, jobs=1, **SPLIT)


def _a_point(out: Path) -> Path:
    return sorted((out / POINTS_FOLDER).iterdir())[0]


def _other_point(out: Path) -> Path:
    return sorted((out / POINTS_FOLDER).iterdir())[1]


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def _redigested(folder: Path, name: str, **changes: object) -> None:
    """A file of a finished point edited and done.json made again over it: an edit that hides itself."""
    payload = json.loads((folder / name).read_text())
    for dotted, value in changes.items():
        block = payload
        *parents, last = dotted.split("__")
        for key in parents:
            block = block[key]
        block[last] = value
    (folder / name).write_text(json.dumps(payload))
    done = json.loads((folder / cell.DONE).read_text())
    done["sha256"][name] = hashlib.sha256((folder / name).read_bytes()).hexdigest()
    (folder / cell.DONE).write_text(json.dumps(done))


def test_a_point_is_a_cell_and_its_figures_are_its_answers(made: dict[str, Path]) -> None:
    """Each point's folder holds exactly a cell's files, named by its key; results.csv's figures
    are those its answers give, and nothing in the cell holds a figure."""
    points = read_points(made["sweep"])
    assert len(points) == 2
    for point in points:
        assert sorted(p.name for p in point.cell.folder.iterdir()) == sorted(cell.CELL_FILES)
        kept = json.dumps([point.cell.asked, point.cell.measured])
        assert "A_last" not in kept and "A_bar" not in kept and "params_per_task" not in kept
    import pandas as pd

    frame = pd.read_csv(made["sweep"] / "results.csv", keep_default_na=False, na_values=[""])
    for point, blocks in zip(points, figures_of_points(points), strict=True):
        row = frame[(frame["key"] == point.key) & (frame["split"] == "test") & (frame["router"] == "entropy")]
        assert row["A_last"].iloc[0] == blocks["test"]["entropy"]["A_last"]
        assert row["images"].iloc[0] == blocks["test"]["entropy"]["images"] == 4 * 6
        assert row["tasks"].iloc[0] == point.cell.tasks == 2
        assert row["params_per_task"].iloc[0] == point.params_per_task() > 0
    assert "rows" not in frame  # the append-only file's own column is gone with it


def test_a_point_never_finished_is_computed_again(made: dict[str, Path], tmp_path: Path) -> None:
    """Killed before its done.json (or stopped by a full disk): not reused, computed again, and the
    sweep ends with the figures it had."""
    out = _copy(made, tmp_path)
    written = (out / "results.csv").read_bytes()
    folder = _a_point(out)
    (folder / cell.DONE).unlink()
    (folder / cell.OUTCOMES).write_bytes(b"half")  # what a kill mid-write leaves
    (folder / ".measured.json.1.tmp").write_text("{")
    asked = json.loads((folder / cell.ASKED).read_text())
    asked.pop("format")
    assert not reusable_point(out, folder.name, asked)
    assert len(read_points(out)) == 1  # a point never finished is no point of the views
    kept = _files(_other_point(out))
    _rerun(made, out)
    assert _files(_other_point(out)) == kept  # the finished one reused as it was
    assert sorted(p.name for p in folder.iterdir()) == sorted(cell.CELL_FILES)
    assert reusable_point(out, folder.name, asked)

    def figures(text: bytes) -> list[list[str]]:  # every cell but the timings and the worker
        lines = [line.split(",") for line in text.decode().splitlines()]
        timed = {i for i, c in enumerate(lines[0]) if c.endswith("_seconds") or c == "worker_pid"}
        return [[c for i, c in enumerate(line) if i not in timed] for line in lines]

    assert figures((out / "results.csv").read_bytes()) == figures(written)


def test_a_point_asked_otherwise_is_computed_again(made: dict[str, Path], tmp_path: Path) -> None:
    """A point made by another version of a library that changes numbers is not reused."""
    out = _copy(made, tmp_path)
    folder = _a_point(out)
    _redigested(folder, cell.ASKED, versions__torch="0.0")
    kept = _files(_other_point(out))
    _rerun(made, out)
    assert _files(_other_point(out)) == kept
    assert json.loads((folder / cell.ASKED).read_text())["versions"] == cell.versions()


@pytest.mark.parametrize(
    ("name", "edit", "said"),
    [
        (
            "seconds negative",
            lambda f: _redigested(f, cell.MEASURED, seconds=-3),
            "seconds must not be negative",
        ),
        (
            "train seconds not finite",
            lambda f: _redigested(f, cell.MEASURED, train_seconds=float("nan")),
            "train_seconds must be a finite number of seconds, got nan",
        ),
        (
            "group size zero",
            lambda f: _redigested(f, cell.MEASURED, group_size=0),
            "group_size must be a whole number of at least 1, got 0",
        ),
        (
            "worker pid not a count",
            lambda f: _redigested(f, cell.MEASURED, worker_pid="me"),
            "worker_pid must be a whole number of at least 0, got 'me'",
        ),
        (
            "device not a name",
            lambda f: _redigested(f, cell.MEASURED, device=[1]),
            "device must be a device's name",
        ),
        (
            "flags edited to another point's",
            lambda f: _redigested(f, cell.ASKED, train__r=8),
            "not the one its folder names (moved or renamed)",
        ),
        (
            "flags of no point",
            lambda f: _redigested(f, cell.ASKED, train="r=8"),
            "records no point's flags",
        ),
        (
            "a store of no feature size",
            lambda f: _redigested(f, cell.ASKED, store__dim=0),
            "records no point's flags (no store of a feature size)",
        ),
        (
            "another kind of cell",
            lambda f: _redigested(f, cell.ASKED, kind="baseline"),
            "is not a sweep point's",
        ),
        (
            "measured.json edited",
            lambda f: (f / cell.MEASURED).write_text(
                (f / cell.MEASURED).read_text().replace('"seconds": ', '"seconds": 1')
            ),
            "measured.json is not the file that was written",
        ),
        ("answers deleted", lambda f: (f / cell.OUTCOMES).unlink(), "outcomes.safetensors is missing"),
        (
            "a stray file in a point",
            lambda f: (f / "notes.txt").write_text("mine"),
            "holds 'notes.txt', no file of a sweep point",
        ),
        (
            "a point renamed",
            lambda f: f.rename(f.with_name("0123456789abcdef")),
            "not the one its folder names (moved or renamed)",
        ),
        (
            "a stray file among the points",
            lambda f: (f.parent / "notes.txt").write_text("mine"),
            "holds 'notes.txt', no sweep point's folder",
        ),
    ],
)
def test_an_edited_point_is_one_line_and_never_a_number(
    made: dict[str, Path], tmp_path: Path, name: str, edit: object, said: str
) -> None:
    out = _copy(made, tmp_path)
    edit(_a_point(out))  # type: ignore[operator]
    with pytest.raises(UserError, match=None) as caught:
        check_points(out)
    assert said in str(caught.value), name
    assert "\n" not in str(caught.value)
    with pytest.raises(UserError) as again:  # a rerun is refused before anything runs
        _rerun(made, out)
    assert said in str(again.value), name


def test_a_sweep_folder_of_the_old_layout_is_refused(made: dict[str, Path], tmp_path: Path) -> None:
    """results.csv and outcomes/ as truth, no points/: one line saying what to do."""
    out = _copy(made, tmp_path)
    shutil.rmtree(out / POINTS_FOLDER)
    (out / "outcomes").mkdir()
    with pytest.raises(
        UserError, match=r"was written before sweep points were kept as cells .*pass another --out"
    ):
        _rerun(made, out)
    (out / "outcomes").rmdir()  # results.csv alone, no points: the same
    with pytest.raises(UserError, match="was written before sweep points were kept as cells"):
        _rerun(made, out)
