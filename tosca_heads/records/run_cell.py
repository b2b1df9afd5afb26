"""A TOSCA run as a cell (`records.cell`, issue 54): what a fit writes last (`write_run_cell`) and
the one reader of a finished run (`read_run`), through which every command, table, tracker and
API reads a run's figures.

measured.json keeps only what was measured and cannot be derived: per task the last epoch's
training figures (`MEASURED_KEYS`), its seconds and eval_seconds (finite, not negative:
`cell.check_seconds`), its training curve, and the machine. Everything else a reader shows is
worked out when read: the figures of every router on every split (`cell.figures`, from the kept
answers), the finished tasks (the tasks the answers cover), the routing confusion (from the route
kept after the last task) and the parameters per task (from the recipe and feature dimension
asked). No file holds a figure to edit; an edited file is refused by its digest (`cell.check_whole`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from tosca_foundation.errors import UserError
from tosca_heads.engine.layout import ParamLayout
from tosca_heads.method.uncertainty import Outcomes, methods_said
from tosca_heads.records import FORMAT, cell
from tosca_heads.records.outcomes import PerSplit
from tosca_heads.records.run_config import EDITED, read_run_config
from tosca_heads.records.run_folder import (
    STAT_KEYS,
    RunResult,
    feature_dim_of,
    read_curve,
    tied_of,
    train_config_of,
)
from tosca_heads.routers import ROUTERS

MEASURED_KEYS = (*STAT_KEYS, "eval_seconds")  # per task: ce, l1_term, loss, train_acc, seconds, eval_seconds


def run_measured(result: RunResult, device: str) -> dict[str, Any]:
    """measured.json of a run: per task its training figures and seconds, its curve, the machine;
    "seconds" the run's training and evaluation seconds, all tasks together."""
    tasks = [
        {"task": s.task, **{k: s.stats[k] for k in STAT_KEYS}, "eval_seconds": s.eval_seconds}
        for s in result.stages
    ]
    for row in tasks:
        cell.check_seconds(row["seconds"], f"run {result.run_dir}: task {row['task']}'s training")
        cell.check_seconds(row["eval_seconds"], f"run {result.run_dir}: task {row['task']}'s evaluation")
    ties = {split: found for split in ("test", "validation") if (found := _ties(result, split))}
    return {
        **({"tied": ties} if ties else {}),  # measured, not derivable from the answers kept
        "seconds": sum(row["seconds"] + row["eval_seconds"] for row in tasks),
        "machine": cell.machine(device),
        "tasks": tasks,
        "curves": [{"task": s.task, **s.curve} for s in result.stages if s.curve is not None],
    }


def _ties(result: RunResult, split: str) -> dict[str, dict[str, list[int]]]:
    """Per router, its ties on `split` over the stages (`run_folder.tied_of`); routers without one
    left out."""
    stages = [(s.routers if split == "test" else s.validation) or {} for s in result.stages]
    if not stages or not stages[0]:
        return {}
    return {n: found for n in stages[0] if (found := tied_of([s.get(n, {}) for s in stages]))}


def write_run_cell(result: RunResult, device: str) -> None:
    """The run's cell written last (`cell.write_cell`): asked.json again (as claimed), measured.json,
    the answers, then done.json with every file's digest, state/ included."""
    cell.write_cell(result.run_dir, result.config, run_measured(result, device), result.outcomes())


@dataclass(frozen=True)
class RunRecord:
    """A finished run as read: what was asked (`config`), what was measured, its answers; every
    figure computed from them on first use (`metrics`, `confusion`, `curves`)."""

    folder: Path
    config: dict[str, Any]
    measured: dict[str, Any]
    answers: PerSplit = field(default_factory=dict)

    @property
    def finished_tasks(self) -> int:
        """The tasks the run finished: those its kept answers cover."""
        return max((o.tasks for named in self.answers.values() for o in named.values()), default=0)

    @cached_property
    def params_per_task(self) -> int:
        """Trainable parameters of one task's module, from the recipe and feature dimension asked."""
        train = train_config_of(self.config, self.folder)
        return ParamLayout(feature_dim_of(self.config, self.folder), train.r, train.s, train.flow).size

    @cached_property
    def metrics(self) -> dict[str, Any]:
        """The figures in the form the metrics.json view shows them: per router on test ("routers")
        and on the validation split ("validation", where one is held out), the training figures per
        task ("tasks"), the finished tasks, the parameters per task, how intervals are computed."""
        blocks = cell.figures(self.answers)
        metrics: dict[str, Any] = {
            "format": FORMAT,
            "finished_tasks": self.finished_tasks,
            "params_per_task": self.params_per_task,
            "routers": _in_registry_order(blocks.get("test", {})),
            "tasks": [dict(row) for row in self.measured["tasks"]],
        }
        if "validation" in self.config:
            metrics["validation"] = _in_registry_order(blocks.get("validation", {}))
        for split, named in _checked_ties(self.measured.get("tied", {}), self.folder).items():
            for name, counts in named.items():
                block = metrics["routers" if split == "test" else "validation"].get(name)
                if block is not None:
                    block.update(counts)
        if blocks:
            metrics["uncertainty"] = methods_said()
        return metrics

    @cached_property
    def confusion(self) -> dict[str, Any]:
        """After the last task, per split and router whose route is kept: the routing's confusion
        matrix (row t: the images of task t counted by the task whose module was picked); "task"."""
        found: dict[str, Any] = {"task": self.finished_tasks - 1}
        for split, named in self.answers.items():
            matrices = {
                n: confusion_of(o) for n, o in _in_registry_order(named).items() if o.chosen is not None
            }
            if matrices:
                found[split] = matrices
        return found

    @cached_property
    def curves(self) -> dict[int, dict[str, list[float]]]:
        """Per task, its training curve (ce, l1_term, lr per epoch)."""
        return {int(c["task"]): {k: c[k] for k in ("ce", "l1_term", "lr")} for c in self.measured["curves"]}


