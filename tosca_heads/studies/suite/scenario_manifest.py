"""A scenario suite's manifest.json (`records.suite.write_manifest`, the class-incremental suite's
format): which store and which command made each number.

- each store: its path, fingerprint and sample lists' hash, dataset, backbone and weights, the
  scenario with the values it was read with, its reading (`read_as`) and its stream in one line,
  with what the stream drew (a few-shot session's images, a blurry stream's classes: `facts`);
- each cell (store and seed): its folder, status, the rows it answers with their seconds, each
  method's parameters, and the commands that make its answers alone: `tosca fit --scenario` for
  TOSCA's rows (one training, a router each) and `tosca baselines --scenario --no-tosca` for each
  baseline (the same answers, tested; they write their own folders, not the suite's cell).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from tosca_heads.applied.scenario_runs import TOSCA
from tosca_heads.method import baseline_registry
from tosca_heads.records import suite as records_suite
from tosca_heads.studies.suite.spec import SuiteSpec


def _plain(value: Any) -> Any:
    """A plan's fact as JSON holds it (an array as a list)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _scenario_args(plan: Any, store: Path) -> list[str]:
    """The store, the scenario, its values and its reading, as every command of a cell gives them."""
    args = ["--store", str(store), "--scenario", plan.ready.kind.name]
    args += [f"--set={k}={v}" for k, v in sorted(plan.values.items())]
    return args + (["--read-as", plan.read_as] if plan.read_as else [])


def cell_commands(spec: SuiteSpec, plan: Any, params: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Each method of a cell (`params`: method -> its parameters) -> the command that makes its
    answers alone: TOSCA's recipe flags and seed with its routers (told the task: none), each
    baseline with its own parameters."""
    store = plan.ready.store.path
    commands = {}
    for method, given in params.items():
        if method == TOSCA:
            flags = {k: v for k, v in given.items() if k != "routers"}
            args = ["tosca", "fit", *_scenario_args(plan, store)]
            args += [f"--{k.replace('_', '-')}={v}" for k, v in sorted(flags.items())]
            if not plan.ready.kind.told_task:
                args += ["--router", ",".join(given["routers"])]
        else:
            args = ["tosca", "baselines", *_scenario_args(plan, store), "--no-tosca", "--methods", method]
            args += baseline_registry.flags(method, given)
        commands[method] = shlex.join(args)
    return commands


def write_scenario_manifest(
    out: Path, spec: SuiteSpec, planned: Mapping[str, Any], cells: Sequence[Any]
) -> Path:
    """manifest.json of the scenario suite's folder `out` (see the module docstring)."""
    stores = {}
    for name, plan in planned.items():
        store = plan.ready.store
        ident = store.identity
        stores[name] = {
            "path": str(store.path),
            "fingerprint": store.fingerprint,
            "samples_sha256": ident["dataset"].get("ids_sha256"),
            "dataset": ident["dataset"]["name"],
            "backbone": ident["backbone"].get("alias"),
            "weights": ident["backbone"].get("weights_source"),
            "scenario": {
                "name": plan.ready.kind.name,
                "values": _plain(plan.values),
                "read_as": plan.read_as,
            },
            "stream": plan.ready.plan.describe(),
            "facts": _plain(plan.ready.plan.facts),
        }
    records = [
        {
            "key": c.key,
            "store": c.store,
            "seed": c.seed,
            "folder": str(c.folder),
            "status": c.status,
            "rows": {r.label: str(c.folder / r.name) for r in c.rows},
            "seconds": {label: result.seconds for label, result in c.results.items()},
            "params": _plain(c.params),
            "commands": cell_commands(spec, planned[c.store], c.params),
        }
        for c in cells
    ]
    return records_suite.write_manifest(out, spec.name, asdict(spec), stores, records)
