"""How a command's runs reach its loggers: `Tracking` is the loggers `--log` asked for, `TrackedRun`
one run in all of them, `TrackedGroup` a sweep's or suite's parent run with a child per point or
cell, continued across reruns of the same folder (`trackers.ledger`).

What a tracker costs the run: nothing. Its WHERE is checked before any work (a bad one is one line
and exit 2, nothing written); once the run has started, a logger that fails (a server gone, a disk
full, a planted link) is one line on stderr naming it, is told nothing more for the rest of the
command, and the command goes on to write every result it would have written: the run's own files
are the record, a tracker a view of them (the same command run again logs what it missed).
"""

from __future__ import annotations

import csv
import hashlib
import json
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tosca_foundation import atomic
from tosca_foundation.errors import UserError
from tosca_foundation.plugins import foreign_code
from tosca_foundation.text import tell, tell_at_end
from tosca_heads.records.run_folder import RunResult, StageResult
from tosca_heads.trackers.events import record_metrics, result_record, run_files, stage_metrics
from tosca_heads.trackers.ledger import Ledger
from tosca_heads.trackers.logger_registry import Logger, Metric, failure_text, open_logger, parse_targets


@dataclass
class Tracking:
    """The loggers a command was asked for (none: every call does nothing), and which of them
    stopped after a failure."""

    loggers: list[Logger] = field(default_factory=list)
    stopped: set[int] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.loggers)

    def call(self, i: int, what: Callable[[Logger], Any]) -> Any:
        """`what(logger i)`, unless that logger stopped; a failure stops it, said in one line."""
        if i in self.stopped:
            return None
        logger = self.loggers[i]
        try:
            with foreign_code():  # its prints to stderr; an exit it raises is a failure like any other
                return what(logger)
        except Exception as exc:
            self.stopped.add(i)
            tell(
                f"--log {logger.name} stopped ({failure_text(exc)}); the results are all written "
                "as usual, the tracker keeps what it had before (run the same command again to log it whole)",
                "warning",
            )
            return None

    def opened_by(self, i: int) -> str | None:
        """Logger i's line for the end of the command (`Logger.opened_by`); None when it stopped
        (its warning is its one line, and says what it holds)."""
        if i in self.stopped:
            return None
        logger = self.loggers[i]
        try:
            with foreign_code():
                return logger.opened_by()
        except Exception as exc:  # a plug-in's own line failed: where it was told to write, instead
            return f"--log {logger.name}: the runs went to {logger.place} ({failure_text(exc)})"

    def said_at_end(self) -> None:
        """Each logger's line (`opened_by`) told for the end of the command, once per tracker: this
        command logs to it (a run started, or a sweep's or suite's parent continued)."""
        for i, logger in enumerate(self.loggers):
            tell_at_end(f"tracker {logger.place}", lambda i=i: self.opened_by(i))

    def start(
        self,
        name: str,
        params: dict[str, Any],
        parent: TrackedRun | None = None,
        only: Sequence[int] | None = None,
    ) -> TrackedRun | None:
        """A run named `name` in every logger (`only` those, a child of `parent`'s run in each), its
        params logged; None without loggers."""
        if not self.loggers:
            return None
        self.said_at_end()
        handles: dict[int, Any] = {}
        for i in range(len(self.loggers)) if only is None else only:
            above = None if parent is None else parent.handles.get(i)
            if parent is not None and above is None:
                continue
            handle = self.call(i, lambda logger, above=above: logger.start(name, above))
            if handle is not None:
                handles[i] = handle
        run = TrackedRun(self, handles)
        run.params(params)
        return run

    def group(self, folder: Path, name: str, params: dict[str, Any]) -> TrackedGroup | None:
        """A sweep's or suite's parent run, the one its folder's ledger names where the same
        trackers logged it before with the same params (None without loggers). Nothing is told
        to a logger until a child or the end needs it: a rerun with nothing new logs nothing."""
        if not self.loggers:
            return None
        self.said_at_end()
        return TrackedGroup(self, Ledger(Path(folder)), name, params)


