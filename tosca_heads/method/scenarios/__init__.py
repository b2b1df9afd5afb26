"""Scenarios beyond class-incremental learning, each a reading of the same store: `cil` (today's),
`til` (the task id told at test), `fscil` (a base session, then N-way K-shot sessions), `blurry`
(Si-Blurry: a disjoint share of the classes, the rest blurred across tasks of varying size) and
`dil` (the same classes in every task, each task a new domain). One file each; `registry` holds
`SCENARIOS` and the parameter rules, `by_name` the lookup of a scenario a user named, `plan` what a scenario makes of a store, `figures` the
accuracies every scenario's figures are made of."""

from tosca_heads.method.scenarios.by_name import scenario
from tosca_heads.method.scenarios.plan import ScenarioPlan, Step
from tosca_heads.method.scenarios.registry import (
    DEFAULT_SCENARIO,
    SCENARIOS,
    Scenario,
    ScenarioParam,
    StoreLabels,
    register_scenario,
)

__all__ = [
    "DEFAULT_SCENARIO",
    "SCENARIOS",
    "Scenario",
    "ScenarioParam",
    "ScenarioPlan",
    "Step",
    "StoreLabels",
    "register_scenario",
    "scenario",
]
