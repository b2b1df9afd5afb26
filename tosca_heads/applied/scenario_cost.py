"""What a scenario's works cost here before they run, for a dry run's estimate (`tosca sweep
--scenario ... --dry-run`, a scenario suite's `--dry-run`): the stream is read off the scenario's
plan (labels only, nothing learnt) and priced by the same cost models as a class-incremental run
(`running.cost_models`: one SGD step and each baseline's declared arithmetic, timed on this machine).

- TOSCA: a module per learning unit of its choices (`tosca_scenario.learning_units`: a task's rows
  at its end by default), and at each step every evaluation row through every module trained so
  far (its routers share that scoring);
- a baseline: the plan's steps as its tasks (rows learnt at each step, the evaluation rows met by
  each step), priced by its class's `work`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from tosca_heads.applied.estimators import RECIPE_FIELDS
from tosca_heads.applied.tosca_scenario import learning_units, tosca_options
from tosca_heads.method.recipe import recipe
from tosca_heads.method.scenarios import ScenarioPlan
from tosca_heads.running import cost_models


def tosca_seconds(plan: ScenarioPlan, params: Mapping[str, Any], dim: int, alone: bool) -> float:
    """One TOSCA training and its answers on `plan`, as TOSCA's parameters in a scenario ask
    (`tosca_options`: its choices `recurring` and `module_per`, its recipe's preset and fields)."""
    _, recurring, module_per, keywords = tosca_options(dict(params))
    fields = {k: v for k, v in keywords.items() if k in RECIPE_FIELDS}
    train = recipe(str(keywords.get("preset") or "paper"), fields)
    units = learning_units(plan, recurring, module_per)
    scored = 0
    for s, step in enumerate(plan.steps):
        scored += len(step.eval_rows) * sum(1 for u in units if u <= s)
    rows = [len(r) for r in units.values()]
    if keywords.get("later_modules") == "first":  # only the first unit trains; the others write prototypes
        rows = rows[:1] + [0] * (len(rows) - 1)
    return cost_models.stream_seconds(dim, rows, scored, train, torch.device("cpu"), alone)


def shape_of(plan: ScenarioPlan, dim: int) -> cost_models.TaskShape:
    """The plan as a baseline's cost model reads a class-incremental split: each step a task, its
    rows learnt, and the evaluation rows each step adds to what the steps before it answered."""
    met = [len(step.eval_rows) for step in plan.steps]
    added = tuple(max(0, n - (met[i - 1] if i else 0)) for i, n in enumerate(met))
    return cost_models.TaskShape(
        tuple(len(step.train_rows) for step in plan.steps), added, dim, plan.num_classes
    )


def baseline_seconds(plan: ScenarioPlan, method: str, params: Mapping[str, Any], dim: int) -> float:
    return cost_models.baseline_seconds(method, shape_of(plan, dim), dict(params))
