"""Time estimates, in one place: the plan of a command (`Estimate`, put together by `plan_works`
for every command that plans: `sweep`, `suite` and their dry runs), the time left while it runs
(`TimeLeft`, what every progress line says) and the words of both (`Estimate.lines`,
`TimeLeft.words`). The costs are declared by what owns them and handed in as seconds: TOSCA's SGD
steps (`tosca_heads.running.cost_models`), each baseline's arithmetic (its class's `work`), an
extraction's images (`featcache.extraction_estimate`). Import-light: stdlib only.

A plan is the works' own seconds shared by the workers, longest first; plus what is no arithmetic:
the command's own start (the interpreter, torch and tosca imported, the store checked, the plan),
each local Dask worker's start and its first work's (the store read, the plan of its split, the
compiled step loaded), the tables, figures and the cluster's close at the end. Each of those is the
CPU time it takes on a quiet machine (measured on the 2-core dev machine, docs/benchmarks.md "Time
estimates") over the share of a core this process gets now (`cpu_share`, timed): on a machine four
processes share, four times as long.

The time left while it runs (`TimeLeft`): until a tenth of the planned work is done, what the plan
leaves ("(planned)"). Where each unit's planned seconds and the seconds it really took in its
worker are known (a suite's cells, a sweep's points), the plan is then redone from what the units
done took: each unit not done is its planned seconds times what the units of its cost model took
against their plan (the median unit's ratio once three are done, so a worker's first unit, which
pays its warm-up, does not skew it; a model none of whose units ended: what all took), shared by
the workers from the start-up the units measured (their end less their own seconds: the time
before the first unit, whatever it was, is not a rate). A long unit last is so planned as long,
not as the average unit. Work of equal units (an extraction's images) is counted: its steady rate
since the first unit ended, units ending in a first burst (parallel workers) not counted as a rate.
A progress line ends with its last unit: the tables after it are in the plan's wall, not in it.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tosca_foundation.limits import usable_cores

# CPU seconds on a quiet machine (the 2-core dev VM; each piece timed apart, docs/benchmarks.md
# "Time estimates", 2026-12-02):
COMMAND_CPU = 4.5  # a command's start: interpreter, torch and tosca, the store's checks, the plan's timings
WORKER_START_CPU = 3.0  # a local Dask worker: its nanny and process (they start side by side, one a core)
FIRST_RUN_CPU = 2.0  # a process's first work: torch and tosca imported, the store read, the step compiled
FINISH_CPU = 2.5  # tables, figures (matplotlib), summary, manifest
CLUSTER_CLOSE_CPU = 2.5  # a local cluster's workers and nannies stopped
PER_WORK_SECONDS = 0.1  # a work's dispatch and its result's transfer


@dataclass
class Estimate:
    """Seconds per part (`extract`, `train`, `baselines`, `start-up`, `finish`), the wall total
    once the works are shared between workers, each work's own seconds by its key (a suite's cell,
    a sweep's point: what a running job's progress weighs its units by) and its cost model
    (`kinds`: `tosca`, or the baseline's name), and a line per thing that could not be estimated
    or is missing."""

    parts: dict[str, float] = field(default_factory=dict)
    wall: float = 0.0
    missing: list[str] = field(default_factory=list)
    how: list[str] = field(default_factory=list)
    works: dict[str, float] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)
    shared: float = 0.0  # the works' own wall time, shared by the workers (part of `wall`)
    workers: int = 1

    def minutes(self) -> float:
        return self.wall / 60

    def running(self) -> float:
        """Seconds from the first unit's dispatch to the last unit's end: the wall less the
        command's own start and the tables after the units (what a progress line of the units says
        before any ended: the command has started already, and the line ends with its last unit)."""
        return max(0.0, self.wall - self.parts.get("command", 0.0) - self.parts.get("finish", 0.0))

    def fields(self) -> dict[str, object]:
        """What a dry run's `--json` says of it."""
        return {"estimate_seconds": self.wall, "parts_seconds": self.parts, "missing": self.missing}

    def lines(self) -> list[tuple[str, str]]:
        """The estimate in words, each line with its kind (`said`, `how`, `missing`): the wall time
        by part, how it was worked out, what is missing."""
        parts = ", ".join(f"{name} {seconds / 60:.1f}" for name, seconds in self.parts.items() if seconds)
        if self.wall or not self.missing:
            head = f"estimated: about {self.minutes():.1f} min here" + (
                f" (minutes: {parts})" if parts else ""
            )
        else:
            head = "estimated: nothing can be estimated until what is missing is there"
        return [
            ("said", head),
            *(("how", f"  {line}") for line in self.how),
            *(("missing", m) for m in self.missing),
        ]


