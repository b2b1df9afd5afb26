"""What a command will take here, put together once for every command that plans (`sweep`,
`suite` and their dry runs, and the time a sweep's or a suite's progress line says until its units
end at a steady rate): the works' own seconds (each measured by its cost model: TOSCA's SGD steps
and the baselines' arithmetic in `tosca_heads.experiments.estimate`, an extraction's images in
`featcache.estimate`) shared by the workers, longest first; plus what is no arithmetic: the
command's own start (the interpreter, torch and tosca imported, the store checked, the plan), each
local Dask worker's start, each worker's first run (its kernels and caches warmed), the tables and
figures at the end. Each of those is the CPU time it takes on a quiet machine (measured on the
2-core dev machine) over the share of a core this process gets now (`cpu_share`, timed): on a
machine four processes share, four times as long.

Import-light: stdlib only.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from featcache.foundation.limits import usable_cores

# CPU seconds on a quiet machine (the 2-core dev VM, from CPU times taken under load, 2026-12-02):
COMMAND_CPU = 6.0  # a command's start: interpreter, torch and tosca, the store's checks, the plan's timings
WORKER_START_CPU = 5.0  # a local Dask worker: its nanny and process, torch and tosca imported
FIRST_RUN_CPU = 2.5  # a process's first run: the compiled step loaded, kernels and caches warmed
FINISH_CPU = 3.0  # tables, figures (matplotlib), summary, manifest
PER_WORK_SECONDS = 0.5  # dispatch, result transfer, the first read of a store in a process


@dataclass
class Estimate:
    """Seconds per part (`extract`, `train`, `baselines`, `start-up`, `finish`), the wall total
    once the works are shared between workers, each work's own seconds by its key (a suite's cell,
    a sweep's point: what a running job's progress weighs its units by), and a line per thing that
    could not be estimated or is missing."""

    parts: dict[str, float] = field(default_factory=dict)
    wall: float = 0.0
    missing: list[str] = field(default_factory=list)
    how: list[str] = field(default_factory=list)
    works: dict[str, float] = field(default_factory=dict)
    shared: float = 0.0  # the works' own wall time, shared by the workers (part of `wall`)

    def minutes(self) -> float:
        return self.wall / 60

    def running(self) -> float:
        """Seconds from the first unit's dispatch on: the wall less the command's own start (what a
        progress line says before any unit ended, the command having started already)."""
        return max(0.0, self.wall - self.parts.get("command", 0.0))


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


def startup_seconds(workers: int, works: int) -> float:
    """Before the first work ends: a local cluster's workers start when more than one process runs
    the works (as many at once as there are cores), and each process's first run warms up."""
    if not works:
        return 0.0
    started = WORKER_START_CPU * -(-workers // usable_cores()) if workers > 1 and works > 1 else 0.0
    return (started + FIRST_RUN_CPU) / cpu_share()


def plan_works(
    train: dict[str, float],
    baselines: dict[str, float],
    workers: int,
    extract: float = 0.0,
    what: str = "",
) -> Estimate:
    """The wall time of a command whose works (TOSCA runs in `train`, baselines in `baselines`,
    each's seconds by its key) are shared by `workers`, after `extract` seconds of extraction: the
    command's start, the workers' start, the works, the tables at the end. `what` says what the
    works are (its first `how` line, with what sharing them makes of them)."""
    works = {**train, **baselines}
    share = cpu_share()
    plan = Estimate(works=works)
    plan.parts = {
        "command": COMMAND_CPU / share if works or extract else 0.0,
        "extract": extract,
        "start-up": startup_seconds(workers, len(works)),
        "train": sum(train.values()),
        "baselines": sum(baselines.values()),
        "finish": FINISH_CPU / share if works else 0.0,
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