@dataclass
class TrackedRun:
    """One run in every logger of a command (logger index -> its handle)."""

    tracking: Tracking
    handles: dict[int, Any]
    logged: set[tuple[str, int]] = field(default_factory=set)
    ended: bool = False
    on_end: Callable[[TrackedRun, bool], None] | None = None

    def _each(self, what: Callable[[Logger, Any], None]) -> None:
        for i, handle in self.handles.items():
            self.tracking.call(i, lambda logger, handle=handle: what(logger, handle))

    def params(self, params: dict[str, Any]) -> None:
        if params:
            self._each(lambda logger, run: logger.params(run, params))

    def metrics(self, metrics: Sequence[Metric]) -> None:
        """A batch of values; a (key, step) this run logged already is not sent again."""
        fresh = []
        for m in metrics:
            if (m.key, m.step) not in self.logged:
                self.logged.add((m.key, m.step))
                fresh.append(m)
        if fresh:
            self._each(lambda logger, run: logger.metrics(run, fresh))

    def stage(self, stage: StageResult) -> None:
        """What a run logs after one task."""
        self.metrics(stage_metrics(stage))

    def finish(
        self,
        record: dict[str, Any] | None = None,
        files: Sequence[Path] = (),
        curves: dict[int, Any] | None = None,
        names: dict[str, str] | None = None,
    ) -> None:
        """A finished record's figures (`trackers.events.record_metrics`), the files, the end."""
        if record is not None:
            self.metrics(record_metrics(record, curves, names))
        if files:
            self._each(lambda logger, run: logger.artifacts(run, list(files)))
        self.end(True)

    def end(self, ok: bool) -> None:
        if not self.ended:
            self.ended = True
            self._each(lambda logger, run: logger.end(run, ok))
            if self.on_end is not None:
                self.on_end(self, ok)

    def run_result(self, result: RunResult, files: Sequence[Path] | None = None) -> None:
        """A whole run at once (a fit, a sweep's point, a suite's cell, a comparison's TOSCA run),
        with `files` (None: the files its run folder holds)."""
        record, curves = result_record(result)
        self.finish(record, run_files(result.run_dir) if files is None else files, curves)


def method_result(run: TrackedRun, result: Any, files: Sequence[Path] = ()) -> None:
    """A baseline's `MethodResult` at once: its blocks on test (and validation), its files."""
    record = {
        "routers": {result.method: result.metrics},
        "validation": {result.method: result.validation or {}},
    }
    run.finish(record, files)


