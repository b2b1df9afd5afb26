"""One file format, the first release's (`records.FORMAT`): no reader of an unreleased format is
kept. A run, sweep, baselines folder, suite or store written before tosca's first release (a file
that records no format, or one of the numbers the builds before it wrote) is refused in one line
that says so, and one of a newer format asks for a newer tosca. The old folders are made here, on
the fly, from current ones (no committed fixtures). Results' columns do not depend on the router
registry, so adding a router does not stop a sweep from resuming."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
import torch
from support.cells import redigest
from support.stores import synthetic_store
from typer.testing import CliRunner

from cli import app
from tosca_foundation import atomic
from tosca_foundation.errors import UserError
from tosca_foundation.tensorfiles import read_safetensors
from tosca_heads import records
from tosca_heads.records.run_cell import read_run
from tosca_heads.routers import ROUTERS, Router, StageView, resolve_routers

RUNNER = CliRunner()
SPLIT = ["--init-cls", "2", "--increment", "2", "--device", "cpu"]
QUICK = ["--epochs", "1", "--r", "4", "--s", "4"]
SUITE = """
name = "tiny"
seeds = [0]
[tosca]
routers = ["entropy"]
flags = { epochs = 1, r = 4, s = 4 }
[baselines]
methods = ["simplecil"]
[[stores]]
name = "A"
path = "s.zarr"
init_cls = 2
increment = 2
"""
BEFORE = "was written before tosca's first release"


def _run(*args: object) -> str:
    result = RUNNER.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


def _refused(*args: object) -> str:
    """The one line a command refuses with (exit 2; the protocol a fit or suite prints, and
    warnings, may come first)."""
    result = RUNNER.invoke(app, [str(a) for a in args])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    said_first = re.compile(r"^(store \S+: )?protocol: |^warning")
    lines = [line for line in result.output.strip().splitlines() if not said_first.match(line)]
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store and, written by this tosca from it, a run, a sweep, a baselines folder and a suite."""
    root = tmp_path_factory.mktemp("current")
    synthetic_store(root / "s.zarr", classes=4, per_class=12, test_per_class=6)
    _run("fit", "--store", root / "s.zarr", "--run", root / "run", *QUICK, *SPLIT)
    _run("sweep", "--store", root / "s.zarr", "--out", root / "sweep", "--jobs", "1", *QUICK, *SPLIT)
    _run(
        *("baselines", "--store", root / "s.zarr", "--no-tosca", "--methods", "simplecil"),
        *("--out", root / "baselines", *SPLIT),
    )
    (root / "SUITE.toml").write_text(SUITE)
    _run("suite", root / "SUITE.toml", "--out", root / "suite", "--jobs", "1", "--device", "cpu")
    return root


@pytest.fixture
def copy(made: Path, tmp_path: Path) -> Path:
    """A copy of the current folders, its paths pointing at the copy."""
    root = tmp_path / "old"
    shutil.copytree(made, root)
    for path in root.rglob("*.json"):
        path.write_text(path.read_text().replace(str(made), str(root)))
    for done in root.rglob("done.json"):  # the paths rewritten: as the cells would have been written there
        redigest(done.parent)
    return root


def _set_format(path: Path, value: object) -> None:
    """A JSON file's `format` as a build before the first release wrote it (None: no field at all)."""
    data = json.loads(path.read_text())
    data.pop("format", None)
    if value is not None:
        data["format"] = value
    path.write_text(json.dumps(data))


def test_every_file_tosca_writes_records_the_first_format(made: Path) -> None:
    assert records.FORMAT == 1
    for path in [
        made / "run" / "asked.json",
        made / "run" / "measured.json",
        made / "run" / "done.json",
        made / "run" / "metrics.json",
        made / "run" / "confusion.json",
        made / "sweep" / "sweep.json",
        made / "baselines" / "simplecil" / "asked.json",
        made / "baselines" / "simplecil" / "measured.json",
        made / "baselines" / "simplecil" / "done.json",
        made / "suite" / "manifest.json",
    ]:
        assert json.loads(path.read_text())["format"] == 1, path
    for path in [made / "run" / "results.csv", made / "run" / "curves.csv", made / "sweep" / "results.csv"]:
        assert set(pd.read_csv(path)["format"]) == {1}, path
    _, meta = read_safetensors(made / "run" / "outcomes.safetensors", lambda header: None)
    assert meta["format"] == "1"


OLD = [None, 2, 3, 4]  # no field (before versions), and the numbers the builds before the release wrote