def confusion_of(outcome: Outcomes) -> list[list[int]]:
    """The routing confusion after the last task from the route kept: the images of every class
    seen, row = their task, column = the task picked (scikit-learn's `confusion_matrix`); a tied
    route (no task picked, `method.ties`) is in no cell, so a row's sum falls short by its ties."""
    tasks = outcome.tasks
    if outcome.chosen is None:
        raise ValueError("no route kept: a routing confusion needs the task picked for each image")
    seen = (outcome.task < tasks) & (outcome.chosen >= 0)
    cells = outcome.task[seen].astype(np.int64) * tasks + outcome.chosen[seen].astype(np.int64)
    return np.bincount(cells, minlength=tasks * tasks).reshape(tasks, tasks).tolist()


def _checked_ties(ties: Any, folder: Path) -> dict[str, dict[str, dict[str, list[int]]]]:
    """measured.json's ties as written (`run_measured`), refused in one line when they are not
    counts: {split: {router: {"tied": [n per task], "tied_routes": [n per task]}}}."""

    def counts(v: Any) -> bool:
        return isinstance(v, list) and all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in v
        )

    if not isinstance(ties, dict) or not all(
        split in ("test", "validation")
        and isinstance(named, dict)
        and all(
            isinstance(c, dict) and set(c) == {"tied", "tied_routes"} and all(map(counts, c.values()))
            for c in named.values()
        )
        for split, named in ties.items()
    ):
        raise UserError(f"run {folder}: measured.json's ties are not counts per task (not a run's file)")
    return ties


def _in_registry_order(named: dict[str, Any]) -> dict[str, Any]:
    """Routers in the registry's order, then any the registry no longer holds (a plug-in gone)."""
    return {
        **{n: named[n] for n in ROUTERS if n in named},
        **{n: v for n, v in named.items() if n not in ROUTERS},
    }


def read_run(run_dir: Path) -> RunRecord:
    """A finished run (its done.json written last), every file whole (`cell.read_cell`), what was
    measured possible; one line otherwise: a run never finished (killed, stopped by a full disk,
    still running) names the fit that finishes it, an edited or damaged file names itself."""
    run_dir = Path(run_dir)
    config = read_run_config(run_dir)  # a folder of no run, or of the format before cells: its own line
    if not (run_dir / cell.DONE).is_file():
        raise UserError(
            f"run {run_dir} is not finished (no {cell.DONE}: it was stopped or is still running); "
            f"`tosca fit --run {run_dir}` finishes it"
        )
    found = cell.read_cell(run_dir, EDITED)
    measured = found.measured
    _check_measured(run_dir, measured, found.tasks)
    return RunRecord(run_dir, config, measured, found.answers)


def _check_measured(run_dir: Path, measured: dict[str, Any], tasks: int) -> None:
    """measured.json as a fit writes it: a row of finite figures per finished task, seconds not
    negative, a curve each (it is whole by its digest: this is what a newer tosca's file may lack)."""
    where = f"run {run_dir}: {cell.MEASURED}"
    rows, curves = measured.get("tasks"), measured.get("curves")
    if not isinstance(rows, list) or len(rows) != tasks or not isinstance(curves, list):
        raise UserError(f"{where} does not hold one row per finished task; {EDITED}")
    for row in rows:
        if not isinstance(row, dict) or not all(_finite(row.get(k)) for k in MEASURED_KEYS):
            raise UserError(f"{where} holds a task row that is not a fit's; {EDITED}")
        cell.check_seconds(row["seconds"], where)
        cell.check_seconds(row["eval_seconds"], where)
    for curve in curves:
        if (
            not isinstance(curve, dict)
            or read_curve({k: curve.get(k) for k in ("ce", "l1_term", "lr")}) is None
        ):
            raise UserError(f"{where} holds a training curve that is not a fit's; {EDITED}")


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
