"""What a tracked run carries, the same for every logger (built-in or a plug-in's), read off the
records tosca writes, never field by field:

- params: the run's configuration, flat ("train.lr", "stream.init_cls", "dataset", ...);
- after each task t (in task order, a resumed task from its file like a trained one): every column
  of the task's training curve per epoch as "COLUMN/task_TTT" at steps 0..epochs-1 (curves.csv's
  columns: the loss, the learning rate, ...), every training figure of the task as "train/NAME" at
  step t (metrics.json's "tasks": loss, accuracy, seconds, ...), and every number a router scores
  after the task as "FIELD/SPLIT/ROUTER" at step t (A_t, routing, ...) on test and, where one is
  held out, on the validation split;
- at the end, from each metrics block (a router's or a baseline's, as metrics.json and a sweep's
  results.csv hold it): every number as "FIELD/SPLIT/NAME" at the last task's step (A_last, A_bar,
  forgetting, routing, and whatever the block gains: an interval's ends...), every list of numbers
  as a series over the tasks (A_t), an object's numbers by their dotted names; and the run's files
  as artifacts.

So a column a record gains reaches every tracker with no change here or in a logger. Names are
the records' own, with three shortened (`SHORT`); a (key, step) is logged once per run, so the
same figure reached twice (a task's A_t, then the final block's A_t series) is not repeated.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tosca_heads.records.cell import STATE
from tosca_heads.records.run_folder import RunResult, StageResult, curve_epochs
from tosca_heads.records.sweep import POINT_COLUMNS
from tosca_heads.trackers.logger_registry import Metric

# a record's field -> the shorter name trackers show (a final figure and its series share one)
SHORT = {"routing_accuracy": "routing", "routing_accuracy_t": "routing", "train_acc": "accuracy"}
ROW_ONLY = {*POINT_COLUMNS, "split", "router"}  # a results.csv row's columns that are no figure
PARAM_TEXT = 500  # a parameter's value is cut to this many characters (a tracker's limit is larger)
_UNSAFE = re.compile(r"[^A-Za-z0-9_\-./ ]")


def key(*parts: object) -> str:
    """A metric key every tracker takes: letters, digits, _ - . / and spaces (a router or method
    named otherwise by a plug-in has its other characters as _)."""
    return _UNSAFE.sub("_", "/".join(str(p) for p in parts))


def flat_params(config: dict[str, Any], prefix: str = "") -> dict[str, str | int | float | bool]:
    """A nested configuration as flat "a.b" -> value (lists as their text), the protocol's words
    left out (a task's class names are no parameter)."""
    flat: dict[str, str | int | float | bool] = {}
    for name, value in config.items():
        if name == "protocol":
            continue
        if isinstance(value, dict):
            flat.update(flat_params(value, f"{prefix}{name}."))
        elif isinstance(value, (bool, int, float, str)):
            flat[f"{prefix}{name}"] = value if not isinstance(value, str) else value[:PARAM_TEXT]
        elif value is not None:
            flat[f"{prefix}{name}"] = str(value)[:PARAM_TEXT]
    return flat


def number(value: Any) -> float | None:
    """A finite number as a float; None for anything else (text, None, NaN, a flag)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _fields(block: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """A block's fields, an object's by their dotted names; its "intervals" ({figure: [low, high]})
    as FIGURE_low and FIGURE_high, beside the figure they bound."""
    for name, value in block.items():
        if name == "intervals" and isinstance(value, Mapping):
            for figure, ends in value.items():
                if isinstance(ends, Sequence) and not isinstance(ends, str) and len(ends) == 2:
                    yield from (
                        (f"{prefix}{figure}_{end}", v) for end, v in zip(("low", "high"), ends, strict=True)
                    )
        elif isinstance(value, Mapping):
            yield from _fields(value, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", value


def block_metrics(block: Mapping[str, Any], split: str, name: str, step: int | None = None) -> list[Metric]:
    """A metrics block's figures (see the module docstring): numbers at `step` (default: the last
    task of its longest series), lists of numbers as series over tasks; anything else left out."""
    series = {
        f: v for f, v in _fields(block) if isinstance(v, list) and v and all(number(x) is not None for x in v)
    }
    last = step if step is not None else max((len(v) for v in series.values()), default=1) - 1
    found = []
    for field, value in _fields(block):
        label = key(SHORT.get(field, field), split, name)
        if field in series:
            found += [Metric(label, float(v), t) for t, v in enumerate(value)]
        elif (figure := number(value)) is not None:
            found.append(Metric(label, figure, last))
    return found


def curve_metrics(task: int, curve: Mapping[str, Sequence[float]]) -> list[Metric]:
    """A task's training curve as curves.csv shows it (`records.run.curve_epochs`: its columns and
    the loss they add up to): each column per epoch as COLUMN/task_TTT."""
    return [
        Metric(f"{column}/task_{task:03d}", v, epoch)
        for epoch, values in enumerate(curve_epochs(curve))
        for column, value in values.items()
        if (v := number(value)) is not None
    ]


def task_metrics(task: int, stats: Mapping[str, Any]) -> list[Metric]:
    """A task's training figures (its last epoch's, its seconds) as train/NAME at step `task`."""
    return [
        Metric(f"train/{SHORT.get(k, k)}", v, task)
        for k, value in stats.items()
        if k != "task" and (v := number(value)) is not None
    ]


def stage_metrics(stage: StageResult) -> list[Metric]:
    """What a run logs after task `stage.task` (the module docstring)."""
    t = stage.task
    found = curve_metrics(t, stage.curve or {})
    found += task_metrics(t, {**stage.stats, "eval_seconds": stage.eval_seconds})
    for split, routers in (("test", stage.routers), ("validation", stage.validation or {})):
        for name, scores in routers.items():
            found += [
                Metric(key(SHORT.get(f, f), split, name), v, t)
                for f, value in scores.items()
                if (v := number(value)) is not None
            ]
    return found


def record_metrics(
    record: Mapping[str, Any],
    curves: Mapping[int, Mapping[str, Sequence[float]]] | None = None,
    names: Mapping[str, str] | None = None,
) -> list[Metric]:
    """Everything a finished record logs, in metrics.json's form ("tasks": training figures per
    task; "routers": the blocks on test; "validation": on the validation split), with the tasks'
    training curves where kept; `names` renames a block (a baseline's "none" as the method)."""
    found = []
    for task, curve in sorted((curves or {}).items()):
        found += curve_metrics(task, curve)
    for entry in record.get("tasks") or []:
        if isinstance(entry, Mapping) and isinstance(entry.get("task"), int):
            found += task_metrics(entry["task"], entry)
    for split, field in (("test", "routers"), ("validation", "validation")):
        for name, block in (record.get(field) or {}).items():
            if isinstance(block, Mapping):
                found += block_metrics(block, split, (names or {}).get(name, name))
    return found


def result_record(result: RunResult) -> tuple[dict[str, Any], dict[int, dict[str, list[float]]]]:
    """A run in memory as its record and curves (what its metrics.json and curves.csv hold)."""
    return result.metrics(), {s.task: s.curve for s in result.stages if s.curve is not None}


def rows_record(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A sweep point's results.csv rows (one per split and router; values or their text) as a
    record: every column that is not the point's own is a figure of the row's block (a list kept
    as JSON text read back)."""
    record: dict[str, Any] = {"routers": {}, "validation": {}}
    for row in rows:
        block = {column: _read(value) for column, value in row.items() if column not in ROW_ONLY}
        field = "routers" if row.get("split", "test") == "test" else "validation"
        record[field][str(row.get("router"))] = block
    return record


def _read(value: Any) -> Any:
    """A results.csv cell as the value it holds: a number, a JSON list, else as it is."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value) if value.startswith("[") else float(value)
    except ValueError:
        return value


def run_files(folder: Path) -> list[Path]:
    """The files a run, point, cell or sweep folder holds at its top level, then those of its state/
    (a run's task modules, classifier and router statistics: `records.cell`), each by name (regular
    files only, never through a link; lock files, tosca's marker and ledger left out)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    state = folder / STATE
    kept = [folder, *([state] if state.is_dir() and not state.is_symlink() else [])]
    return [
        p
        for place in kept
        for p in sorted(place.iterdir())
        if p.is_file() and not p.is_symlink() and not p.name.startswith(".")
    ]