class TrackedGroup:
    """A sweep's or a suite's parent run in every logger, with one child per point or cell, that a
    rerun of the same folder continues: a logger that can find its runs again (`Logger.reopen`)
    gets the same parent, marked running again, its finished children kept and any child a kill cut
    short discarded and logged again; one that cannot, or whose parent was logged with other params
    (a grid grown since), gets a new parent holding every point (the old one, if left running, is
    ended as failed). `child` is asked for every point or cell, those finished earlier included, so
    the parent ends holding all of them."""

    def __init__(self, tracking: Tracking, ledger: Ledger, name: str, params: dict[str, Any]) -> None:
        self.tracking, self.ledger, self.name, self.params = tracking, ledger, name, params
        self.digest = hashlib.sha256(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()[
            :16
        ]
        self.run = TrackedRun(tracking, {})
        self.places = [logger.place for logger in tracking.loggers]
        self.changed: set[int] = set()  # loggers told something in this command

    def _entry(self, i: int) -> dict[str, Any] | None:
        entry = self.ledger.entries.get(self.places[i])
        return entry if entry is not None and entry.get("params") == self.digest else None

    def _open(self, i: int) -> Any:
        """Logger i's parent handle: the one from before (reopened) or a new one."""
        if i in self.run.handles:
            return self.run.handles[i]
        call = self.tracking.call
        before = self.ledger.entries.get(self.places[i])
        handle = None
        if before is not None and isinstance(before.get("parent"), str):
            if before.get("params") == self.digest:
                handle = call(i, lambda logger: logger.reopen(before["parent"]))
            elif not before.get("finished"):  # left running under other params: ended, not continued
                old = call(i, lambda logger: logger.reopen(before["parent"]))
                if old is not None:
                    call(i, lambda logger: logger.end(old, False))
        if handle is not None:
            for ident in before.get("open", {}).values():  # children a kill cut short
                cut = call(i, lambda logger, ident=ident: logger.reopen(ident))
                if cut is not None:
                    call(i, lambda logger, cut=cut: logger.discard(cut))
            entry = {**before, "open": {}, "finished": False}
        else:
            handle = call(i, lambda logger: logger.start(self.name, None))
            if handle is None:
                return None
            self.run.handles[i] = handle
            call(i, lambda logger: logger.params(handle, self.params))
            ident = call(i, lambda logger: logger.handle_id(handle))
            entry = {"parent": ident, "params": self.digest, "finished": False, "children": {}, "open": {}}
        self.run.handles[i] = handle
        self.changed.add(i)
        if isinstance(entry.get("parent"), str):
            self.ledger.entries[self.places[i]] = entry
            self.ledger.save()
        return handle

    def child(self, key: str, name: str, params: dict[str, Any]) -> TrackedRun | None:
        """Point or cell `key`'s run, in each logger that has not logged it under this parent yet
        (None: every logger has)."""
        needed = []
        for i in range(len(self.tracking.loggers)):
            entry = self._entry(i)
            logged = entry is not None and key in entry.get("children", {})
            if i not in self.tracking.stopped and not logged and self._open(i) is not None:
                needed.append(i)
        if not needed:
            return None
        run = self.tracking.start(name, params, self.run, needed)
        if run is None or not run.handles:
            return None
        for i, handle in run.handles.items():
            ident = self.tracking.call(i, lambda logger, handle=handle: logger.handle_id(handle))
            entry = self._entry(i)
            if entry is not None and isinstance(ident, str):
                entry["open"][key] = ident
        self.ledger.save()

        def ended(run: TrackedRun, ok: bool) -> None:
            for i in run.handles:
                entry = self._entry(i)
                if entry is not None and key in entry["open"]:
                    ident = entry["open"].pop(key)
                    if ok and i not in self.tracking.stopped:
                        entry["children"][key] = ident
            self.ledger.save()

        run.on_end = ended
        return run

    def finish(self, metrics: Sequence[Metric], files: Sequence[Path]) -> None:
        """The parent's own figures and files, and its end, in each logger that logged anything
        in this command or whose parent was not finished (a finished sweep rerun logs nothing)."""
        for i in range(len(self.tracking.loggers)):
            entry = self._entry(i)
            if i not in self.changed and entry is not None and entry.get("finished"):
                continue
            self._open(i)
        if not self.run.handles:
            return
        self.run.metrics(metrics)
        self.run.finish(None, files)
        for i in self.run.handles:
            entry = self._entry(i)
            if entry is not None and i not in self.tracking.stopped:
                entry["finished"] = True
        self.ledger.save()

    def fail(self) -> None:
        """End the parent as failed after an error stopped the command (that error is the one to
        tell); a rerun continues it."""
        with suppress(UserError):
            self.run.end(False)


@contextmanager
def rows_file(rows: Sequence[dict[str, Any]], name: str) -> Iterator[Path]:
    """`rows` as a CSV file named `name` (their keys the header) in a private temporary folder,
    removed when the block ends: a point's own table, as an artifact of its child run."""
    with tempfile.TemporaryDirectory(prefix="tosca-tracked-") as folder:
        path = Path(folder) / name
        with atomic.writing(path, "w", newline="") as fh:
            writer = csv.DictWriter(fh, list(rows[0]) if rows else [])
            writer.writeheader()
            writer.writerows(rows)
        yield path


def open_tracking(values: Sequence[str], runs_root: Path = Path("runs"), flag: str = "--log") -> Tracking:
    """The loggers `--log` asks for, each configured now: a missing extra or a WHERE that cannot
    serve is one line before anything runs (naming `flag`: Python's face says `log`), and nothing
    is written."""
    return Tracking([open_logger(target, runs_root) for target in parse_targets(values, flag)])


def end_failed(run: TrackedRun | TrackedGroup | None) -> None:
    """End `run` as failed, after an error stopped it (that error is the one to tell)."""
    if isinstance(run, TrackedGroup):
        run.fail()
    elif run is not None:
        with suppress(UserError):
            run.end(False)
