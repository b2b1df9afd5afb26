"""What a tracked run carries, the same for every logger (built-in or a plug-in's):

- params: the run's configuration, flat ("train.lr", "stream.init_cls", "dataset", ...);
- after each task t (in task order, a resumed task from its file like a trained one):
  "loss/task_TTT" and "lr/task_TTT" at steps 0..epochs-1 (the epoch's mean cross-entropy and its
  learning rate: the run's curves.csv), "train/loss" and "train/accuracy" at step t (the task's
  last epoch, as results.csv), and "A_t/SPLIT/ROUTER" at step t for every router on test and, where
  one is held out, on the validation split;
- at the end: "A_last/SPLIT/ROUTER", "A_bar/...", "forgetting/..." and "routing/..." at the last
  task's step, and the run's files as artifacts;
- a baseline: "A_t/SPLIT/METHOD" per task and its final figures, the same way;
- a sweep or a suite: one parent run (its flags, its files, what it chose) with a child run per
  point or cell, logged when that point's result reaches the command.

`Tracking` is the loggers a command was asked for; `TrackedRun` one run in all of them. Every
call is made from the command's own process (see `trackers.registry`). A logger that fails is
one line naming it, after the results it was logging are on disk.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from featcache.foundation.errors import UserError
from tosca_heads.experiments.trackers.registry import Logger, Metric, open_logger, parse_targets

if TYPE_CHECKING:  # (annotations only: a tracker plug-in, and `--log` checks, load no torch)
    from tosca_heads.experiments.records.run import RunResult, StageResult

FINAL_KEYS = {"A_last": "A_last", "A_bar": "A_bar", "forgetting": "forgetting", "routing_accuracy": "routing"}
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


def stage_metrics(stage: StageResult) -> list[Metric]:
    """What a run logs after task `stage.task` (the module docstring)."""
    t = stage.task
    found: list[Metric] = []
    if stage.curve is not None:
        for epoch, (loss, lr) in enumerate(zip(stage.curve["loss"], stage.curve["lr"], strict=True)):
            found += [
                Metric(f"loss/task_{t:03d}", float(loss), epoch),
                Metric(f"lr/task_{t:03d}", float(lr), epoch),
            ]
    found += [
        Metric("train/loss", float(stage.stats["loss"]), t),
        Metric("train/accuracy", float(stage.stats["train_acc"]), t),
    ]
    for split, routers in (("test", stage.routers), ("validation", stage.validation or {})):
        found += [Metric(key("A_t", split, name), float(s["A_t"]), t) for name, s in routers.items()]
    return found


def final_metrics(blocks: dict[str, dict[str, dict[str, Any]]], step: int) -> list[Metric]:
    """A run's or a baseline's final figures: split -> name (router or method) -> metrics block."""
    found = []
    for split, named in blocks.items():
        for name, block in named.items():
            for field_, short in FINAL_KEYS.items():
                value = block.get(field_)
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    found.append(Metric(key(short, split, name), float(value), step))
    return found


def run_files(folder: Path) -> list[Path]:
    """The files a run, point, cell or sweep folder holds at its top level (regular files only,
    never through a link; lock files and tosca's marker left out), by name."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(
        p for p in folder.iterdir() if p.is_file() and not p.is_symlink() and not p.name.startswith(".")
    )


@dataclass
class TrackedRun:
    """One run in every logger of a command."""

    handles: list[tuple[Logger, Any]]
    last_step: int = 0
    ended: bool = False

    def _each(self, call: Callable[[Logger, Any], None]) -> None:
        for logger, handle in self.handles:
            with _said(logger):
                call(logger, handle)

    def params(self, params: dict[str, str | int | float | bool]) -> None:
        self._each(lambda logger, run: logger.params(run, params))

    def metrics(self, metrics: Sequence[Metric]) -> None:
        if metrics:
            self.last_step = max(self.last_step, *(m.step for m in metrics))
            self._each(lambda logger, run: logger.metrics(run, list(metrics)))

    def stage(self, stage: StageResult) -> None:
        """What a run logs after one task."""
        self.metrics(stage_metrics(stage))

    def finish(self, blocks: dict[str, dict[str, dict[str, Any]]], files: Sequence[Path]) -> None:
        """Final figures, files, end."""
        self.metrics(final_metrics(blocks, self.last_step))
        if files:
            self._each(lambda logger, run: logger.artifacts(run, list(files)))
        self.end(True)

    def end(self, ok: bool) -> None:
        if not self.ended:
            self.ended = True
            self._each(lambda logger, run: logger.end(run, ok))

    def run_result(self, result: RunResult, files: Sequence[Path] = ()) -> None:
        """A whole run at once (a sweep's point, a suite's cell, a comparison's TOSCA run): every
        stage in task order, then the final figures and files."""
        for stage in result.stages:
            self.stage(stage)
        self.finish(result_blocks(result), files)


def method_result(run: TrackedRun, result: Any, files: Sequence[Path] = ()) -> None:
    """A baseline's `MethodResult` at once: A_t per task on test (and validation), its final
    figures, its files."""
    name = result.method
    splits = {"test": result.metrics, **({"validation": result.validation} if result.validation else {})}
    run.metrics(
        [
            Metric(key("A_t", split, name), float(a), t)
            for split, block in splits.items()
            for t, a in enumerate(block["A_t"])
        ]
    )
    run.finish({split: {name: block} for split, block in splits.items()}, files)


def result_blocks(result: RunResult) -> dict[str, dict[str, dict[str, Any]]]:
    metrics = result.metrics()
    blocks = {"test": metrics["routers"]}
    if metrics.get("validation"):
        blocks["validation"] = metrics["validation"]
    return blocks


@dataclass
class Tracking:
    """The loggers a command was asked for (none: every call does nothing)."""

    loggers: list[Logger] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.loggers)

    def start(self, name: str, params: dict[str, Any], parent: TrackedRun | None = None) -> TrackedRun | None:
        """A run named `name` in every logger (a child of `parent`'s run in each), its params
        logged; None without loggers."""
        if not self.loggers:
            return None
        handles = []
        for i, logger in enumerate(self.loggers):
            with _said(logger):
                handles.append((logger, logger.start(name, None if parent is None else parent.handles[i][1])))
        run = TrackedRun(handles)
        run.params(params)
        return run


def open_tracking(values: Sequence[str], runs_root: Path = Path("runs")) -> Tracking:
    """The loggers `--log` asks for, each configured now (a missing extra or a bad WHERE is one
    line before anything runs)."""
    loggers = []
    for target in parse_targets(values):
        logger = open_logger(target, runs_root)
        loggers.append(logger)
    return Tracking(loggers)


def end_failed(run: TrackedRun | None) -> None:
    """End `run` as failed, after an error stopped it (that error is the one to tell)."""
    if run is not None:
        with suppress(UserError):
            run.end(False)


@contextmanager
def _said(logger: Logger) -> Iterator[None]:
    """A logger's own failure (foreign code) as one line naming it."""
    try:
        yield
    except UserError:
        raise
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        raise UserError(f"--log {logger.name} failed: {type(exc).__name__}: {first}") from None
