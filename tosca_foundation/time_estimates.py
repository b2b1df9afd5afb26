"""Time estimates, in one place: the plan of a command (`Estimate`, put together by `plan_works`
for every command that plans: `sweep`, `suite` and their dry runs) and its words
(`Estimate.lines`). The costs are declared by what owns them and handed in as seconds: TOSCA's SGD
steps (`tosca_heads.running.cost_models`), each baseline's arithmetic (its class's `work`), an
extraction's images (`featcache.extraction_estimate`). Import-light: stdlib only.

A plan is the works' own seconds shared by the workers, longest first; plus what is no arithmetic:
the command's own start (the interpreter, torch and tosca imported, the store checked, the plan),
each local Dask worker's start and its first work's (the store read, the plan of its split, the
compiled step loaded), the tables, figures and the cluster's close at the end. Each of those is the
CPU time it takes on a quiet machine (measured on the 2-core dev machine, docs/benchmarks.md "Time
estimates") over the share of a core this process gets now (`cpu_share`, timed): on a machine four
processes share, four times as long.

What is kept is what held within 2x of the real time (docs/benchmarks.md "What earns its lines":
the dry-run estimates of a sweep, a suite and an extraction, 0.47 to 1.73 of real, quiet and
loaded). The "time left" of running work (from the plan, then the plan redone from the units'
seconds, or an extraction's rate) went with issue 54, point 5: its planned lines were 0.02-0.08
of the time really left on a loaded machine and 2.1-2.2 quiet, its measured ones 0.18 of it on an
extraction. A running job's lines say what was done and the time it has taken
(`tosca_cli.progress`), never a guess of what is left.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
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
    once the works are shared between workers, and a line per thing that could not be estimated
    or is missing."""

    parts: dict[str, float] = field(default_factory=dict)
    wall: float = 0.0
    missing: list[str] = field(default_factory=list)
    how: list[str] = field(default_factory=list)
    shared: float = 0.0  # the works' own wall time, shared by the workers (part of `wall`)

    def minutes(self) -> float:
        return self.wall / 60

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
) -> Estimate:
    """The wall time of a command whose works (TOSCA runs in `train`, baselines in `baselines`,
    each's seconds by its key) are shared by `workers`, after `extract` seconds of extraction: the
    command's start, the workers' start, the works, the tables (and the cluster's close) at the
    end. `what` says what the works are (its first `how` line, with what sharing them makes of them)."""
    works = {**train, **baselines}
    share = cpu_share()
    plan = Estimate()
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


# ------------------------------------------------------------------------------------------ words


def clock_text(seconds: float) -> str:
    """'0:07', '12:30', '1:02:03'."""
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
