"""Where a long job stands, for every command: done/total, rate and an estimate of the time left.

One module for all of them (extract, fit, sweep, baselines, suite, demo, predict, cache verify),
because the silent case is the one users meet in logs: with stderr on a terminal each piece of
work is a bar; anywhere else (a CI log, `nohup`, `make demo > log 2>&1`) it is a plain line on
stderr when the work starts, then at a steady interval (`TOSCA_PROGRESS_EVERY` seconds, 10 by
default) and when it ends, so a log shows progress while the job runs, not only at its end.
`TOSCA_PROGRESS` (or `tosca --progress`) chooses: `auto` (the default: bar on a terminal, lines
elsewhere), `bar` (or `1`), `lines`, `off` (or `0`).

The estimate of the time left is the work's steady rate: what was done since the first unit
ended, over the time since. The time before it ends (workers starting, a backbone loading, a first
compile) is left out of the rate, so a job whose first point pays for its start-up does not say it
has minutes left when it has seconds. The units ending within a tenth of that first time after it
(on parallel workers, or in one engine run) are a first burst that says nothing of the rate: until
a unit ends after it, the estimate is the `expected` number of seconds the caller may give (a
sweep's or a suite's plan, said "(planned)"), else the plain rate since the start. Work whose units
differ in cost (a suite's cells: a RanPAC cell takes a hundred times a SimpleCIL one) is not
counted but planned: each unit's planned seconds (`work`, `worked`) and the seconds it really took
(`spent`, as its worker measured them: no start-up, no waiting), and once a tenth of the planned
work is done the plan's time for the units (`work_wall`: the units shared by the workers, the
rest of `expected` being start-up and tables) is scaled by what the units done took against their
plan, and its start-up (`work_start`) replaced by the one the first units' end measured. The clock is a parameter: tests drive it by hand.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TextIO

from featcache.foundation.settings import setting

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


def clock_text(seconds: float) -> str:
    """'0:07', '12:30', '1:02:03'."""
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


BURST = 0.1  # units ending within this share of the first one's time count as the first burst
CALIBRATED = 0.1  # share of the planned work done from which the plan is scaled by what it took


@dataclass
class Task:
    """One piece of work: how much is done of how much, since when, and what it says beside."""

    label: str
    total: int | None
    unit: str
    clock: Clock
    expected: float | None = None  # seconds the caller expects it to take, before any is done
    completed: int = 0
    note: str = ""
    started: float = field(default=0.0)
    finished: bool = False
    _base: int = 0  # done before this process started (a resumed job): not counted in the rate
    work: float | None = None  # planned seconds of all its units, where they differ in cost
    worked: float = 0.0  # planned seconds of the units done so far (with `work`)
    spent: float = 0.0  # the seconds those units really took (with `work`)
    work_wall: float = 0.0  # the part of `expected` that is the units' own time, shared by the workers
    work_start: float = 0.0  # the part of `expected` before the first unit starts (workers starting)
    _events: list[tuple[float, int]] = field(default_factory=list)  # (time, completed)
    _start: float | None = None  # the start-up the first units' end measured (with `work`)

    def moved(self) -> None:
        """Note the time at which the done units changed (Board.update calls it)."""
        if self.completed > (self._events[-1][1] if self._events else self._base):
            if not self._events and self.completed > self._base:  # their end, less their own mean time
                self._start = self.clock() - self.started - self.spent / (self.completed - self._base)
            self._events.append((self.clock(), self.completed))

    def steady(self) -> float | None:
        """Units per second from the first unit's end to now; None until a unit ended after the
        first burst (those ending within BURST of the first one's time: units that ran side by
        side on workers or in one engine run, whose ends say nothing of the rate)."""
        if not self._events:
            return None
        start, done = self._events[0]
        burst = start + BURST * max(0.0, start - self.started)
        spent = self.clock() - start
        if self._events[-1][0] <= burst or spent <= 0:
            return None
        return (self.completed - done) / spent

    def rate(self) -> float | None:
        """Units per second done by this process (the steady rate where there is one), None before any."""
        steady = self.steady()
        if steady:
            return steady
        done, spent = self.completed - self._base, self.clock() - self.started
        return done / spent if done > 0 and spent > 0 else None

    def remaining(self) -> tuple[float | None, bool]:
        """(seconds left, whether from the caller's expectation rather than the measured rate)."""
        elapsed = self.clock() - self.started
        if self.work is not None and self.expected is not None:
            if self.worked >= CALIBRATED * self.work and self.spent > 0:
                start = self.work_start if self._start is None else max(0.0, self._start)
                scaled = (
                    self.expected
                    + (start - self.work_start)
                    + (self.spent / self.worked - 1) * self.work_wall
                )
                return (scaled - elapsed if scaled > elapsed else None), False
            return self._planned(elapsed)
        steady = self.steady()
        if steady is not None and self.total is not None and steady > 0:
            return max(0.0, (self.total - self.completed) / steady), False
        if self.expected is not None:
            return self._planned(elapsed)
        rate = self.rate()
        if self.total is not None and rate:
            return max(0.0, (self.total - self.completed) / rate), False
        return None, False

    def _planned(self, elapsed: float) -> tuple[float | None, bool]:
        """What the plan leaves; None once it is spent (a line says how far past it, never
        "0:00 left" while work goes on)."""
        assert self.expected is not None
        return (self.expected - elapsed if elapsed < self.expected else None), True

    def line(self) -> str:
        """'extract train: 1,200/27,000 (4%), 45.1 img/s, 0:27 elapsed, about 9:30 left'."""
        done = f"{self.completed:,}" + (f"/{self.total:,}" if self.total is not None else "")
        if self.total:
            done += f" ({100 * self.completed / self.total:.0f}%)"
        parts = [f"{self.label}: {done}" + (f" {self.unit}" if self.unit else "")]
        rate = self.rate()
        if rate:
            parts.append(f"{rate:.1f} {self.unit or 'units'}/s" if rate >= 1 else f"{1 / rate:.1f} s each")
        parts.append(f"{clock_text(self.clock() - self.started)} elapsed")
        if self.finished:
            parts[-1] = f"done in {clock_text(self.clock() - self.started)}"
        else:
            left, guessed = self.remaining()
            if left is not None:
                parts.append(f"about {clock_text(left)} left" + (" (planned)" if guessed else ""))
            elif guessed and self.expected is not None:  # no measure yet, and the plan is spent
                parts.append(f"{clock_text(self.clock() - self.started - self.expected)} past the plan")
        return ", ".join(parts) + (f"; {self.note}" if self.note else "")


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
        expected: float | None = None,
        completed: int = 0,
        work: float | None = None,
        work_wall: float = 0.0,
        work_start: float = 0.0,
    ) -> Task:
        """A new piece of work: its bar is shown at once; its first line when it has a plan to say
        (`expected`), else after the interval (a job that fails at once stays one line: its error).
        `work`: the planned seconds of all its units, where they differ in cost, `work_wall` and
        `work_start` the parts of `expected` that are the units and the start-up before them (then
        each update says the planned and the real seconds of the units done, `worked` and `spent`)."""
        task = Task(
            label, total, unit, self.clock, expected, completed, started=self.clock(), _base=completed
        )
        task.work, task.work_wall, task.work_start = work, work_wall, work_start
        with self._lock:
            self.tasks.append(task)
            if self._bar is not None:
                self._ids[id(task)] = self._bar.add_task(
                    label, total=total, completed=completed, rate="", eta=""
                )
        self._show(task, force=expected is not None)
        return task

    def update(
        self,
        task: Task,
        advance: int = 0,
        completed: int | None = None,
        total: int | None = None,
        note: str | None = None,
        label: str | None = None,
        worked: float | None = None,
        spent: float | None = None,
    ) -> None:
        """Move a piece of work on; a line is written when the interval has passed since its last.
        `worked`, `spent`: with `work`, the planned and the real seconds of the units done so far."""
        with self._lock:
            task.completed = task.completed + advance if completed is None else completed
            if worked is not None:
                task.worked = worked
            if spent is not None:
                task.spent = spent
            task.moved()
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
        left, guessed = task.remaining()
        self._bar.update(
            self._ids[id(task)],
            description=task.label,
            total=task.total,
            completed=task.completed,
            rate=" ".join(
                x for x in (f"{rate:.1f} {task.unit or 'units'}/s" if rate else "", task.note) if x
            ),
            eta="" if left is None else f"ETA {clock_text(left)}" + (" (planned)" if guessed else ""),
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
        TextColumn("{task.fields[eta]}"),
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
