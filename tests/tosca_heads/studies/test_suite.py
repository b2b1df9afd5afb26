"""`tosca suite`: every cell equals its single command, a killed suite resumes to the same tables
with its finished cells untouched, missing cells are said, the suite format is checked in one
line, and the paper preset runs on stand-in stores."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shlex
import shutil
from pathlib import Path

import pandas as pd
import pytest
from support.crash_harness import PauseAt, start
from support.stores import synthetic_store
from typer.testing import CliRunner

from cli import app
from tosca_foundation.errors import UserError
from tosca_heads.method.baseline_registry import BASELINES
from tosca_heads.studies.suite import load_suite, parse_suite, run_suite
from tosca_heads.studies.suite.cells import plan_cells
from tosca_heads.studies.suite.presets import PAPER_BENCHMARKS, preset
from tosca_heads.studies.suite.spec import with_stores

RUNNER = CliRunner()
SUITE = """
name = "tiny"
seeds = [0, 1]
[tosca]
routers = ["entropy", "lda", "batch", "oracle"]
flags = {{ epochs = 2, batch_size = 8 }}
[baselines]
methods = {baselines}
ranpac_projection_dim = 64
[ablation]
flows = {flows}
l1_off = true
[[stores]]
name = "A"
path = "a.zarr"
init_cls = 2
increment = 2
"""


def _suite(
    folder: Path, baselines: str = '["simplecil", "ranpac"]', flows: str = '["tosca", "tosca_r"]'
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "a.zarr").exists():
        synthetic_store(folder / "a.zarr", classes=6, per_class=16, test_per_class=8, spread=1.0)
    path = folder / "SUITE.toml"
    path.write_text(SUITE.format(baselines=baselines, flows=flows))
    return path


def _run(*args: object) -> str:
    result = RUNNER.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.heavy
def test_each_cell_equals_its_single_command(tmp_path: Path) -> None:
    path = _suite(tmp_path)
    result = run_suite(load_suite(path), tmp_path / "out", device="cpu")
    assert not result.missing and {c.status for c in result.cells} == {"ran"}
    for state in result.cells:
        args = shlex.split(state.command)[1:]
        alone = tmp_path / "alone" / state.cell.key.replace("/", "_")
        where = args.index("--run" if state.cell.kind == "tosca" else "--out") + 1
        args[where] = str(alone)
        _run(*args)
        if state.cell.kind == "tosca":
            mine = json.loads((state.folder / "metrics.json").read_text())["routers"]
            single = json.loads((alone / "metrics.json").read_text())["routers"]
        else:
            mine = json.loads((state.folder / "metrics.json").read_text())["routers"]
            single = json.loads((alone / state.cell.method / "metrics.json").read_text())["routers"]
        assert mine == single, state.cell.key  # exactly: the same numbers, not close ones
    table = result.tables.table
    entropy = table[(table.method == "tosca:entropy") & (table.metric == "A_last")].iloc[0]
    seeds = [
        json.loads((s.folder / "metrics.json").read_text())["routers"]["entropy"]["A_last"]
        for s in result.cells
        if s.cell.kind == "tosca" and s.cell.flow == "tosca" and s.cell.l1 > 0
    ]
    assert entropy["n"] == 2 and entropy["mean"] == pytest.approx(sum(seeds) / 2)


def _digests(folder: Path) -> dict[str, tuple[str, int]]:
    return {
        str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.mark.heavy  # 11 s of kills and reruns
def test_a_killed_suite_resumes_to_the_same_tables_with_finished_cells_untouched(tmp_path: Path) -> None:
    path = _suite(tmp_path)
    out = tmp_path / "killed"
    args = ["suite", str(path), "--out", str(out), "--device", "cpu", "--jobs", "1"]
    pause = PauseAt(function="tosca_heads.running.executor:run_work", occurrence=4)
    child = start(args, tmp_path / "child", pause)
    child.wait_paused()
    child.kill()
    finished = sorted(m.parent for m in (out / "cells").rglob("done.json"))
    assert len(finished) == 3, finished  # three jobs done, the fourth paused before it began
    before = {p: _digests(p) for p in finished}
    assert not (out / "table.csv").exists()
    resumed = _run(*args)
    assert "6 cell(s) run" in resumed and "3 already done" in resumed, resumed[-400:]
    for folder, digests in before.items():
        assert _digests(folder) == digests, f"{folder} was recomputed"
    calm = tmp_path / "calm"
    _run("suite", str(path), "--out", str(calm), "--device", "cpu", "--jobs", "1")
    columns = ["method", "store", "metric", "mean", "std", "n", "expected"]
    pd.testing.assert_frame_equal(
        pd.read_csv(out / "table.csv")[columns], pd.read_csv(calm / "table.csv")[columns]
    )
    assert (out / "ablation.md").read_text() == (calm / "ablation.md").read_text()
    assert (out / "claims.md").read_text() == (calm / "claims.md").read_text()


@pytest.mark.heavy
def test_missing_cells_are_said_never_averaged_away(tmp_path: Path) -> None:
    path = _suite(tmp_path, flows="[]")
    spec = load_suite(path)
    out = tmp_path / "out"
    full = run_suite(spec, out, device="cpu")
    ranpac_seed1 = next(s for s in full.cells if s.cell.method == "ranpac" and s.cell.seed == 1)
    tosca_seeds = [s for s in full.cells if s.cell.kind == "tosca"]
    for state in (ranpac_seed1, *tosca_seeds):
        (state.folder / "done.json").unlink()  # cells never finished
    partial = run_suite(spec, out, device="cpu", tables_only=True)
    assert sorted(partial.missing) == sorted(s.cell.key for s in (ranpac_seed1, *tosca_seeds))
    text = (out / "table.md").read_text()
    assert "(n=1 of 2)" in text  # RanPAC: one of its two seeds
    assert "| TOSCA (entropy) | missing | missing |" in text
    table = partial.tables.table
    ranpac = table[(table.method == "ranpac") & (table.metric == "A_last")].iloc[0]
    assert ranpac["n"] == 1 and ranpac["expected"] == 2
    assert "not measured" in (out / "claims.md").read_text()  # no TOSCA cells: nothing to check


def test_the_dry_run_lists_the_plan_and_writes_nothing(tmp_path: Path) -> None:
    path = _suite(tmp_path)
    output = _run("suite", str(path), "--out", str(tmp_path / "out"), "--device", "cpu", "--dry-run")
    assert "to run" in output and "min here" in output and "tosca-tosca-l1=0-seed1-order1993" in output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('name = "x"\n', "names no [[stores]]"),
        ('bogus = 1\n[[stores]]\nname = "A"\npath = "a.zarr"\n', "unknown key 'bogus'"),
        (
            '[tosca]\nrouters = ["psychic"]\n[[stores]]\nname = "A"\npath = "a.zarr"\n',
            "unknown tosca.routers entry 'psychic'",
        ),
        (
            '[baselines]\nmethods = ["ewc"]\n[[stores]]\nname = "A"\npath = "a.zarr"\n',
            "unknown baselines.methods entry 'ewc'",
        ),
        (
            '[ablation]\nflows = ["backwards"]\n[[stores]]\nname = "A"\npath = "a.zarr"\n',
            "unknown ablation.flows entry 'backwards'",
        ),
        (  # a baseline's own parameter, checked as its class declares it (baseline_registry.Param)
            '[baselines]\nranpac_projection_dim = 0\n[[stores]]\nname = "A"\npath = "a.zarr"\n',
            "baselines.ranpac_projection_dim must be at least 1, got 0",
        ),
        (  # inf passes an Interval without a high bound (issue 57, point 1): refused as the command line does
            '[baselines]\nacil_gamma = inf\n[[stores]]\nname = "A"\npath = "a.zarr"\n',
            "baselines.acil_gamma must be a finite number more than 0, got inf",
        ),
        (
            '[baselines]\nds_al_compensation = -inf\n[[stores]]\nname = "A"\npath = "a.zarr"\n',
            "baselines.ds_al_compensation must be a finite number at least 0, got -inf",
        ),
        (
            '[baselines]\nranpac_projection_dim = "big"\n[[stores]]\nname = "A"\npath = "a.zarr"\n',
            "baselines.ranpac_projection_dim must be an integer, got 'big'",
        ),
        (  # its seed is the suite's seeds
            '[baselines]\nranpac_seed = 3\n[[stores]]\nname = "A"\npath = "a.zarr"\n',
            "baselines.ranpac_seed is not set here: each cell's seed is one of the suite's `seeds`",
        ),
        (
            '[baselines]\nranpac_projection_dims = 3\n[[stores]]\nname = "A"\npath = "a.zarr"\n',
            "unknown baselines.ranpac_projection_dims (did you mean 'baselines.ranpac_projection_dim'?)",
        ),
        ('[tosca]\nflags = { lr = -1.0 }\n[[stores]]\nname = "A"\npath = "a.zarr"\n', "--lr must be > 0"),
        (
            '[tosca]\nflags = { seed = 3 }\n[[stores]]\nname = "A"\npath = "a.zarr"\n',
            "unknown tosca.flags entry 'seed'",
        ),
        ('seeds = ["one"]\n[[stores]]\nname = "A"\npath = "a.zarr"\n', "seeds holds 'one'"),
        (
            '[tosca]\nprimary = "oracle"\n[[stores]]\nname = "A"\npath = "a.zarr"\n',
            "tosca.primary 'oracle' is a reference router (told the task): a reference is never the suite's primary",
        ),
        (
            '[tosca]\nprimary = "batch"\n[[stores]]\nname = "A"\npath = "a.zarr"\n',
            "tosca.primary 'batch' is a reference router",
        ),
        (
            '[tosca]\nprimary = 3\n[[stores]]\nname = "A"\npath = "a.zarr"\n',
            "tosca.primary must be a router's name",
        ),
        ('[[stores]]\nname = "A"\n', "has neither a path nor model + dataset"),
        (
            '[[stores]]\nname = "A"\npath = "a.zarr"\n[[stores]]\nname = "A"\npath = "a.zarr"\n',
            "two stores are named 'A'",
        ),
        ('[[stores]]\nname = "A"\npath = "a.zarr"\ninit_cls = 4\nincrement = 4\n', "store 'A' (6 classes)"),
        ('[[stores]]\nname = "A"\npath = "nowhere.zarr"\n', "is not a tosca store"),
        ('val_fraction = 0.9\n[[stores]]\nname = "A"\npath = "a.zarr"\n', "val_fraction must be in [0, 0.5]"),
        (
            'val_fraction = "a tenth"\n[[stores]]\nname = "A"\npath = "a.zarr"\n',
            "val_fraction must be a number",
        ),
        ('val_seed = -3\n[[stores]]\nname = "A"\npath = "a.zarr"\n', "val_seed must be an integer"),
        ("[[stores\n", "is not valid TOML"),
        # the one scenario of a suite (issue 56 points 1 and 5)
        (
            'scenario = "fscl"\n[[stores]]\nname = "A"\npath = "a.zarr"\n',
            "unknown scenario 'fscl' (did you mean 'fscil'?)",
        ),
        ('scenario = ""\n[[stores]]\nname = "A"\npath = "a.zarr"\n', "unknown scenario ''"),
        (
            'scenario = 3\n[[stores]]\nname = "A"\npath = "a.zarr"\n',
            "scenario must be a scenario's name, got 3",
        ),
        (
            'scenario = ["cil", "til"]\n[[stores]]\nname = "A"\npath = "a.zarr"\n',
            "a suite's tables never mix scenarios (write a suite per scenario)",
        ),
        # a suite of another scenario (issue 56): what only the class-incremental suite has, one line
        (
            'scenario_values = { shots = 5 }\n[[stores]]\nname = "A"\npath = "a.zarr"\n',
            "scenario_values and read_as are for a scenario other than cil",
        ),
        (
            'scenario = "fscil"\nscenario_values = { shots = 0 }\n[[stores]]\nname = "A"\npath = "a.zarr"\n',
            "fscil shots must be at least 1, got 0",
        ),
        (
            'scenario = "fscil"\nscenario_values = { shot = 5 }\n[[stores]]\nname = "A"\npath = "a.zarr"\n',
            "scenario fscil takes no parameter 'shot'",
        ),
        (
            'scenario = "fscil"\nscenario_values = 5\n[[stores]]\nname = "A"\npath = "a.zarr"\n',
            "scenario_values must be a table",
        ),
        (
            'scenario = "til"\n[ablation]\nflows = ["adapter"]\n[[stores]]\nname = "A"\npath = "a.zarr"\n',
            "ablation is for class-incremental suites",
        ),
        (
            'scenario = "til"\norder_seeds = [1, 2]\n[[stores]]\nname = "A"\npath = "a.zarr"\n',
            "order_seeds is for class-incremental suites",
        ),
        (
            'scenario = "til"\nval_fraction = 0.1\n[[stores]]\nname = "A"\npath = "a.zarr"\n',
            "val_fraction is for class-incremental suites",
        ),
        (
            'scenario = "til"\n[tosca]\nrouters = ["lda", "oracle"]\n[[stores]]\nname = "A"\npath = "a.zarr"\n',
            "tosca.routers 'oracle' is a reference",
        ),
        (
            'scenario = "fscil"\n[[stores]]\nname = "A"\npath = "a.zarr"\ninit_cls = 2\n',
            "store 'A': init_cls does not apply to scenario fscil",
        ),
        (
            'scenario = "dil"\n[[stores]]\nname = "A"\npath = "a.zarr"\n',
            "store 'A': dil needs a store with a domain per image",
        ),
        (
            'scenario = "fscil"\nscenario_values = { base_classes = 2, ways = 2, sessions = 1, shots = 30 }\n[[stores]]\nname = "A"\npath = "a.zarr"\n',
            "fscil: class 2 has 20 training images, fewer than the 30 shots",
        ),
        (
            'scenario = "til"\n[[stores]]\nname = "A"\npath = "a.zarr"\nread_as = 3\n',
            "read_as must be a string, got 3",
        ),
        (
            'scenario = "til"\n[[stores]]\nname = "A"\npath = "a.zarr"\nread_as = "cifar100_superclasses"\n',
            "cannot be read as cifar100_superclasses",
        ),
    ],
)
def test_a_bad_suite_is_one_line(tmp_path: Path, toml: str, message: str) -> None:
    synthetic_store(tmp_path / "a.zarr", classes=6)
    (tmp_path / "SUITE.toml").write_text(toml)
    result = RUNNER.invoke(
        app, ["suite", str(tmp_path / "SUITE.toml"), "--out", str(tmp_path / "out"), "--device", "cpu"]
    )
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--preset", "fantasy"], "unknown --preset 'fantasy': use one of small, local, paper"),
        ([], "give a suite file"),
        (["SUITE.toml", "--preset", "local"], "not both or neither"),
        (["missing.toml"], "suite file missing.toml is missing"),
        (["--preset", "local", "--jobs", "0"], "--jobs must be at least 1"),
    ],
)
def test_a_bad_suite_command_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "SUITE.toml").write_text('[[stores]]\nname = "A"\npath = "a.zarr"\n')
    result = RUNNER.invoke(app, ["suite", *args])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines


@pytest.mark.heavy
def test_the_paper_preset_runs_on_stand_in_stores(tmp_path: Path) -> None:
    """The paper's six benchmarks with their class counts and splits, as tiny random stores: the
    preset's plan, cells, tables and claims, at one seed and two flows to stay quick."""
    classes = {
        "cifar100": 100,
        "cub200": 200,
        "imagenet_r": 200,
        "imagenet_a": 200,
        "omnibenchmark": 300,
        "vtab": 50,
    }
    spec = parse_suite(preset("paper"), tmp_path)
    assert [s.name for s in spec.stores] == [name for name, _ in PAPER_BENCHMARKS]
    assert all(s.model == "vit_b16" and s.weights == "IN-21k" for s in spec.stores)
    assert (
        spec.seeds == (0, 1, 2)
        and set(spec.flows) == {"tosca", "tosca_r", "adapter", "calibrator"}
        and spec.l1_off
    )
    stand_ins = {
        name: synthetic_store(
            tmp_path / f"{dataset}.zarr", classes=classes[dataset], per_class=2, test_per_class=1, dim=16
        ).path
        for name, dataset in PAPER_BENCHMARKS
    }
    quick = dataclasses.replace(
        with_stores(spec, stand_ins),
        seeds=(0,),
        flows=("tosca", "tosca_r"),
        l1_off=(),
        baseline_params={  # every registered baseline runs (the preset's `all`), each one small
            "ranpac_projection_dim": 32,
            "klda_dim": 64,
            "klda_ensemble_dim": 32,
            "randumb_dim": 64,
            "acil_buffer_size": 64,
            "gacl_buffer_size": 64,
            "ds_al_buffer_size": 64,
            "loranpac_embedding_dim": 64,
            "loranpac_rank": 32,
        },
        flags={"epochs": 1},
    )
    assert set(quick.baselines) == set(BASELINES)
    result = run_suite(quick, tmp_path / "out", device="cpu")
    assert not result.missing
    table = result.tables.table
    assert set(table.store) == set(stand_ins) and (table.n == table.expected).all()
    tasks = {
        s.name: json.loads((c.folder / "metrics.json").read_text())["finished_tasks"]
        for s in quick.stores
        for c in result.cells
        if c.cell.store == s.name and c.cell.kind == "tosca"
    }
    assert tasks == {
        "CIFAR-100": 20,
        "CUB-200": 20,
        "ImageNet-R": 10,
        "ImageNet-A": 10,
        "OmniBenchmark": 10,
        "VTAB": 5,
    }
    assert "IN-21k" in (tmp_path / "out" / "table.md").read_text()


