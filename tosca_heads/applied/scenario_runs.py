"""TOSCA and the baselines under a scenario (`tosca_heads.method.scenarios`): one method learns a
plan's steps on a store's cached features and answers each step's evaluation rows; the scenario
turns the answers into its figures. Nothing of the backbone runs: a scenario is a reading of the
store, so its whole table costs what the class-incremental one does (benchmarks/scenario_cost.py).

A method that cannot run a scenario refuses it in one line, naming why, before it learns:
- a plan whose classes recur across tasks (`blurry`, `dil`) needs a baseline that learns a class
  from rows in several calls (one declaring `recurring_classes`: ACIL, GACL, ridge, RanPAC,
  SimpleCIL, KLDA, LoRanPAC, FeCAM); TOSCA gives a class met again rows of its own in each task, or
  learns it once (`tosca_scenario`);
- `til` needs scores per class (a baseline's `decision_function`; TOSCA's module logits) to answer
  among the told task's classes.
TOSCA's one training answers with every router asked (`routers`): one result per router (told
the task, one: no router is used).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from featcache.store import FeatureStore, check_readable, read_split
from featcache.store.object_store import missing_here
from tosca_foundation.dataset_domains import DOMAIN_RULES, domain_ids
from tosca_foundation.errors import UserValueError
from tosca_foundation.text import tell
from tosca_heads.applied.tosca_scenario import (
    TOSCA_DEFAULTS,
    check_router_rows,
    told_among,
    tosca_answers,
    tosca_options,
)
from tosca_heads.method.baseline_registry import BASELINES, least_per_class, too_few_images
from tosca_heads.method.class_names import named_classes, said_class
from tosca_heads.method.linalg import single_threaded
from tosca_heads.method.scenarios import Scenario, ScenarioPlan, StoreLabels, scenario
from tosca_heads.running.baseline_runs import check_baseline_params

TOSCA = "tosca"


@dataclass(frozen=True)
class ScenarioResult:
    """One method under one scenario: its figures, the accuracy after each step, its seconds
    (learning and answering; the plan's reading of the labels not counted), the plan's line, and
    for TOSCA the router that answered (one training serves every router: each TOSCA row's
    seconds are the training's and all its routers' answers together)."""

    scenario: str
    method: str
    figures: dict[str, float]
    curve: list[float]
    seconds: float
    plan: str
    answers: list[np.ndarray] = field(repr=False, default_factory=list)
    router: str = ""

    @property
    def label(self) -> str:
        """The method as a table names it: 'tosca (lda)' for TOSCA, else its name."""
        return f"{self.method} ({self.router})" if self.router else self.method


def store_labels(store: FeatureStore, read_as: str = "") -> StoreLabels:
    """What a scenario reads of a store: labels, and domains where its dataset has them (or where
    `read_as` names a domain reading of its images: a `cifar100` store read as
    `cifar100_superclasses`, the same images labelled by superclass)."""
    dataset = str(store.identity["dataset"]["name"])
    name = read_as or dataset
    train, test = store.labels("train"), store.labels("test")
    if name not in DOMAIN_RULES:
        return StoreLabels(train, test, dataset=dataset)
    train_ids, test_ids = store.ids("train"), store.ids("test")
    if name == "cifar100_superclasses" and dataset == "cifar100":
        from tosca_foundation.dataset_domains import CIFAR100_SUPERCLASSES, SUPERCLASS_OF

        coarse = list(CIFAR100_SUPERCLASSES)
        train = np.array([coarse.index(SUPERCLASS_OF[str(i).split("/")[-2]]) for i in train_ids])
        test = np.array([coarse.index(SUPERCLASS_OF[str(i).split("/")[-2]]) for i in test_ids])
    elif name != dataset:
        raise UserValueError(
            f"a {dataset} store cannot be read as {name} (only cifar100 as cifar100_superclasses)"
        )
    return StoreLabels(
        train,
        test,
        np.array(domain_ids(name, train_ids)),
        np.array(domain_ids(name, test_ids)),
        dataset=name,
        domain_names=DOMAIN_RULES[name].domains,
    )


def refusal(method: str, plan: ScenarioPlan, told_task: bool, name_of: Any = str) -> str:
    """Why `method` cannot run `plan` ("" where it can). `name_of`: a plan class id as the store
    names it."""
    if method == TOSCA:
        return ""
    cls = BASELINES[method]
    if plan.recurring and not getattr(cls, "recurring_classes", False):
        able = ", ".join(n for n in BASELINES if getattr(BASELINES[n], "recurring_classes", False))
        return f"{method} cannot run {plan.scenario}: it learns each class from one task's rows (those that can: {able})"
    if told_task and not callable(getattr(cls, "decision_function", None)):
        return f"{method} cannot run til: it gives no score per class to answer among the told task's classes"
    return _too_few_images(method, plan, name_of)


def _too_few_images(method: str, plan: ScenarioPlan, name_of: Any) -> str:
    """Where a class's whole stream trains `method` on fewer images than it needs (FeCAM: two, one
    image having no covariance; it holds a class met once until a second image comes, so a class
    never given one would be learned and never answered)."""
    if least_per_class(method) < 2 or not plan.steps:
        return ""
    rows = np.concatenate([step.train_rows for step in plan.steps])
    ids, counts = np.unique(plan.train_ids[rows], return_counts=True)
    line = too_few_images(method, ids, counts, f"{plan.scenario}'s whole training stream", name_of)
    return f"{line}; leave it out of the methods" if line else ""


def method_answers(
    method: str,
    plan: ScenarioPlan,
    train_x: np.ndarray,
    test_x: np.ndarray,
    told_task: bool = False,
    params: Mapping[str, Any] | None = None,
    train_views: np.ndarray | None = None,
) -> dict[str, list[np.ndarray]]:
    """The class ids `method` answers at each step of `plan`, by router (TOSCA: each of its
    `routers`; a baseline: one list under ""), on one CPU thread: the same numbers at any thread
    count. `params`: a baseline's own parameters, or TOSCA's (`tosca_scenario.tosca_options`:
    routers, recurring, module_per, and the estimator's preset and recipe fields). `train_views`:
    the store's augmented views [V, n, d], which TOSCA's modules train on (a baseline reads the
    clean features, as under `tosca baselines`)."""
    why = refusal(method, plan, told_task)
    if why:
        raise UserValueError(why)
    params = dict(params or {})
    if method == TOSCA:
        return tosca_answers(plan, train_x, test_x, told_task, params, train_views)
    check_baseline_params(method, params, train_x.shape[1], plan.num_classes)
    estimator = BASELINES[method](device="cpu", **params)
    incremental = bool(getattr(BASELINES[method], "incremental", True))
    answers, seen = [], np.zeros(0, dtype=np.int64)
    with single_threaded(torch.device("cpu")):
        for step in plan.steps:
            if incremental:
                estimator.partial_fit(train_x[step.train_rows], plan.train_ids[step.train_rows])
            else:
                seen = np.concatenate([seen, step.train_rows])
                estimator.fit(train_x[seen], plan.train_ids[seen])
            rows = step.eval_rows
            if told_task:
                scores = np.asarray(estimator.decision_function(test_x[rows]))
                answers.append(told_among(scores, plan, rows))
            else:
                answers.append(np.asarray(estimator.predict(test_x[rows]), dtype=np.int64))
    return {"": answers}


@dataclass(frozen=True)
class CheckedScenario:
    """A scenario made ready on one store, every check passed and nothing learnt: the store, the
    scenario, its plan, the methods by their registered names, and the labels the plan was read
    from (what a class is named by in a refusal)."""

    store: FeatureStore
    kind: type[Scenario]
    plan: ScenarioPlan
    methods: tuple[str, ...]
    labels: StoreLabels


def checked_scenario(
    store: FeatureStore | str | Path,
    name: str,
    methods: tuple[str, ...] = (TOSCA,),
    scenario_params: Mapping[str, Any] | None = None,
    read_as: str = "",
    spelling: str = "--scenario",
    method_params: Mapping[str, Mapping[str, Any]] | None = None,
) -> CheckedScenario:
    """The plan read once, its values and what the store can serve checked, each method refused in
    one line where it cannot run it, and TOSCA's own options (routers, recurring, module_per)
    checked: all before any method learns or anything is written (`tosca scenario`, `tosca
    baselines --scenario`)."""
    if not isinstance(store, FeatureStore):
        store = FeatureStore.open(Path(store))
    store.require_complete()  # an extraction still running: one line, never figures of its zeros
    kind = scenario(name, spelling)
    labels = store_labels(store, read_as)
    plan = kind.plan(labels, **dict(scenario_params or {}))
    picked = tuple(m if m == TOSCA else BASELINES.pick(m, "--methods") for m in methods)
    order, names = plan_classes(plan, labels, store)
    for method in picked:
        why = refusal(method, plan, kind.told_task, lambda i: said_class(order[i], names))
        if why:
            raise UserValueError(why)
    if TOSCA in picked:
        check_router_rows(plan, (method_params or {}).get(TOSCA), lambda i: said_class(order[i], names))
    return CheckedScenario(store, kind, plan, picked, labels)


def run_checked(
    ready: CheckedScenario, method_params: Mapping[str, Mapping[str, Any]] | None = None
) -> list[ScenarioResult]:
    """Every method of a checked scenario learnt and answered, each timed on its own (TOSCA once,
    with a result for each of its routers)."""
    store, kind, plan = ready.store, ready.kind, ready.plan
    check_readable(store)  # every chunk's values checked as every reader's are (NaN, inf, checksums)
    (train_x, train_views), test_x = read_split(store, "train"), read_split(store, "test")[0]
    order, names = plan_classes(plan, ready.labels, store)
    results = []
    for i, method in enumerate(ready.methods, 1):
        tell(f"{method}: learning and answering ({i} of {len(ready.methods)} methods)")
        start = time.perf_counter()
        with named_classes(order, names):  # a refusal about one class names the store's label
            by_router = method_answers(
                method, plan, train_x, test_x, kind.told_task, (method_params or {}).get(method), train_views
            )
        seconds = time.perf_counter() - start
        results.extend(result_of(ready, method, a, seconds, router) for router, a in by_router.items())
    return results


def result_of(
    ready: CheckedScenario, method: str, answers: list[np.ndarray], seconds: float, router: str = ""
) -> ScenarioResult:
    """A method's result from the class ids it answered at each step: the scenario's figures and
    the accuracy after each step, worked out on the plan (a run's, or a kept cell's answers)."""
    plan, kind = ready.plan, ready.kind
    curve = [
        float((a == plan.test_ids[s.eval_rows]).mean()) for a, s in zip(answers, plan.steps, strict=True)
    ]
    return ScenarioResult(
        kind.name, method, kind.figures_of(plan, answers), curve, seconds, plan.describe(), answers, router
    )


def run_scenario(
    store: FeatureStore | str | Path,
    name: str,
    methods: tuple[str, ...] = (TOSCA,),
    scenario_params: Mapping[str, Any] | None = None,
    method_params: Mapping[str, Mapping[str, Any]] | None = None,
    read_as: str = "",
    spelling: str = "--scenario",
) -> list[ScenarioResult]:
    """Every method of `methods` under scenario `name` on one store (`checked_scenario`, then
    `run_checked`). `spelling`: how the caller's user typed the scenario's name (the flag, or the
    API's parameter), for its refusal."""
    ready = checked_scenario(store, name, methods, scenario_params, read_as, spelling, method_params)
    return run_checked(ready, method_params)


def plan_classes(
    plan: ScenarioPlan, labels: StoreLabels, store: FeatureStore
) -> tuple[np.ndarray, list[str] | None]:
    """(order, names): order[id] the label read of the plan's class id (the first train row of that
    id; a class with no train row, 0), and the store's class names where the plan reads the store's
    own labels (a domain reading's labels, such as CIFAR-100's superclasses, are said as numbers):
    what `named_classes` names a class by, so that a `ClassFault` raised with a plan's id inside a
    scenario names the class as every other message does (issue 57, point 8)."""
    order = np.zeros(plan.num_classes, dtype=np.int64)
    known = plan.train_ids >= 0
    ids, first = np.unique(plan.train_ids[known], return_index=True)
    order[ids] = labels.train_labels[np.flatnonzero(known)[first]]
    dataset = store.identity["dataset"]
    names = dataset.get("class_names") if labels.dataset == dataset["name"] else None
    return order, None if names is None else list(names)


def scenario_values(name: str, given: tuple[str, ...]) -> dict[str, Any]:
    """`--set NAME=VALUE` texts as the scenario's values, each of its parameter's type; one line for
    a text that is no NAME=VALUE or a value not of its type (its rule is checked by the plan)."""
    kind = scenario(name)
    types = {p.name: p.kind for p in kind.params}
    values: dict[str, Any] = {}
    for text in given:
        key, sep, raw = text.partition("=")
        if not sep or not key:
            raise UserValueError(f"--set takes NAME=VALUE, got {text!r}")
        if key not in types:
            raise UserValueError(
                f"scenario {kind.name} takes no parameter {key!r} (it takes: {', '.join(types) or 'none'})"
            )
        if key in values:
            raise UserValueError(f"--set {key} given twice (give each scenario value once)")
        try:
            values[key] = types[key](raw)
        except ValueError:
            raise UserValueError(
                f"--set {key} must be {'an integer' if types[key] is int else 'a number'}, got {raw!r}"
            ) from None
    return values


def beyond_cil(request: Any) -> bool:
    """Whether a command's request (fit, sweep, baselines: `scenario`, `set_values`,
    `scenario_values`, `read_as` where it has one, `spell`) asks for a scenario other than `cil`,
    checked here once: an unknown name is one line with the closest, and scenario values given
    for `cil` are one line (its split being the split flags)."""
    kind = scenario(request.scenario, request.spell("scenario"))
    if kind.name != "cil":
        return True
    if request.set_values or request.scenario_values or getattr(request, "read_as", ""):
        raise UserValueError(
            f"scenario values are for a scenario other than cil; cil's split is {request.spell('init_cls')}, "
            f"{request.spell('increment')} and {request.spell('order_seed')}"
        )
    return False


def with_split(
    kind: type[Scenario], values: dict[str, Any], given: Mapping[str, Any], spell: Any
) -> dict[str, Any]:
    """A scenario's values with the class-incremental split's flags a command was given (name ->
    value; None: not given) where the scenario declares them (til takes init_cls, increment and
    order_seed): a flag it does not take, or one given twice (also as a scenario value), is one
    line, named as `spell` names it."""
    takes = {p.name for p in kind.params}
    for name, value in given.items():
        if value is None:
            continue
        if name not in takes:
            raise UserValueError(
                f"{spell(name)} does not apply to scenario {kind.name} "
                f"(it takes: {', '.join(sorted(takes)) or 'none'}; set them with --set NAME=VALUE)"
            )
        if name in values:
            raise UserValueError(f"{spell(name)} given twice (also as a scenario value)")
        values[name] = value
    return values


def scenario_command(request: Any) -> list[ScenarioResult]:
    """`tosca scenario`'s one call: the request's values checked, then `run_scenario`."""
    if missing_here(request.store):
        raise UserValueError(f"--store {request.store} does not exist")
    values = scenario_values(request.scenario, tuple(request.set_values))
    tosca = {
        "routers": tuple(request.routers),
        "recurring": request.recurring,
        "module_per": request.module_per,
        "later_modules": request.later_modules,
    }
    moved = [name for name, value in tosca.items() if value != TOSCA_DEFAULTS[name]]
    if moved and TOSCA not in request.methods:
        flag = "--" + moved[0].replace("_", "-")
        raise UserValueError(f"{flag} is TOSCA's, and --methods has no tosca (add it, or leave {flag} out)")
    ready = checked_scenario(
        request.store,
        request.scenario,
        tuple(request.methods),
        values,
        read_as=request.read_as,
        method_params={TOSCA: tosca},
    )
    tell(f"scenario {ready.plan.describe()}")  # before any learning: what is about to run
    if TOSCA in ready.methods:
        routed = (
            "told the task (no router)"
            if ready.kind.told_task
            else f"routers {', '.join(tosca_options(tosca)[0])}"
        )
        later = "trained" if request.later_modules == "train" else "the first task's, reused frozen"
        tell(
            f"tosca: {routed}; a class met again: {request.recurring}; a module per {request.module_per}; "
            f"modules after the first: {later}"
        )
    return run_checked(ready, {TOSCA: tosca})