@functools.lru_cache(maxsize=1)
def cpu_share() -> float:
    """The share of one core this process gets now: its CPU time over the wall time of 0.3 s of
    busy work (1 on a quiet machine; about 0.25 where four processes want each core), at least 0.05."""
    start, cpu, n = time.perf_counter(), time.process_time(), 0
    while time.perf_counter() - start < 0.3:
        n += sum(range(1000))
    wall = time.perf_counter() - start
    return min(1.0, max(0.05, (time.process_time() - cpu) / wall))


# ------------------------------------------------------------------------------------------ many works


def wall_seconds(works: Sequence[float], workers: int) -> float:
    """Works shared between workers, longest first, each to the least loaded: the longest load."""
    loads = [0.0] * max(1, min(workers, len(works) or 1))
    for seconds in sorted(works, reverse=True):
        loads[loads.index(min(loads))] += seconds + PER_WORK_SECONDS
    return max(loads)


def cluster(workers: int, works: int) -> bool:
    """Whether the works run on a local cluster (more than one process), not in the command's own."""
    return workers > 1 and works > 1


def startup_seconds(workers: int, works: int) -> float:
    """Before the first work ends: a local cluster's workers start when more than one process runs
    the works (as many at once as there are cores), and each process's first work warms up."""
    if not works:
        return 0.0
    started = WORKER_START_CPU * -(-workers // usable_cores()) if cluster(workers, works) else 0.0
    return (started + FIRST_RUN_CPU) / cpu_share()


def plan_works(
    train: dict[str, float],
    baselines: dict[str, float],
    workers: int,
    extract: float = 0.0,
    what: str = "",
    kinds: dict[str, str] | None = None,
) -> Estimate:
    """The wall time of a command whose works (TOSCA runs in `train`, baselines in `baselines`,
    each's seconds by its key) are shared by `workers`, after `extract` seconds of extraction: the
    command's start, the workers' start, the works, the tables (and the cluster's close) at the
    end. `kinds`: each baseline's cost model by its key (default: its key; TOSCA's are `tosca`).
    `what` says what the works are (its first `how` line, with what sharing them makes of them)."""
    works = {**train, **baselines}
    share = cpu_share()
    plan = Estimate(works=works, workers=max(1, workers))
    plan.kinds = {**dict.fromkeys(train, "tosca"), **{k: (kinds or {}).get(k, k) for k in baselines}}
    close = CLUSTER_CLOSE_CPU if cluster(workers, len(works)) else 0.0
    plan.parts = {
        "command": COMMAND_CPU / share if works or extract else 0.0,
        "extract": extract,
        "start-up": startup_seconds(workers, len(works)),
        "train": sum(train.values()),
        "baselines": sum(baselines.values()),
        "finish": (FINISH_CPU + close) / share if works else 0.0,
    }
    plan.shared = wall_seconds(list(works.values()), workers) if works else 0.0
    plan.wall = plan.shared + sum(v for k, v in plan.parts.items() if k not in ("train", "baselines"))
    if what:
        plan.how.append(f"{what}, shared by {workers} worker(s): {plan.shared / 60:.1f} min")
    if share < 0.9:
        plan.how.append(
            f"this process gets {share:.0%} of a core now: what is not arithmetic takes {1 / share:.1f}x"
        )
    return plan


# ------------------------------------------------------------------------------------------ time left

Clock = Callable[[], float]
BURST = 0.1  # units ending within this share of the first one's time count as the first burst
STEADY = 3  # units of one cost model done from which their median ratio is read, not their sum's
CALIBRATED = 0.1  # share of the planned work done from which the plan is redone from what it took


def clock_text(seconds: float) -> str:
    """'0:07', '12:30', '1:02:03'."""
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


@dataclass
class TimeLeft:
    """The time left of one piece of work while it runs (the module docstring): `expected` the
    seconds its plan gives it from its start, `plan` the plan itself where its units differ in cost
    (then `unit_done` tells each unit's key and the seconds it took in its worker)."""

    clock: Clock
    total: int | None = None
    expected: float | None = None
    plan: Estimate | None = None
    started: float = 0.0
    completed: int = 0
    base: int = 0  # done before this process started (a resumed job): not counted in the rate
    events: list[tuple[float, int]] = field(default_factory=list)  # (time, completed)
    done: dict[str, tuple[float, float]] = field(default_factory=dict)  # key -> (end, seconds it took)

    def moved(self, completed: int) -> None:
        """The done units are now `completed`."""
        if completed > (self.events[-1][1] if self.events else self.base):
            self.events.append((self.clock(), completed))
        self.completed = completed

    def unit_done(self, key: str, seconds: float) -> None:
        """A unit of the plan ended now, having taken `seconds` in its worker (no start-up, no wait)."""
        self.done[key] = (self.clock(), seconds)

    # ---------------------------------------------------------------- rates

    def steady(self) -> float | None:
        """Units per second from the first unit's end to now; None until a unit ended after the
        first burst (those ending within BURST of the first one's time: units that ran side by
        side on workers or in one engine run, whose ends say nothing of the rate)."""
        if not self.events:
            return None
        start, done = self.events[0]
        burst = start + BURST * max(0.0, start - self.started)
        spent = self.clock() - start
        if self.events[-1][0] <= burst or spent <= 0:
            return None
        return (self.completed - done) / spent

    def rate(self) -> float | None:
        """Units per second done by this process (the steady rate where there is one), None before any."""
        steady = self.steady()
        if steady:
            return steady
        done, spent = self.completed - self.base, self.clock() - self.started
        return done / spent if done > 0 and spent > 0 else None

    def ratio(self, kind: str) -> float:
        """What the units of one cost model took against their plan: their median unit's once
        STEADY are done (a worker's first unit pays its warm-up), else their sum's. A model none of
        whose units is done: what all units done took against their plan (the machine's pace, which
        every model shares; a model's own error stays with its units)."""
        assert self.plan is not None
        pairs = [
            (self.plan.works[key], seconds, self.plan.kinds.get(key) == kind)
            for key, (_, seconds) in self.done.items()
            if self.plan.works.get(key, 0.0) > 0
        ]
        mine = [(planned, seconds) for planned, seconds, same in pairs if same]
        if len(mine) >= STEADY:
            return statistics.median(seconds / planned for planned, seconds in mine)
        if mine:
            return sum(seconds for _, seconds in mine) / sum(planned for planned, _ in mine)
        if not pairs:
            return 1.0
        return sum(p[1] for p in pairs) / sum(p[0] for p in pairs)

    def calibrated(self) -> bool:
        """Whether enough of the plan's work is done (CALIBRATED of it) to redo the plan from it."""
        if self.plan is None or not self.plan.works or not self.done:
            return False
        worked = sum(self.plan.works.get(key, 0.0) for key in self.done)
        return worked >= CALIBRATED * sum(self.plan.works.values())

    # ---------------------------------------------------------------- time left

    def remaining(self) -> tuple[float | None, bool]:
        """(seconds left, whether from the plan rather than what was measured); None: not known, or
        the plan is spent before anything was measured."""
        elapsed = self.clock() - self.started
        if self.calibrated():
            return self._replanned(), False
        if self.plan is None:
            steady = self.steady()
            if steady is not None and self.total is not None and steady > 0:
                return max(0.0, (self.total - self.completed) / steady), False
        if self.expected is not None:
            return (self.expected - elapsed if elapsed < self.expected else None), True
        rate = self.rate()
        if self.total is not None and rate:
            return max(0.0, (self.total - self.completed) / rate), False
        return None, False

    def _replanned(self) -> float:
        """The plan redone from what its units took (the module docstring): the units shared by the
        workers from the measured start-up on, each done one at what it took, each other at its
        plan times its cost model's ratio. Past that schedule with units still running, as late
        again as it is late now (never "0:00 left" while work goes on)."""
        assert self.plan is not None
        now = self.clock()
        start = min(end - seconds for end, seconds in self.done.values())
        left = {
            key: planned * self.ratio(self.plan.kinds.get(key, key))
            for key, planned in self.plan.works.items()
            if key not in self.done
        }
        taken = [seconds for _, seconds in self.done.values()]
        scheduled = start + wall_seconds([*taken, *left.values()], self.plan.workers) - now
        return max(abs(scheduled), 1.0) if left else 0.0

    def words(self, finished: bool) -> str:
        """'0:27 elapsed, about 9:30 left' (planned: '(planned)'; a plan spent before anything was
        measured: '0:10 past the plan'; a finished piece: 'done in 0:37')."""
        elapsed = self.clock() - self.started
        if finished:
            return f"done in {clock_text(elapsed)}"
        said = f"{clock_text(elapsed)} elapsed"
        left, planned = self.remaining()
        if left is not None:
            return said + f", about {clock_text(left)} left" + (" (planned)" if planned else "")
        if planned and self.expected is not None:
            return said + f", {clock_text(elapsed - self.expected)} past the plan"
        return said

    def eta(self) -> str:
        """A bar's column: 'ETA 9:30', 'ETA 1:00 (planned)' or nothing."""
        left, planned = self.remaining()
        return "" if left is None else f"ETA {clock_text(left)}" + (" (planned)" if planned else "")