def test_a_store_name_that_the_suite_lacks_is_refused() -> None:
    spec = parse_suite(preset("paper"), Path("."))
    with pytest.raises(UserError, match="no store 'MNIST' in suite 'paper'"):
        with_stores(spec, {"MNIST": Path("x")})


@pytest.mark.heavy
def test_a_finished_run_elsewhere_with_the_same_configuration_is_reused(tmp_path: Path) -> None:
    path = _suite(tmp_path, baselines="[]", flows="[]")
    spec = load_suite(path)
    first = run_suite(spec, tmp_path / "runs" / "first", device="cpu", runs_root=tmp_path / "runs")
    again = run_suite(
        spec, tmp_path / "second", device="cpu", runs_root=tmp_path / "runs" / "first" / "cells" / "A"
    )
    assert {c.status for c in again.cells} == {"reused"}
    assert [c.folder for c in again.cells] == [c.folder for c in first.cells]
    pd.testing.assert_frame_equal(again.tables.table, first.tables.table)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p.mkdir(), "is a folder, not a file"),
        (lambda p: p.write_bytes(b"\xff\xfe\x00binary"), "cannot read suite file"),
        (lambda p: p.write_text('name = "a|b"\n[[stores]]\nname = "A"\npath = "a.zarr"\n'), "without | or `"),
        (lambda p: p.write_text('[[stores]]\nname = "A\\nB"\npath = "a.zarr"\n'), "one printable line"),
        (
            lambda p: p.write_text('[[stores]]\nname = "A"\npath = "a.zarr"\nweights = 3\n'),
            "weights must be a string",
        ),
    ],
)
def test_a_hostile_suite_file_is_one_line(tmp_path: Path, make: object, message: str) -> None:
    path = tmp_path / "SUITE.toml"
    make(path)  # type: ignore[operator]
    result = RUNNER.invoke(app, ["suite", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines


def test_a_suite_folder_that_is_something_else_is_refused(tmp_path: Path) -> None:
    path = _suite(tmp_path, baselines="[]", flows="[]")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    for out in (tmp_path / "taken", tmp_path / "a.zarr" / "inside", path):
        result = RUNNER.invoke(app, ["suite", str(path), "--out", str(out), "--device", "cpu"])
        assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert (tmp_path / "taken" / "notes.txt").read_text() == "mine"


@pytest.mark.heavy
def test_cells_on_two_worker_processes_give_the_same_tables(
    tmp_path: Path, planted_working_folder: Path
) -> None:
    path = _suite(tmp_path, baselines='["simplecil"]', flows="[]")
    spec = load_suite(path)
    alone = run_suite(spec, tmp_path / "one", jobs=1, device="cpu")
    spread = run_suite(spec, tmp_path / "two", jobs=2, device="cpu")
    assert {c.status for c in spread.cells} == {"ran"}
    columns = ["method", "store", "metric", "mean", "std", "n"]
    pd.testing.assert_frame_equal(spread.tables.table[columns], alone.tables.table[columns])
    # the workers imported nothing from the working folder (a planted multiprocessing.py)
    assert not planted_working_folder.exists(), planted_working_folder.read_text()


def test_baselines_sharing_a_folder_find_it_claimed_before_any_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A seed's baselines write one folder from several workers at once: the suite claims it first,
    so no worker meets another's half-written marker (which read as a stranger's file and stopped
    the suite)."""
    from tosca_foundation.folders import marked_kind
    from tosca_heads.running import executor

    seen: list[bool] = []
    run = executor.Executor.run

    def checking(self: executor.Executor, works: list, *args: object, **kwargs: object) -> object:
        seen.extend(
            marked_kind(Path(w.baseline_folder).parent) == "baselines" for w in works if w.baseline_folder
        )
        return run(self, works, *args, **kwargs)

    monkeypatch.setattr(executor.Executor, "run", checking)
    spec = load_suite(_suite(tmp_path, flows="[]"))
    run_suite(spec, tmp_path / "out", jobs=1, device="cpu")
    baselines = [c for c in plan_cells(spec) if c.kind == "baseline"]
    assert len(seen) == len(baselines) >= 2 and all(seen)


def test_store_names_that_would_share_a_cells_folder_are_refused(tmp_path: Path) -> None:
    for first, second in (("x y", "x-y"), ("É", "名前"), ("A", "a")):
        stores = [{"name": n, "path": "a.zarr"} for n in (first, second)]
        with pytest.raises(UserError, match="would share the cells folder"):
            parse_suite({"stores": stores}, tmp_path)
    spec = parse_suite({"stores": [{"name": "..", "path": "a.zarr"}]}, tmp_path)
    cell = plan_cells(spec)[0]
    assert cell.folder(tmp_path / "out").parent == tmp_path / "out" / "cells" / "store"


@pytest.mark.heavy
def test_a_suite_changed_since_its_cells_were_made_stops_before_running_anything(tmp_path: Path) -> None:
    path = _suite(tmp_path, baselines='["simplecil"]', flows="[]")
    out = tmp_path / "out"
    run_suite(load_suite(path), out, device="cpu")
    before = _digests(out / "cells")
    path.write_text(path.read_text().replace("epochs = 2", "epochs = 3"))
    changed = load_suite(path)
    with pytest.raises(UserError, match=r"was made with another configuration \(train.epochs: 2 -> 3"):
        run_suite(changed, out, device="cpu")
    assert _digests(out / "cells") == before  # not even the baselines were recomputed
    plan = run_suite(changed, out, device="cpu", dry_run=True)
    assert {c.status for c in plan.cells if c.cell.kind == "tosca"} == {"changed"}
    assert {c.status for c in plan.cells if c.cell.kind == "baseline"} == {"done"}
    tables = run_suite(changed, out, device="cpu", tables_only=True)  # what is done, the rest missing
    assert len(tables.missing) == 4 and "missing" in (out / "table.md").read_text()


@pytest.mark.heavy
def test_a_finished_cell_with_a_task_file_deleted_or_damaged_is_trained_again_or_said(tmp_path: Path) -> None:
    path = _suite(tmp_path, baselines="[]", flows="[]")
    spec = load_suite(path)
    out = tmp_path / "out"
    first = run_suite(spec, out, device="cpu")
    cell = first.cells[0]
    state = cell.folder / "state"
    (state / "task_001.safetensors").unlink()  # a finished cell damaged: said, never written over
    with pytest.raises(UserError, match=r"task_001\.safetensors is missing \(deleted\?\)"):
        run_suite(spec, out, device="cpu")
    (cell.folder / "done.json").unlink()  # a cell never finished (killed): trained again from its state
    again = run_suite(spec, out, device="cpu")
    assert [c.status for c in again.cells] == ["ran"] + ["done"] * (len(again.cells) - 1)
    pd.testing.assert_frame_equal(again.tables.table, first.tables.table)
    (state / "task_001.safetensors").write_bytes(b"\x10\x00\x00")
    with pytest.raises(UserError, match=r"task_001\.safetensors is not the file that was written"):
        run_suite(spec, out, device="cpu", tables_only=True)
    (cell.folder / "done.json").unlink()
    shutil.copy(state / "task_000.safetensors", state / "task_001.safetensors")
    with pytest.raises(UserError, match="written for task 0"):  # read with every check of `tosca eval`
        run_suite(spec, out, device="cpu")


@pytest.mark.heavy
def test_the_l1_claim_is_not_measured_at_l1_zero_and_old_ablation_files_go(tmp_path: Path) -> None:
    path = _suite(tmp_path, baselines="[]", flows='["tosca_r"]')
    out = tmp_path / "out"
    run_suite(load_suite(path), out, device="cpu")
    assert (out / "ablation.md").exists() and (out / "ablation.tex").exists()
    without = path.read_text().replace('[ablation]\nflows = ["tosca_r"]\nl1_off = true\n', "")
    path.write_text(without)
    result = run_suite(load_suite(path), out, device="cpu")  # the same folder, no ablation now
    assert {c.status for c in result.cells} == {"done"}
    assert not (out / "ablation.md").exists() and not (out / "ablation.tex").exists()
    path.write_text(without.replace("epochs = 2,", "epochs = 2, l1 = 0.0,") + "[ablation]\nl1_off = true\n")
    zero = run_suite(load_suite(path), tmp_path / "zero", device="cpu")
    assert zero.tables.claims[0].verdict == "not measured"  # L1 = 0 against itself is no test


def test_a_dry_run_plans_stores_not_extracted_yet_and_speaks_json(tmp_path: Path) -> None:
    path = _suite(tmp_path, baselines='["simplecil"]', flows="[]")
    text = (
        path.read_text()
        + '[[stores]]\nname = "B"\nmodel = "effnet_lite0"\ndataset = "eurosat"\npath = "b.zarr"\n'
    )
    path.write_text(text)
    output = _run(
        "suite", str(path), "--out", str(tmp_path / "out"), "--device", "cpu", "--dry-run", "--json"
    )
    plan = json.loads(output)
    status = {(c["store"], c["status"]) for c in plan["cells"]}
    assert status == {("A", "missing"), ("B", "to extract")} and plan["estimate_seconds"] > 0
    said = _run("suite", str(path), "--out", str(tmp_path / "out"), "--device", "cpu", "--dry-run")
    assert "5 waiting for their store to be extracted" in said and not (tmp_path / "out").exists()
    assert "missing store B: data for eurosat: none given does not exist" in " ".join(said.split())


ROUTER_PLUGIN = """
import torch
from tosca_heads.routers import Router, register_router

@register_router
class Newest(Router):
    name = "test_suite_newest"
    def route(self, view):
        groups, modules, n = view.entropy.shape
        return torch.full((groups, n), modules - 1, dtype=torch.long)
"""


@pytest.mark.heavy
def test_a_plug_in_router_reaches_the_worker_processes_and_cells_made_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from tosca_foundation.plugins import load_plugins
    from tosca_heads.routers import ROUTERS

    path = _suite(tmp_path, baselines="[]", flows="[]")
    out = tmp_path / "out"
    run_suite(load_suite(path), out, device="cpu")  # before the plug-in
    (tmp_path / "plug").mkdir()
    (tmp_path / "plug" / "suite_newest.py").write_text(ROUTER_PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path / "plug"))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(tmp_path / "plug"), os.environ.get("PYTHONPATH", "")])
    )
    monkeypatch.setenv("TOSCA_PLUGINS", "suite_newest")
    try:
        load_plugins()
        path.write_text(path.read_text().replace('"oracle"]', '"oracle", "test_suite_newest"]'))
        spec = load_suite(path)
        again = run_suite(spec, out, device="cpu")  # the finished cells are evaluated again
        assert {c.status for c in again.cells} == {"ran"}
        spread = run_suite(spec, tmp_path / "two", jobs=2, device="cpu")  # on worker processes
        for result in (again, spread):
            rows = result.tables.table[result.tables.table.method == "tosca:test_suite_newest"]
            assert len(rows) and rows["n"].min() == 2
    finally:
        if "test_suite_newest" in ROUTERS:
            del ROUTERS["test_suite_newest"]
        sys.modules.pop("suite_newest", None)


def test_a_dry_run_refuses_what_the_real_run_refuses(tmp_path: Path) -> None:
    """One check of what the cells would allocate for both: a dry run does not pass a RanPAC of
    M = 10^12 that the real run refuses."""
    path = _suite(tmp_path, baselines='["ranpac"]', flows="[]")
    path.write_text(
        path.read_text().replace("ranpac_projection_dim = 64", "ranpac_projection_dim = 1000000000000")
    )
    said = []
    for extra in (["--dry-run"], []):
        result = RUNNER.invoke(
            app, ["suite", str(path), "--out", str(tmp_path / "out"), "--device", "cpu", *extra]
        )
        assert result.exit_code == 2, result.output
        # the memory free moves between the two calls (other processes): the same line otherwise
        said.append(re.sub(r"[\d.]+ GiB \(80%", "N GiB (80%", result.output.strip()))
    assert said[0] == said[1] and said[0].startswith("error: RanPAC with M = 1,000,000,000,000 would need")
    assert len(said[0].splitlines()) == 1 and not (tmp_path / "out").exists()


def test_a_suite_saying_cil_is_the_suite_saying_nothing(tmp_path: Path) -> None:
    """`scenario = "cil"` (issue 56: the default, nothing changes for it) asks exactly what a suite
    without the key asks; an alias of cil is its name."""
    stores = {"stores": [{"name": "A", "path": "a.zarr"}]}
    plain = parse_suite(stores, tmp_path)
    said = parse_suite({**stores, "scenario": "cil"}, tmp_path)
    assert said == plain and said.scenario == "cil"
