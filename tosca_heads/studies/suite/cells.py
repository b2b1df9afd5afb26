"""A suite's cells: each number of its tables comes from one cell, and each cell is one folder that
the single command would write with the same flags (a TOSCA cell is a `tosca fit` run folder, a
baseline cell a `tosca baselines` folder), so `command` reruns it alone.

A cell is done when its folder holds finished results made from the same store, task split and
recipe; it is then read, never recomputed. A finished `tosca fit` run with the same configuration
elsewhere under the runs root is reused the same way.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tosca_foundation.errors import UserError
from tosca_heads.method import baseline_registry
from tosca_heads.method.protocol import StreamConfig
from tosca_heads.method.recipe import TrainConfig
from tosca_heads.records import cell as kept_cell
from tosca_heads.records import run_folder as run_record
from tosca_heads.records import validation_record
from tosca_heads.records.baselines_folder import NO_ROUTING, REDO, baseline_asked, baseline_result
from tosca_heads.records.run_cell import read_run
from tosca_heads.records.run_config import CONFIG, config_differences
from tosca_heads.requests.plan import FitPlan
from tosca_heads.routers import on_request
from tosca_heads.studies.suite.spec import SuiteSpec, folder_name


@dataclass(frozen=True)
class Cell:
    """One folder of results: TOSCA at (flow, L1, seed), or one baseline at a seed."""

    store: str
    kind: str  # "tosca" or "baseline"
    seed: int
    order_seed: int
    flow: str = "tosca"
    l1: float = 0.0
    method: str = "tosca"

    @property
    def key(self) -> str:
        if self.kind == "tosca":
            return f"{self.store}/tosca-{self.flow}-l1={self.l1:g}-seed{self.seed}-order{self.order_seed}"
        return f"{self.store}/{self.method}-seed{self.seed}-order{self.order_seed}"

    def folder(self, out: Path) -> Path:
        """Where the cell's files are: a run folder, or a baselines folder's method subfolder."""
        base = Path(out) / "cells" / folder_name(self.store)
        if self.kind == "tosca":
            return base / f"tosca-{self.flow}-l1_{self.l1:g}-seed{self.seed}-order{self.order_seed}"
        return base / f"baselines-seed{self.seed}-order{self.order_seed}" / self.method


@dataclass
class CellState:
    """Where one cell stands in this call of the suite, and what was read from its folder."""

    cell: Cell
    folder: Path
    command: str
    # done (found finished), reused (a finished run elsewhere), ran, missing, changed (its folder
    # holds results of another configuration: `reason`), to extract (a dry run before its store)
    status: str
    seconds: float = 0.0
    result: dict[str, Any] | None = None
    similarity: float | None = None
    reason: str = ""


def plan_cells(spec: SuiteSpec) -> list[Cell]:
    """Every cell of the suite, each once: the main TOSCA runs (the paper flow at the suite's L1),
    the ablation's flows with L1 on (and off), and the baselines."""
    cells: dict[str, Cell] = {}
    for store in spec.stores:
        for order in spec.order_seeds:
            for seed in spec.seeds:
                for flow, l1 in ablation_points(spec):
                    cell = Cell(store.name, "tosca", seed, order, flow, l1)
                    cells.setdefault(cell.key, cell)
            for method in spec.baselines:
                for seed in spec.seeds[:1] if baseline_registry.deterministic(method) else spec.seeds:
                    cell = Cell(store.name, "baseline", seed, order, method=method)
                    cells.setdefault(cell.key, cell)
    return list(cells.values())


def ablation_points(spec: SuiteSpec) -> list[tuple[str, float]]:
    """(flow, L1) of every TOSCA cell of a store and seed: the paper's flow at the suite's L1 first,
    the ablation's flows at it, then the flows also trained with L1 = 0."""
    points = [("tosca", spec.main_l1), *((f, spec.main_l1) for f in spec.flows)]
    if spec.main_l1 != 0.0:
        points += [(f, 0.0) for f in spec.l1_off]
    return list(dict.fromkeys(points))


def cell_train(spec: SuiteSpec, cell: Cell) -> TrainConfig:
    return spec.train(cell.seed, cell.flow, cell.l1)


def cell_params(spec: SuiteSpec, cell: Cell) -> dict[str, Any]:
    """A baseline cell's keywords: the suite's parameters, the cell's seed for a seed parameter."""
    return baseline_registry.arguments(cell.method, spec.baseline_params, cell.seed)


def finished(spec: SuiteSpec, cell: Cell, folder: Path, plan: FitPlan) -> bool:
    """The folder holds this cell's finished results (same store, split and recipe)."""
    tasks = plan.stream.num_tasks
    if cell.kind == "tosca":
        # the one reuse rule: finished (done.json, else computed again), every file whole (else one
        # line, never written over), asked the same
        if not (Path(folder) / kept_cell.DONE).exists():
            return False
        run = read_run(folder)
        wanted = plan.run_config(cell_train(spec, cell))
        return (
            not config_differences(run.config, wanted)
            and run.finished_tasks == tasks
            # a router registered since (a plug-in): the fit evaluates the finished run again
            and all(r in run.answers.get("test", {}) for r in (*spec.routers, spec.primary))
        )
    return kept_cell.reusable(folder, baseline_cell_asked(spec, cell, plan), REDO)


def baseline_cell_asked(spec: SuiteSpec, cell: Cell, plan: FitPlan) -> dict[str, Any]:
    """What a baseline cell is asked: the suite's store, task split, validation split and the
    cell's parameters (`baselines_folder.baseline_asked`)."""
    return baseline_asked(
        cell.method, plan.store, plan.stream_config, cell_params(spec, cell), validation_split(plan)
    )


def validation_split(plan: FitPlan) -> dict[str, Any] | None:
    """What a baseline cell's metrics.json records of the suite's validation split (None: none)."""
    return validation_record(plan.validation, plan.held_ids) if plan.validation.enabled else None


def made_otherwise(spec: SuiteSpec, cell: Cell, folder: Path, plan: FitPlan) -> str | None:
    """What differs when the cell's folder holds results of another configuration (the suite file
    or its store changed since they were made); None when it holds none, or this cell's."""
    if cell.kind == "tosca":
        if not (Path(folder) / CONFIG).is_file():
            return None
        wanted = plan.run_config(cell_train(spec, cell))
        differences = config_differences(run_record.read_run_config(folder), wanted)
        return differences[0] if differences else None
    if not kept_cell.is_cell(folder):
        return None
    made, wanted = kept_cell.asked_of(folder, REDO), baseline_cell_asked(spec, cell, plan)
    wanted = json.loads(json.dumps(wanted))
    found = [(key, made.get(key), wanted[key]) for key in wanted if made.get(key) != wanted[key]]
    return next((f"{what}: {was} -> {now}" for what, was, now in found), None)


def find_finished_run(spec: SuiteSpec, cell: Cell, runs_root: Path, plan: FitPlan) -> Path | None:
    """A finished `tosca fit` run under runs_root with exactly this cell's configuration."""
    if cell.kind != "tosca" or not Path(runs_root).is_dir():
        return None
    for config in sorted(Path(runs_root).glob(f"*/{CONFIG}")):
        try:
            if finished(spec, cell, config.parent, plan):
                return config.parent
        except UserError:  # a run of the user's edited or damaged since: never reused, not this suite's
            continue
    return None


def command(spec: SuiteSpec, cell: Cell, folder: Path, store: Path, stream: StreamConfig) -> str:
    """The one command that makes this cell alone."""
    split = ["--init-cls", str(stream.init_cls), "--increment", str(stream.increment)]
    split += ["--order-seed", str(cell.order_seed)]
    if spec.validation.enabled:
        split += ["--val-fraction", f"{spec.val_fraction:g}", "--val-seed", str(spec.val_seed)]
    if cell.kind == "tosca":
        train = cell_train(spec, cell)
        flags = [
            f"--{name.replace('_', '-')}={value}"
            for name, value in sorted(asdict(train).items())
            if name != "eta_min" and value is not None
        ]
        args = ["tosca", "fit", "--store", str(store), "--run", str(folder), *split, *flags]
        learned = on_request([*spec.routers, spec.primary])  # computed only where named
        args += ["--router", ",".join(dict.fromkeys([*spec.routers, spec.primary]))] if learned else []
    else:
        params = cell_params(spec, cell)
        args = ["tosca", "baselines", "--store", str(store), "--no-tosca", "--methods", cell.method]
        args += ["--out", str(folder.parent), *split]
        args += baseline_registry.flags(cell.method, params)
    return shlex.join(args)


def read_result(cell: Cell, folder: Path) -> dict[str, Any]:
    """The finished cell's metrics: {router or "none": metrics block} on test, the same on the
    validation split (empty without one), its seconds, and its per-image answers ("outcomes":
    split -> router or "none" -> `uncertainty.Outcomes`)."""
    if cell.kind == "tosca":
        run = read_run(folder)
        metrics = run.metrics
        seconds = sum(float(t["seconds"]) for t in metrics["tasks"])
        return {
            "routers": metrics["routers"],
            "validation": metrics.get("validation") or {},
            "seconds": seconds,
            "params_per_task": metrics["params_per_task"],
            "outcomes": run.answers,
        }
    result = baseline_result(folder)
    return {
        "routers": {NO_ROUTING: result.metrics},
        "validation": {} if result.validation is None else {NO_ROUTING: result.validation},
        "seconds": result.seconds,
        "parameters": result.parameters,
        "outcomes": {split: {NO_ROUTING: outcome} for split, outcome in (result.outcomes or {}).items()},
    }


WEIGHT_MATRICES = ("down.weight", "up.weight", "cal_down.weight", "cal_up.weight")
OUTPUT_ROWS = 1_000  # test features the output similarity is measured on (evenly spaced)


@dataclass(frozen=True)
class Similarity:
    """Mean cosine similarity over every pair of a run's task modules, three ways: their weight
    matrices alone (no LayerNorm, no biases: what L1 acts on directly), all their parameters as one
    vector, and their outputs on the same test features (mean over the features of each pair's
    cosine)."""

    weights: float
    parameters: float
    outputs: float | None


def module_similarity(folder: Path, test_features: Any | None = None) -> Similarity | None:
    """The three similarities between a run's task modules (None for a run of one task).
    `test_features` [n, d] (a store's test split) gives the outputs' similarity on up to
    OUTPUT_ROWS of them; without, that one is None. The task files are read with every check
    `tosca eval` makes (recipe, split, finite values): a damaged one is one line."""
    import torch

    from tosca_heads.engine.layout import ParamLayout
    from tosca_heads.engine.outputs import module_outputs

    tasks = run_record.finished_tasks(folder)
    if tasks < 2:
        return None
    config = run_record.read_run_config(folder)
    train = run_record.train_config_of(config, folder)
    layout = ParamLayout(run_record.feature_dim_of(config, folder), train.r, train.s, train.flow)
    digest, split = run_record.config_digest(config), run_record.stream_config_of(config, folder)
    modules = [
        run_record.load_task(folder, task, layout, split.init_cls + task * split.increment, digest)[0]
        for task in range(tasks)
    ]
    pairs = torch.triu_indices(tasks, tasks, offset=1)

    def mean_pair_cosine(vectors: list[torch.Tensor]) -> float:
        unit = torch.nn.functional.normalize(torch.stack(vectors), dim=1)
        cos = unit @ unit.T
        return float(cos[pairs[0], pairs[1]].mean())

    weights = mean_pair_cosine(
        [torch.cat([m[k].double().flatten() for k in WEIGHT_MATRICES if k in m]) for m in modules]
    )
    everything = mean_pair_cosine([torch.cat([m[k].double().flatten() for k in sorted(m)]) for m in modules])
    outputs = None
    if test_features is not None and len(test_features):
        x = torch.as_tensor(test_features, dtype=torch.float32)
        x = x[torch.linspace(0, len(x) - 1, min(OUTPUT_ROWS, len(x))).long()]
        units = torch.stack(
            [
                module_outputs(layout, layout.pack(m, train.r, train.s).unsqueeze(0), x, normalize=True)[0]
                for m in modules
            ]
        ).double()  # [T, n, d]
        per_pair = (units[pairs[0]] * units[pairs[1]]).sum(-1)  # [pairs, n]
        outputs = float(per_pair.mean())
    return Similarity(weights, everything, outputs)


def describe(cells: list[Cell]) -> str:
    kinds = {"tosca": 0, "baseline": 0}
    for cell in cells:
        kinds[cell.kind] += 1
    return f"{kinds['tosca']} TOSCA run(s), {kinds['baseline']} baseline run(s)"


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)
