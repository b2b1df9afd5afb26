"""Where a long job stands, for every command: done/total, the rate and the time it has taken.

One module for all of them (extract, fit, sweep, baselines, suite, demo, predict, cache verify),
because the silent case is the one users meet in logs: with stderr on a terminal each piece of
work is a bar; anywhere else (a CI log, `nohup`, `make demo > log 2>&1`) it is a plain line on
stderr when the work starts, then at a steady interval (`TOSCA_PROGRESS_EVERY` seconds, 10 by
default) and when it ends, so a log shows progress while the job runs, not only at its end.
`TOSCA_PROGRESS` (or `tosca --progress`) chooses: `auto` (the default: bar on a terminal, lines
elsewhere), `bar` (or `1`), `lines`, `off` (or `0`).

No line guesses the time left (issue 54, point 5: the guesses were 0.02 to 2.2 of the time really
left, docs/benchmarks.md "What earns its lines"); a plan's estimate is said by `--dry-run`, before the work
(`tosca_foundation.time_estimates`). Every time a line prints says what it times: "0:27 elapsed"
and "done in 0:37" are the wall time of the piece of work the line names, from its start (a
baseline's from before its first task, as its table's seconds) to now or to its last unit. The
clock is a parameter: tests drive it by hand.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TextIO

from tosca_foundation import long_work
from tosca_foundation.settings import setting
from tosca_foundation.time_estimates import clock_text

Clock = Callable[[], float]

MODES = ("auto", "bar", "lines", "off", "1", "0")
DEFAULT_EVERY = 10.0


def mode() -> str:
    """`bar`, `lines` or `off`, from TOSCA_PROGRESS and whether stderr is a terminal."""
    chosen = setting("TOSCA_PROGRESS") or "auto"
    chosen = {"1": "bar", "0": "off"}.get(chosen, chosen)
    if chosen == "auto":
        return "bar" if sys.stderr.isatty() else "lines"
    return chosen


def every() -> float:
    """Seconds between two plain lines of one piece of work (TOSCA_PROGRESS_EVERY)."""
    value = setting("TOSCA_PROGRESS_EVERY")
    return DEFAULT_EVERY if value is None else float(value)


@dataclass
class Stopwatch:
    """How much of one piece of work is done and since when: its rate and the time it has taken.
    `base`: done before this process started (a resumed job), not counted in the rate."""

    clock: Clock
    started: float
    completed: int = 0
    base: int = 0

    def rate(self) -> float | None:
        """Units per second done by this process since the work started; None before any."""
        done, spent = self.completed - self.base, self.clock() - self.started
        return done / spent if done > 0 and spent > 0 else None

    def words(self, finished: bool) -> str:
        """'0:27 elapsed' while it runs, 'done in 0:37' once it ended: the wall time since its start."""
        elapsed = clock_text(self.clock() - self.started)
        return f"done in {elapsed}" if finished else f"{elapsed} elapsed"


@dataclass
class Task:
    """One piece of work: how much is done of how much, what it says beside, and its stopwatch."""

    label: str
    total: int | None
    unit: str
    watch: Stopwatch
    note: str = ""
    finished: bool = False

    @property
    def completed(self) -> int:
        return self.watch.completed

    @property
    def started(self) -> float:
        return self.watch.started

    def rate(self) -> float | None:
        return self.watch.rate()

    def line(self) -> str:
        """'extract train: 1,200/27,000 (4%), 45.1 img/s, 0:27 elapsed'."""
        done = f"{self.completed:,}" + (f"/{self.total:,}" if self.total is not None else "")
        if self.total:
            done += f" ({100 * self.completed / self.total:.0f}%)"
        parts = [f"{self.label}: {done}" + (f" {self.unit}" if self.unit else "")]
        rate = self.rate()
        if rate:
            parts.append(f"{rate:.1f} {self.unit or 'units'}/s" if rate >= 1 else f"{1 / rate:.1f} s each")
        parts.append(self.watch.words(self.finished))
        return ", ".join(parts) + "".join(f"; {said}" for said in (self.note, self.under_way()) if said)

    def under_way(self) -> str:
        """A long computation of this process under way while the work runs ("in a 10,000 x 10,000
        ridge solve for 0:42", `tosca_foundation.long_work`): between two moves of a baseline's
        tasks a single call may take minutes."""
        return "" if self.finished else long_work.said()


class Board:
    """The pieces of work of one command, shown as bars or lines (see the module docstring)."""

    def __init__(
        self,
        shown: str | None = None,
        interval: float | None = None,
        stream: TextIO | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.mode = shown or mode()
        self.interval = every() if interval is None else interval
        self.stream = stream
        self.clock = clock
        self.tasks: list[Task] = []
        self._last: dict[int, float] = {}
        self._lock = threading.Lock()
        self._bar: Any = None
        self._ids: dict[int, Any] = {}
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    # ---------------------------------------------------------------- the caller's side

    def task(
        self,
        label: str,
        total: int | None = None,
        unit: str = "",
        completed: int = 0,
        at_once: bool = False,
    ) -> Task:
        """A new piece of work: its bar is shown at once; its first line at once where `at_once`
        (a sweep's or a suite's units, said as they start: a log shows them before the first
        ends), else after the interval (a job that fails at once stays one line: its error). Work
        of nothing (a total of 0: a sweep resumed with every point done) is never shown: no `0/0`
        bar, no line; the command says why."""
        task = Task(label, total, unit, Stopwatch(self.clock, self.clock(), completed, completed))
        if total == 0:
            task.finished = True
            return task
        with self._lock:
            self.tasks.append(task)
            if self._bar is not None:
                self._ids[id(task)] = self._bar.add_task(label, total=total, completed=completed, rate="")
        self._show(task, force=at_once)
        return task

    def update(
        self,
        task: Task,
        advance: int = 0,
        completed: int | None = None,
        total: int | None = None,
        note: str | None = None,
        label: str | None = None,
    ) -> None:
        """Move a piece of work on; a line is written when the interval has passed since its last."""
        if task.finished and not task.total:  # work of nothing: never shown (`task`)
            return
        with self._lock:
            task.watch.completed = task.completed + advance if completed is None else completed
            if total is not None:
                task.total = total
            if note is not None:
                task.note = note
            if label is not None:
                task.label = label
        if task.total is not None and task.completed >= task.total:
            return self.finish(task)
        self._show(task)

    def finish(self, task: Task) -> None:
        """The work is over: its last line says so (a bar stays at its end). Work that ended within
        the interval without a line stays silent: a quick command prints its answer alone."""
        if task.finished:
            return
        task.finished = True
        spoke = id(task) in self._last or self.clock() - task.started >= self.interval
        self._show(task, force=spoke)

    # ---------------------------------------------------------------- showing

    def _show(self, task: Task, force: bool = False) -> None:
        if self.mode == "off":
            return
        if self.mode == "bar":
            return self._draw(task)
        now = self.clock()
        with self._lock:
            if not force and now - self._last.get(id(task), task.started) < self.interval:
                return
            self._last[id(task)] = now
            stream = self.stream or sys.stderr
            stream.write(task.line() + "\n")
            stream.flush()

    def _draw(self, task: Task) -> None:
        if self._bar is None or id(task) not in self._ids:
            return
        rate = task.rate()
        self._bar.update(
            self._ids[id(task)],
            description=task.label,
            total=task.total,
            completed=task.completed,
            rate=" ".join(
                x
                for x in (f"{rate:.1f} {task.unit or 'units'}/s" if rate else "", task.note, task.under_way())
                if x
            ),
        )

    def _tick(self) -> None:
        """Lines at a steady interval even when no unit ends in it (a sweep point of minutes)."""
        while not self._stop.wait(max(self.interval, 0.5)):
            self._tick_once()

    def _tick_once(self) -> None:
        for task in list(self.tasks):
            if not task.finished:
                self._show(task)

    def __enter__(self) -> Board:
        if self.mode == "bar":
            self._bar = _rich_progress()
            self._bar.start()
        elif self.mode == "lines" and self.interval > 0:
            self._ticker = threading.Thread(target=self._tick, name="tosca-progress", daemon=True)
            self._ticker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(1)
        if exc[0] is None:
            for task in self.tasks:
                self.finish(task)
        if self._bar is not None:
            for task in self.tasks:
                self._draw(task)
            self._bar.stop()


def _rich_progress() -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from tosca_cli.terminal import err

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    )


@contextmanager
def progress(
    shown: str | None = None, interval: float | None = None, stream: TextIO | None = None
) -> Iterator[Board]:
    """`with progress() as board: task = board.task("extract train", 27000, "img")`."""
    with Board(shown, interval, stream) as board:
        yield board
