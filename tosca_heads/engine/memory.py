"""How much memory training takes: how many configurations one engine run can hold (1 on the CPU,
as many as fit a GPU), and whether a run fits at all.

On a CPU, stacking configurations gains nothing (a step's matmuls already fill the core); sweeps
spread points over processes instead. On a GPU one step of G configurations costs about as much
as one of a single configuration until G is in the hundreds, so a sweep groups as many points
as the device memory holds. Before any run trains, `require_room` refuses one that cannot fit
(a bottleneck of a million, a batch of a hundred million) in one line naming what it would need.

The memory budget (`TOSCA_MEMORY_BUDGET`, `tosca --memory-budget`; by default half the available
memory) bounds what a fit holds: the store is held whole when the whole run fits it, else read
task by task, so that a store of any size trains in what one task needs (its rows, their views,
the rows evaluated, the engine: `RunMemory`); a fit whose one task does not fit is refused before
any work, in one line saying what to lower.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from featcache.store import StoreShape
from tosca_foundation.errors import UserValueError
from tosca_foundation.limits import memory_budget, require_memory
from tosca_foundation.names import Spell, as_flag
from tosca_foundation.units import human_bytes
from tosca_heads.engine.evaluate import CACHE_BYTES_CPU
from tosca_heads.engine.layout import ParamLayout

FLOAT = 4
ACTIVATIONS_PER_SAMPLE = 40  # [b, d]-sized tensors alive during one step (forward, backward, temporaries)
GPU_SHARE = 0.6  # of the free memory, for the group (the rest: the store, evaluation cache, allocator slack)


def bytes_per_configuration(shape: StoreShape, tasks: int, r: int, s: int, flow: str, batch: int) -> int:
    """An upper estimate of one configuration's memory through a whole run."""
    dim, classes = shape.dim, shape.classes
    size = ParamLayout(dim, r, s, flow).size
    modules = size * (tasks + 6)  # frozen modules + the current one, its gradient, momentum, temporaries
    head = classes * dim * 8  # rows, gradient, momentum, normalised rows, temporaries
    step = min(batch, shape.train) * (dim + r + s + classes) * ACTIVATIONS_PER_SAMPLE
    # per module and test row: entropy and energy (float) and the prediction (long) = 4 floats;
    # plus the [n_test, d] outputs of the module being evaluated
    evaluation = tasks * shape.test * 4 + shape.test * dim
    return FLOAT * (modules + head + step + evaluation)


# one task's training rows held at once when a store is read task by task, besides its views: its
# clean rows (kept by the source for its prototypes and its routers' statistics), the previous task's
# (in its snapshot until evaluated), and the statistics' split of them (fitted and held-out parts)
TASK_COPIES = 3
VIEW_COPIES = 2  # the view an epoch trains on and the one before it (the step lets go at the next epoch)


@dataclass(frozen=True)
class RunMemory:
    """What one engine run holds at its peak, by part (bytes)."""

    engine: int  # the configurations' modules and classifiers, a step's activations, the scores
    evaluation: int  # the frozen modules' outputs kept across stages (each evaluated split's cache)
    whole: int  # the store's features held whole (float32)
    task: int  # one task's rows and views held at once, and the rows every stage evaluates

    def need(self, whole: bool) -> int:
        """The run's peak with the store held whole, or read task by task."""
        return self.engine + self.evaluation + self.task + (self.whole if whole else 0)

    def features_budget(self, budget: int) -> int:
        """What is left of `budget` for the store's features once the rest of the run is set aside:
        a store whose features fit it is held whole (`CachedFeatures`)."""
        return budget - self.need(True) + self.whole


def run_memory(
    shape: StoreShape,
    configs: Sequence[Any],
    tasks: int,
    device: torch.device,
    task_rows: int,
    held_rows: int = 0,
) -> RunMemory:
    """What a group of resolved recipes holds at its peak on a store (`RunMemory`), its largest task
    having `task_rows` training rows and `held_rows` rows held out for validation (evaluated too)."""
    engine = sum(bytes_per_configuration(shape, tasks, c.r, c.s, c.flow, c.batch_size) for c in configs)
    evaluation = 0
    if device.type == "cpu":  # on CUDA the cache takes a share of what is free (engine/evaluate.py)
        per_row = len(configs) * tasks * shape.dim * FLOAT
        evaluation = sum(min(CACHE_BYTES_CPU, rows * per_row) for rows in (shape.test, held_rows) if rows)
    epochs = max(c.epochs for c in configs)
    views = 0 if not shape.views else VIEW_COPIES + min(shape.views, max(0, epochs - shape.views))
    rows = task_rows * (TASK_COPIES + views) + shape.test + held_rows
    return RunMemory(engine, evaluation, shape.float32_bytes, rows * shape.dim * FLOAT)