@pytest.mark.parametrize("value", OLD)
def test_a_run_written_before_the_first_release_is_refused(copy: Path, value: object) -> None:
    _set_format(copy / "run" / "asked.json", value)
    said = "no format" if value is None else f"format {value}"
    for command in (
        ["fit", "--store", copy / "s.zarr", "--run", copy / "run", *QUICK, *SPLIT],
        ["eval", copy / "run", "--device", "cpu"],
        ["routers", copy / "run"],
    ):
        line = _refused(*command)
        assert BEFORE in line and said in line and str(copy / "run" / "asked.json") in line, line


def test_a_run_written_before_cells_is_refused(copy: Path) -> None:
    """A run folder of the format before cells (config.json, metrics.json, task files at the top, no
    asked.json) is refused in one line that says what to do, by every command, never written over."""
    run = copy / "run"
    (run / "asked.json").rename(run / "config.json")
    for name in ("measured.json", "done.json"):
        (run / name).unlink()
    for state in (run / "state").iterdir():
        state.rename(run / state.name)
    (run / "state").rmdir()
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    for command in (
        ["fit", "--store", copy / "s.zarr", "--run", run, *QUICK, *SPLIT],
        ["eval", run, "--device", "cpu"],
        ["routers", run],
        ["predict", run, copy / "x.jpg"],
    ):
        line = _refused(*command)
        assert "was written before runs were kept as cells" in line and str(run) in line, line
        assert "delete it and fit it again" in line, line
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before


@pytest.mark.parametrize("value", OLD)
def test_a_sweep_written_before_the_first_release_is_refused(copy: Path, value: object) -> None:
    sweep = ["sweep", "--store", copy / "s.zarr", "--out", copy / "sweep", "--jobs", "1", *QUICK, *SPLIT]
    _set_format(copy / "sweep" / "sweep.json", value)
    line = _refused(*sweep)
    assert BEFORE in line and "sweep.json" in line, line


def test_a_sweep_written_before_its_points_were_cells_is_refused(copy: Path) -> None:
    """results.csv as truth with outcomes/KEY.safetensors, no points/ (issue 54): one line saying
    what to do, and nothing written over."""
    sweep = copy / "sweep"
    (sweep / "outcomes").mkdir()
    for point in sorted((sweep / "points").iterdir()):
        shutil.move(point / "outcomes.safetensors", sweep / "outcomes" / f"{point.name}.safetensors")
    shutil.rmtree(sweep / "points")
    results = (sweep / "results.csv").read_bytes()
    line = _refused("sweep", "--store", copy / "s.zarr", "--out", sweep, "--jobs", "1", *QUICK, *SPLIT)
    assert "was written before sweep points were kept as cells" in line and "pass another --out" in line, line
    assert (sweep / "results.csv").read_bytes() == results and not (sweep / "points").exists()


def test_a_baselines_folder_written_before_cells_is_refused(copy: Path) -> None:
    """A baseline kept as a metrics.json (figures stored, no cell) is refused in one line that says
    what to do, and never written over."""
    folder = copy / "baselines" / "simplecil"
    for name in ("asked.json", "measured.json", "done.json"):
        (folder / name).unlink()
    before = (folder / "metrics.json").read_bytes()
    line = _refused(
        *("baselines", "--store", copy / "s.zarr", "--no-tosca", "--methods", "simplecil"),
        *("--out", copy / "baselines", *SPLIT),
    )
    assert "written before baselines were kept as cells" in line and str(folder) in line, line
    assert "delete it and run the baselines again" in line, line
    assert (folder / "metrics.json").read_bytes() == before  # never written over


@pytest.mark.parametrize("value", OLD)
def test_a_suite_written_before_the_first_release_is_refused(copy: Path, value: object) -> None:
    _set_format(copy / "suite" / "manifest.json", value)
    line = _refused("suite", copy / "SUITE.toml", "--out", copy / "suite", "--jobs", "1", "--device", "cpu")
    assert BEFORE in line and "manifest.json" in line, line


def test_a_store_written_before_the_first_release_is_refused(copy: Path) -> None:
    """A store without the record of the files each chunk came from (tosca 0.1's had none) or
    without checksums (the builds before those)."""
    store = copy / "s.zarr"
    shutil.rmtree(store / "train" / "sources")
    for command in (
        ["cache", "info", store],
        ["fit", "--store", store, "--run", copy / "new", *QUICK, *SPLIT],
    ):
        line = _refused(*command)
        assert BEFORE in line and "train/sources" in line and "re-extract it" in line, line
    assert not (copy / "new").exists()


