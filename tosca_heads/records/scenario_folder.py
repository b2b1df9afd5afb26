"""A scenario's baselines folder (`tosca baselines --scenario NAME`, NAME not `cil`): one cell per
method (`records.cell`), and the table drawn from them (comparison.csv, comparison.md), written and
never read back.

A scenario cell's asked.json names the scenario and its values beside the store, the method and
its parameters, so a cell of another scenario, or of other values, is never reused (the one reuse
rule, `cell.reusable`). Its answers are the class ids the method answered at each step of the plan
(`cell.STEP_ANSWERS`: a step's evaluation rows are the plan's, not one list of images per stage as
outcomes.safetensors holds), and its figures are worked out from them when read, by the scenario
(`Scenario.figures_of`) on the plan made again from the store: no file holds a figure to edit.

Its own folder kind (`SCENARIO_FOLDER`, marker "scenario"): a class-incremental baselines folder
is never written into, nor a scenario folder read as one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from featcache.store import FeatureStore
from tosca_foundation import atomic
from tosca_foundation.errors import UserError
from tosca_foundation.tensorfiles import Header, TensorFileError, read_safetensors
from tosca_heads.method.scenarios import ScenarioPlan
from tosca_heads.records import FORMAT, cell, check_format
from tosca_heads.records.claim import FolderKind, mark
from tosca_heads.records.table import Table

REDO = "delete the folder to compute the method again"
TABLE_FILES = ("comparison.csv", "comparison.md")
STEP = re.compile(r"step_(\d{3})")
MAX_STEPS = 10_000


def check_cells(folder: Path) -> None:
    """Refuse, in one line and before anything is written, a finished cell edited or damaged since
    (it is never written over); a cell never finished is left to be computed again."""
    if not Path(folder).is_dir():
        return
    for entry in sorted(Path(folder).iterdir()):
        if entry.is_dir() and (entry / cell.DONE).exists():
            cell.check_whole(entry, REDO)


SCENARIO_FOLDER = FolderKind(name="scenario", flag="--out", noun="scenario folder", check_files=check_cells)
# a sweep under a scenario (`studies.scenario_sweep`): a cell per point and router, named
# KEY.ROUTER, and the results drawn from them; its own kind, so neither folder is written as the other
SCENARIO_SWEEP_FOLDER = FolderKind(
    name="scenario-sweep", flag="--out", noun="scenario sweep folder", check_files=check_cells
)


def scenario_asked(
    store: FeatureStore, name: str, values: dict[str, Any], method: str, params: dict[str, Any]
) -> dict[str, Any]:
    """What one method's cell under a scenario is asked: the store's identity, the scenario and
    its values as given, the method, its own parameters and the versions that change its numbers."""
    ident = store.identity
    return {
        "kind": "scenario",
        "store": {
            "fingerprint": store.fingerprint,
            "dataset": ident["dataset"]["name"],
            "backbone": ident["backbone"]["alias"],
        },
        "scenario": {"name": name, "values": dict(sorted(values.items()))},
        "method": method,
        "params": dict(sorted(params.items())),
        "versions": cell.versions(),
    }


def write_result(
    folder: Path,
    answers: Sequence[np.ndarray],
    seconds: float,
    asked: dict[str, Any],
    kind: FolderKind = SCENARIO_FOLDER,
) -> None:
    """One method's cell (or a scenario sweep's point and router: `kind`): done.json gone first,
    its answers per step, then asked.json, measured.json (its seconds, the machine) and done.json
    last (`cell.write_cell`)."""
    mark(folder.parent, kind)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / cell.DONE).unlink(missing_ok=True)
    (folder / cell.STATE).mkdir(exist_ok=True)
    import torch

    tensors = {
        f"step_{i:03d}": torch.from_numpy(np.ascontiguousarray(a, np.int64)) for i, a in enumerate(answers)
    }
    atomic.write_safetensors(
        folder / cell.STEP_ANSWERS, tensors, {"format": str(FORMAT), "steps": str(len(tensors))}
    )
    cell.write_cell(folder, asked, {"seconds": seconds, "machine": cell.machine("cpu")}, None)


def _check_header(header: Header) -> None:
    steps = header.metadata.get("steps", "")
    if not steps.isdigit() or not 1 <= int(steps) <= MAX_STEPS:
        raise TensorFileError("its metadata records no step count")
    names = {f"step_{i:03d}" for i in range(int(steps))}
    if set(header.tensors) != names:
        raise TensorFileError(f"it does not hold one answer list per step of {steps}")
    for name, info in header.tensors.items():
        if info.dtype != "I64" or len(info.shape) != 1:
            raise TensorFileError(f"{name} is not a list of class ids")


def read_answers(folder: Path, plan: ScenarioPlan) -> list[np.ndarray]:
    """The answers a cell kept, one list per step of the plan, each as long as the step's
    evaluation rows: one line otherwise."""
    path = folder / cell.STEP_ANSWERS
    try:
        tensors, meta = read_safetensors(path, _check_header)
    except TensorFileError as exc:
        raise UserError(f"{path}: {exc}; {REDO}") from None
    text = meta.get("format")
    check_format(path, int(text) if text and text.isdigit() else text, "scenario answers")
    answers = [tensors[f"step_{i:03d}"].numpy() for i in range(len(tensors))]
    steps = plan.steps
    if len(answers) != len(steps) or any(
        len(a) != len(s.eval_rows) for a, s in zip(answers, steps, strict=False)
    ):
        raise UserError(f"{path} does not answer the plan's {len(steps)} steps (edited or damaged); {REDO}")
    return answers


def kept_answers(
    folder: Path, asked: dict[str, Any], plan: ScenarioPlan
) -> tuple[list[np.ndarray], float] | None:
    """The answers and seconds a reusable cell holds (`cell.reusable`: finished, whole, asked the
    same), checked against the plan; None when it holds none (computed again)."""
    if not cell.reusable(folder, asked, REDO):
        return None
    found = cell.read_cell(folder, REDO)
    return read_answers(folder, plan), found.seconds


@dataclass(frozen=True)
class Row:
    """One method's row of a scenario table: its figures (fractions) and seconds."""

    method: str
    figures: dict[str, float]
    seconds: float


def write_table(folder: Path, rows: Sequence[Row], title: str, plan_line: str) -> dict[str, Path]:
    """Each method's figures in % and its seconds under `title` (comparison.csv and .md)."""
    import pandas as pd

    figures = list(rows[0].figures)
    cells = [[r.method, *(f"{100 * r.figures[f]:.2f}" for f in figures), f"{r.seconds:.1f}"] for r in rows]
    frame = pd.DataFrame(
        [{"method": r.method, **r.figures, "seconds": r.seconds, "plan": plan_line} for r in rows]
    )
    note = f"Figures in %, on the test split, under scenario {plan_line}."
    mark(folder, SCENARIO_FOLDER)
    Table(title, note, ["method", *figures, "seconds"], cells, frame).write(
        folder / "comparison.md", ("csv", "md")
    )
    return {name: folder / name for name in TABLE_FILES}
