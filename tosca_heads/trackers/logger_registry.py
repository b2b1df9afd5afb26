"""The experiment trackers a run can be sent to (`--log NAME[=WHERE]`, repeatable): a registry of
`Logger` classes by name, like the routers', so a lab adds its own in a plug-in
(`@register_logger`, loaded through $TOSCA_PLUGINS or the `tosca.plugins` entry points).

A logger is configured when the command starts and writes nothing then: it checks its WHERE (a
place it may write, a server it can reach) so that a bad one is one line before any work, and a
refused command or a dry run leaves no trace. It is told five things about each tracked run, and
nothing else: that it starts (a child of another run, or of none), its parameters, batches of
metrics (key, value, step), the files it made, and that it ended. A logger that can find a run
again by an id (`handle_id`, `reopen`, `discard`) lets a resumed sweep or suite continue the
parent run it logged before (`trackers.ledger`); one that cannot starts a new parent holding
every point. Every call comes from the process that runs the command, never from a sweep's
or a suite's worker: the workers hand their curves and scores back with their results, so a point
logged from a Dask worker cannot interleave with its parent, and a tracker on the head node (a
sqlite store, a folder) is reached on a remote cluster too. Which keys a run carries is
`trackers.events`; how a command's runs reach the loggers, and what a failing one costs, is
`trackers.tracking`; the built-in loggers are `trackers.mlflow_logger` and
`trackers.tensorboard_logger`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

from tosca_foundation.arguments import check_types
from tosca_foundation.errors import UserError, UserValueError
from tosca_foundation.registry import Registry
from tosca_foundation.text import printable


class Metric(NamedTuple):
    """One value of a series: `key` (such as "loss/task_000" or "A_t/test/entropy"), the value,
    and its step (an epoch, or a task)."""

    key: str
    value: float
    step: int


class Logger(ABC):
    """One tracker, configured once per command from its `--log` value: `where` is the text after
    "=" (None when not given; each logger says what it means), `runs_root` the command's runs/
    folder (where a logger that writes files puts them by default). `__init__` checks and writes
    nothing (raise UserError for a WHERE that cannot serve); the first `start` opens the tracker.
    A handle returned by `start` is the logger's own business: every later call gets it back."""

    name: ClassVar[str] = ""
    aliases: ClassVar[tuple[str, ...]] = ()  # other names --log takes for it
    summary: ClassVar[str] = ""
    extra: ClassVar[str | None] = None  # the pip extra that installs what it needs: tosca[extra]

    def __init__(self, where: str | None, runs_root: Path) -> None:
        self.where, self.runs_root = where, runs_root

    @abstractmethod
    def start(self, name: str, parent: Any | None) -> Any:
        """A new tracked run named `name`, a child of `parent` (a handle from `start`) or of none."""

    @abstractmethod
    def params(self, run: Any, params: dict[str, str | int | float | bool]) -> None:
        """The run's configuration, flat: "train.lr" -> 0.025."""

    @abstractmethod
    def metrics(self, run: Any, metrics: Sequence[Metric]) -> None:
        """A batch of values, in the order they were made."""

    @abstractmethod
    def artifacts(self, run: Any, files: Sequence[Path]) -> None:
        """The files the run made (regular files, read as they are now)."""

    @abstractmethod
    def end(self, run: Any, ok: bool) -> None:
        """The run is over: finished (`ok`), or stopped by an error."""

    @property
    def place(self) -> str:
        """This tracker as a sweep's or suite's ledger records it: the same text whenever the same
        tracker is meant (a logger with defaults says what they resolve to)."""
        return f"{self.name}={self.where or ''}"

    def opened_by(self) -> str:
        """One line for the end of a command that logged here: where its runs are and how to look
        at them (the command to run, or the address to open). A plug-in says its own; by default
        its place."""
        return f"--log {self.name}: the runs went to {self.where or 'its default place'}"

    def handle_id(self, run: Any) -> str | None:
        """Text that finds `run` again in a later command (`reopen`); None: runs cannot be found
        again, so a resumed sweep logs a new parent run."""
        return None

    def reopen(self, ident: str) -> Any | None:
        """The run `handle_id` named, as a handle to log more into (a parent marked running again);
        None when it is gone."""
        return None

    def discard(self, run: Any) -> None:  # noqa: B027 (optional: a logger that cannot keeps it)
        """Remove a run whose logging a kill cut short (it is logged again whole)."""