@dataclass(frozen=True)
class Room:
    """How a run will hold its store: `whole` or task by task; `memory` its parts; `budget` the
    memory budget it was planned within."""

    whole: bool
    memory: RunMemory
    budget: int

    @property
    def features_budget(self) -> int:
        return self.memory.features_budget(self.budget)


def require_room(
    shape: StoreShape,
    configs: Sequence[Any],
    tasks: int,
    device: torch.device,
    task_rows: int,
    held_rows: int = 0,
    whole: bool | None = None,
    budget: int | None = None,
    fixed: bool = False,
    spell: Spell = as_flag,
) -> Room:
    """Refuse, in one line and before any work, a group of resolved recipes that cannot fit: one
    task (its rows, their views, the engine) over the memory budget (`TOSCA_MEMORY_BUDGET`), or the
    run over this device's memory. The store is held whole when the whole run fits the budget
    (or as `whole` says: a source already loaded), else read task by task. `fixed`: the recipe and
    split are a trained run's (`tosca eval`, which has no --r, --s, --batch-size or --increment):
    the refusal names only what that command can change. `spell` names the values as the caller
    spells them (the command line's flags, or the Python API's keywords)."""
    memory = run_memory(shape, configs, tasks, device, task_rows, held_rows)
    budget = memory_budget() if budget is None else budget
    free = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else None
    if whole is None:
        whole = memory.need(True) <= (budget if free is None else min(budget, free))
    what = (
        f"training {len(configs)} configuration(s) of r up to {max(c.r for c in configs)}, "
        f"s up to {max(c.s for c in configs)}, batch up to {max(c.batch_size for c in configs)}"
    )
    recipe = f"{spell('r')}, {spell('s')} or {spell('batch_size')}"
    hint = "run it on a device with more memory" if fixed else f"lower {recipe}"
    budget_said = (
        "--memory-budget (TOSCA_MEMORY_BUDGET)" if spell is as_flag else "the TOSCA_MEMORY_BUDGET setting"
    )
    if free is not None:
        if memory.need(whole) > free:
            raise UserValueError(
                f"{what} would need {human_bytes(memory.need(whole))} of GPU memory; "
                f"{human_bytes(free)} is free on {device}: {hint}"
            )
    else:
        require_memory(what, memory.need(whole), hint if not whole else f"{hint}, or {budget_said}")
    if not whole and memory.need(False) > budget:
        views = f" and their {shape.views} views" if shape.views else ""
        lower = (  # what most of it is
            f"{spell('increment')} (fewer classes, so fewer rows, per task)"
            if memory.task >= memory.engine + memory.evaluation
            else recipe
        )
        remedy = "raise" if fixed else f"lower {lower} or raise"
        raise UserValueError(
            f"one task of this {'run' if fixed else 'fit'} needs {human_bytes(memory.need(False))} of memory (its {task_rows:,} "
            f"training rows{views}, the {shape.test + held_rows:,} rows evaluated, the engine), over the "
            f"memory budget of {human_bytes(budget)}: {remedy} {budget_said}"
        )
    return Room(whole, memory, budget)


def default_group_size(
    shape: StoreShape, points: Sequence[Any], device: torch.device, sharing: int = 1
) -> int:
    """1 on the CPU; on CUDA, as many of these points as fit in GPU_SHARE of the free memory,
    divided among the `sharing` processes that will train on this GPU at once (each also holds
    its own copy of the features)."""
    if device.type != "cuda" or not points:
        return 1

    def need(point: Any) -> int:
        stream = point.stream.task_stream(shape.classes)  # each point's own split: more tasks, more modules
        train = point.train.resolved(shape.dim)
        return bytes_per_configuration(
            shape, stream.num_tasks, train.r, train.s, train.flow, train.batch_size
        )

    per_point = max(need(p) for p in points)
    free, _ = torch.cuda.mem_get_info(device)
    each = (free - sharing * shape.float32_bytes) * GPU_SHARE / max(1, sharing)
    return max(1, min(len(points), int(each) // per_point))