@pytest.mark.parametrize("file", ["run/outcomes.safetensors", "run/measured.json"])
def test_a_file_inside_a_run_written_before_the_first_release_is_refused(copy: Path, file: str) -> None:
    path = copy / file
    if path.suffix == ".json":
        _set_format(path, 4)
    else:
        tensors, meta = read_safetensors(path, lambda header: None)
        atomic.write_safetensors(path, tensors, {**meta, "format": "4"})
    with pytest.raises(UserError, match="is not the file that was written"):
        read_run(copy / "run")  # its digest first
    redigest(copy / "run")
    with pytest.raises(UserError, match=BEFORE):
        read_run(copy / "run")


@pytest.mark.parametrize(
    ("path", "command"),
    [
        ("run/asked.json", lambda root: ["routers", root / "run"]),
        ("run/asked.json", lambda root: ["eval", root / "run", "--device", "cpu"]),
        (
            "sweep/sweep.json",
            lambda root: ["sweep", "--store", root / "s.zarr", "--out", root / "sweep", *QUICK, *SPLIT],
        ),
        (
            "suite/manifest.json",
            lambda root: ["suite", root / "SUITE.toml", "--out", root / "suite", "--device", "cpu"],
        ),
    ],
)
def test_a_file_of_a_newer_format_is_refused_in_one_line(
    copy: Path, path: str, command: Callable[[Path], list[object]]
) -> None:
    _set_format(copy / path, 5)
    line = _refused(*command(copy))
    assert "newer tosca" in line and "upgrade tosca" in line, line


@pytest.mark.parametrize("value", ["4", True, 1.5, -1, [1]])
def test_a_format_that_is_no_whole_number_is_an_edited_file(copy: Path, value: object) -> None:
    _set_format(copy / "run" / "asked.json", value)
    line = _refused("eval", copy / "run", "--device", "cpu")
    assert "was edited or damaged" in line and BEFORE not in line, line


class FirstModule(Router):
    name = "first_module"
    summary = "always task 0's module (a router added after the sweep began)"

    def route(self, view: StageView) -> torch.Tensor:
        return torch.zeros(view.entropy.shape[0], view.entropy.shape[2], dtype=torch.long)


def test_adding_a_router_does_not_stop_a_sweep_from_resuming(tmp_path: Path) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=4)
    sweep = ["sweep", "--store", store.path, "--epochs", "1", "--jobs", "1", "--out", tmp_path / "sw"]
    _run(*sweep, "--r", "2,4", "--init-cls", "2", "--increment", "2", "--device", "cpu")
    ROUTERS.add(FirstModule.name, FirstModule(), FirstModule.summary, module=__name__)
    try:
        grown = _run(*sweep, "--r", "2,4,8", "--init-cls", "2", "--increment", "2", "--device", "cpu")
    finally:
        del ROUTERS[FirstModule.name]
    assert "1 run(s)" in grown and "2 already done" in grown
    long = pd.read_csv(tmp_path / "sw" / "results.csv", keep_default_na=False, na_values=[""])
    per_point = long.groupby("r")["router"].apply(set)
    assert (
        per_point[8] == {*resolve_routers(None), FirstModule.name}
        and FirstModule.name not in per_point[2] | per_point[4]
    )
    assert (long.groupby("key")["split"].count() == 2 * long.groupby("key")["router"].nunique()).all()
    assert "| 8 |" in (tmp_path / "sw" / "summary.md").read_text()  # the tables are rebuilt with it


@pytest.mark.parametrize(
    ("gone", "command", "said"),
    [
        (
            "run/outcomes.safetensors",
            lambda root: ["routers", root / "run"],
            "delete the run and fit it again",
        ),
        (
            "sweep/points",
            lambda root: ["sweep", "--store", root / "s.zarr", "--out", root / "sweep", *QUICK, *SPLIT],
            "delete the point's folder (points/KEY) to compute it again",
        ),
        (
            "suite/cells",
            lambda root: ["suite", root / "SUITE.toml", "--out", root / "suite", "--device", "cpu"],
            "",
        ),
    ],
)
def test_answers_deleted_from_a_folder_are_one_line_never_figures_without_intervals(
    copy: Path, gone: str, command: Callable[[Path], list[object]], said: str
) -> None:
    """Every run, baseline and sweep point keeps its per-image answers: one deleted is named, with
    what rewrites it; its figures are never shown as if they had none."""
    found = sorted((copy / gone).rglob("outcomes.safetensors") if (copy / gone).is_dir() else [copy / gone])
    found = found or sorted((copy / gone).glob("*.safetensors"))
    found[0].unlink()
    line = _refused(*command(copy))
    assert f"{found[0]} is missing" in line and said in line, line