LOGGERS: Registry[type[Logger]] = Registry("tracker", "tosca_heads.trackers.logger_registry:LOGGERS", "--log")


def register_logger(cls: type[Logger]) -> type[Logger]:
    """Add a logger class to the registry (a class decorator): `--log NAME` (or one of its
    `aliases`) then sends runs to it. A name registered twice, or one that cannot be typed after
    --log, is refused.

    >>> @register_logger
    ... class DocPrinted(Logger):
    ...     name, summary = "doc_printed", "every figure on stdout"
    ...     def start(self, name, parent): return name
    ...     def params(self, run, params): pass
    ...     def metrics(self, run, metrics): print(*(f"{m.key}={m.value}" for m in metrics))
    ...     def artifacts(self, run, files): pass
    ...     def end(self, run, ok): pass
    >>> LOGGERS["doc_printed"] is DocPrinted
    True
    >>> del LOGGERS["doc_printed"]  # (a doctest leaves the registry as it found it)
    """
    check_types("register_logger", register_logger, {"cls": cls})  # a Logger subclass
    for name in (cls.name, *cls.aliases):
        if not isinstance(name, str) or not name.replace("_", "").replace("-", "").isalnum():
            raise UserValueError(f"logger name {name!r} is empty or not letters, digits, _ and -")
    return LOGGERS.add(cls.name, cls, cls.summary, module=cls.__module__, aliases=cls.aliases)


@dataclass(frozen=True)
class LogTarget:
    """One `--log` value: a logger's name and what follows "=" (None when nothing does)."""

    name: str
    where: str | None = None


def parse_targets(values: Sequence[str], flag: str = "--log") -> list[LogTarget]:
    """`--log` values (each NAME or NAME=WHERE; comma-separated names are split too) as targets,
    in order, a target given twice once; an unknown name is one line listing the known ones, naming
    `flag` (Python's face: `log`)."""
    targets: list[LogTarget] = []
    for value in values:
        parts = [value] if "=" in value else [p for p in value.split(",")]
        for part in (p.strip() for p in parts):
            name, _, where = part.partition("=")
            name = LOGGERS.pick(name.strip(), flag)
            if "=" in part and not where.strip():
                raise UserValueError(f"{flag} {part!r}: nothing after '='; give NAME or NAME=WHERE")
            target = LogTarget(name, where.strip() or None)
            if target not in targets:
                targets.append(target)
    return targets


def open_logger(target: LogTarget, runs_root: Path) -> Logger:
    """The logger a target names, configured; a missing optional dependency is one line saying
    which extra installs it."""
    cls = LOGGERS[target.name]
    try:
        return cls(target.where, runs_root)
    except ImportError as exc:
        missing = exc.name or str(exc)
        how = f"pip install 'tosca[{cls.extra}]'" if cls.extra else "install what it needs"
        raise UserError(f"--log {target.name} needs {missing}, which is not installed here: {how}") from None
    except UserError:
        raise
    except Exception as exc:  # a tracker's own refusal of its WHERE (foreign code): one line
        raise UserError(f"--log {target_text(target)}: {failure_text(exc)}") from None


def target_text(target: LogTarget) -> str:
    """NAME or NAME=WHERE, as the user typed it (printable)."""
    return printable(target.name if target.where is None else f"{target.name}={target.where}")


def failure_text(exc: BaseException) -> str:
    """A foreign exception as a few words on one line: its type and its message's first line."""
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    if isinstance(exc, UserError):  # tosca's own line says it all
        return printable(first)
    return printable(f"{type(exc).__name__}: {first}" if first else type(exc).__name__)
