"""`tosca baselines --scenario NAME` (issue 56 point 1): the scenario's figures are those of the one
scenario path (`run_scenario`), each method kept as a cell naming the scenario and reused only when
asked the same, a cell of another scenario never; `cil` is today's table, byte for byte; a method
or a flag that does not fit the scenario is one line before anything is written."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from support.stores import synthetic_store
from typer.testing import CliRunner

import tosca_heads
from cli import app
from featcache.store import FeatureStore
from tosca_foundation.errors import UserError
from tosca_heads.applied import scenario_runs
from tosca_heads.applied.scenario_runs import run_scenario
from tosca_heads.records import cell

FSCIL = {"base_classes": 2, "ways": 2, "shots": 5, "sessions": 2}
RANPAC = {"ranpac_projection_dim": 64}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> FeatureStore:
    return synthetic_store(
        tmp_path_factory.mktemp("s") / "s.zarr", classes=6, per_class=20, test_per_class=10, spread=1.6
    )


def test_til_figures_are_the_scenario_paths_and_each_cell_names_its_scenario(
    store: FeatureStore, tmp_path: Path
) -> None:
    out = tmp_path / "til"
    frame = tosca_heads.baselines(
        store.path,
        ["simplecil", "ranpac"],
        scenario="til",
        init_cls=2,
        increment=2,
        with_tosca=False,
        out=out,
        **RANPAC,
    )
    direct = run_scenario(
        store,
        "til",
        ("simplecil", "ranpac"),
        {"init_cls": 2, "increment": 2},
        {"ranpac": {"projection_dim": 64}},
    )
    assert list(frame["method"]) == ["simplecil", "ranpac"]
    for row, result in zip(frame.to_dict("records"), direct, strict=True):
        assert {k: row[k] for k in result.figures} == result.figures
    asked = json.loads((out / "ranpac" / cell.ASKED).read_text())
    assert asked["scenario"] == {"name": "til", "values": {"increment": 2, "init_cls": 2}}
    assert asked["params"] == {"projection_dim": 64, "seed": 0}  # every parameter, defaults included
    assert json.loads((out / ".tosca").read_text())["kind"] == "scenario"
    md = (out / "comparison.md").read_text()
    assert md.startswith("# synthetic / none, scenario til\n")
    assert f"| simplecil | {100 * direct[0].figures['A_last']:.2f} |" in md


def test_a_rerun_reuses_cells_asked_the_same_and_never_another_scenarios(
    store: FeatureStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "few"
    first = tosca_heads.baselines(
        store.path, ["simplecil"], scenario="fscil", scenario_values=FSCIL, with_tosca=False, out=out
    )
    ran: list[tuple[str, ...]] = []
    real = scenario_runs.run_checked

    def counted(ready, *args, **kwargs):  # type: ignore[no-untyped-def]
        ran.append(ready.methods)
        return real(ready, *args, **kwargs)

    monkeypatch.setattr("tosca_heads.studies.scenario_comparison.run_checked", counted)
    again = tosca_heads.baselines(
        store.path, ["simplecil"], scenario="fscil", scenario_values=FSCIL, with_tosca=False, out=out
    )
    assert ran == []
    pd.testing.assert_frame_equal(again, first)  # its figures worked out again from its kept answers

    other = {**FSCIL, "shots": 3}  # other values: computed again
    tosca_heads.baselines(
        store.path, ["simplecil"], scenario="fscil", scenario_values=other, with_tosca=False, out=out
    )
    assert ran == [("simplecil",)]
    assert json.loads((out / "simplecil" / cell.ASKED).read_text())["scenario"]["values"]["shots"] == 3

    # another scenario into the same folder: computed again, never the fscil cell's answers
    til = tosca_heads.baselines(
        store.path, ["simplecil"], scenario="til", init_cls=2, increment=2, with_tosca=False, out=out
    )
    assert ran == [("simplecil",), ("simplecil",)]
    assert "PD" not in til.columns


def test_a_cells_answers_edited_since_are_one_line(store: FeatureStore, tmp_path: Path) -> None:
    out = tmp_path / "edited"
    asked = {"scenario": "til", "init_cls": 2, "increment": 2, "with_tosca": False, "out": out}
    tosca_heads.baselines(store.path, ["simplecil"], **asked)  # type: ignore[arg-type]
    answers = out / "simplecil" / cell.STEP_ANSWERS
    answers.write_bytes(answers.read_bytes()[:-8] + b"\x00" * 8)
    with pytest.raises(UserError, match=r"answers\.safetensors is not the file that was written"):
        tosca_heads.baselines(store.path, ["simplecil"], **asked)  # type: ignore[arg-type]


def test_cil_is_todays_table_byte_for_byte(store: FeatureStore, tmp_path: Path) -> None:
    out = tmp_path / "cil"
    flags = ["--store", str(store.path), "--methods", "simplecil", "--no-tosca", "--device", "cpu"]
    split = ["--init-cls", "2", "--increment", "2", "--out", str(out)]
    first = CliRunner().invoke(app, ["baselines", *flags, *split])
    assert first.exit_code == 0, first.output
    kept = {n: (out / n).read_bytes() for n in ("comparison.csv", "comparison.md", "simplecil/asked.json")}
    again = CliRunner().invoke(app, ["baselines", *flags, *split, "--scenario", "cil"])
    assert again.exit_code == 0, again.output
    assert "simplecil: reused" in again.output  # the same cell: asked.json carries no scenario for cil
    assert {n: (out / n).read_bytes() for n in kept} == kept
    assert "scenario" not in json.loads(kept["simplecil/asked.json"])
    with pytest.raises(UserError, match=r"is a tosca baselines folder, not a scenario folder"):
        tosca_heads.baselines(store.path, ["simplecil"], scenario="til", with_tosca=False, out=out)
    assert {n: (out / n).read_bytes() for n in kept} == kept


@pytest.mark.parametrize(
    ("asked", "message"),
    [
        (
            {"scenario": "blurry", "methods": ["slda"]},
            r"^slda cannot run blurry: it learns each class from one task's rows",
        ),
        ({"scenario": "til", "methods": ["joint_probe"]}, r"^joint_probe cannot run til: it gives no score"),
        ({"scenario": "tii"}, r"^unknown scenario 'tii' \(did you mean 'til'\?\)"),
        ({"scenario": "fscil", "init_cls": 2}, r"^init_cls does not apply to scenario fscil \(it takes: "),
        ({"scenario": "til", "val_fraction": 0.2}, r"^val_fraction is for the class-incremental table"),
        ({"scenario_values": {"shots": 5}}, r"^scenario values are for a scenario other than cil"),
        ({"scenario": "fscil", "scenario_values": {"shots": 0}}, r"^fscil shots must be at least 1, got 0"),
        ({"scenario": "fscil", "scenario_values": [1]}, r"^scenario_values must be a mapping"),
    ],
)
def test_what_does_not_fit_the_scenario_is_one_line_before_anything_is_written(
    store: FeatureStore, tmp_path: Path, asked: dict, message: str
) -> None:
    out = tmp_path / "never"
    with pytest.raises(UserError, match=message):
        tosca_heads.baselines(store.path, **{"methods": ["simplecil"], "out": out, **asked})
    assert not out.exists()


def _one_step_short(path: Path) -> None:
    import torch
    from safetensors.torch import save_file

    save_file({"step_000": torch.zeros(3, dtype=torch.int64)}, str(path), {"format": "1", "steps": "1"})


def _floats(path: Path) -> None:
    import torch
    from safetensors.torch import save_file

    steps = {f"step_{i:03d}": torch.zeros(3) for i in range(3)}
    save_file(steps, str(path), {"format": "1", "steps": "3"})


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda p: p.write_text("not a safetensors file"), r"answers\.safetensors: .*; delete the folder"),
        (_one_step_short, r"answers\.safetensors does not answer the plan's 3 steps"),
        (_floats, r"answers\.safetensors: step_000 is not a list of class ids"),
        (lambda p: p.unlink(), r"answers\.safetensors is missing"),
    ],
)
def test_kept_answers_that_hide_their_edit_are_one_line(
    store: FeatureStore, tmp_path: Path, damage: Callable[[Path], None], message: str
) -> None:
    """A hostile edit that rewrites done.json too (`redigest`) is caught by what the answers file
    itself must be: safetensors, one list of class ids per step of the plan, each its rows long."""
    from support.cells import redigest

    out = tmp_path / "hostile"
    asked = {"scenario": "til", "init_cls": 2, "increment": 2, "with_tosca": False, "out": out}
    tosca_heads.baselines(store.path, ["simplecil"], **asked)  # type: ignore[arg-type]
    damage(out / "simplecil" / cell.STEP_ANSWERS)
    if (out / "simplecil" / cell.STEP_ANSWERS).exists():
        redigest(out / "simplecil")
    with pytest.raises(UserError, match=message):
        tosca_heads.baselines(store.path, ["simplecil"], **asked)  # type: ignore[arg-type]
