"""TOSCA under a scenario's plan: which rows make each module, what a class met again becomes, and
the answers of every asked router from one training (docs/method.md, "Scenarios beyond
class-incremental").

TOSCA learns a module per task on its classes. A plan may ask two things the paper is silent on:
- **a class met again** (`blurry`, `dil`): by default (`recurring="task_rows"`) each task gives its
  classes rows of their own: a class seen in tasks 1 and 3 has a classifier row (and prototype)
  from each, trained with that task's module; an answer's row is read as its class. The
  alternative (`recurring="first_task"`) learns each class once, from the first task that brings
  it: its later rows are not trained on (in `dil`, only the first domain is learnt);
- **evaluation points inside a task** (`blurry`: every `eval_period` images): by default
  (`module_per="task"`) a module is trained on the whole task at its end, as the paper's recipe
  does, so a point inside a task is answered by the modules of the tasks before it (none in the
  first task: every answer there is wrong, `TIED`); the alternative (`module_per="step"`) trains a
  module on the rows of each stretch between two points, so every point has one.
In `cil`, `til` and `fscil` a task is a step and no class recurs: both choices give the paper's
TOSCA, and the figures are those of `partial_fit` task by task.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from tosca_foundation.errors import UserValueError
from tosca_foundation.names import Spell, as_flag
from tosca_heads.applied.estimators import LATER_MODULES, TOSCAClassifier
from tosca_heads.method.linalg import single_threaded
from tosca_heads.method.scenarios import ScenarioPlan
from tosca_heads.method.ties import TIED, top_class
from tosca_heads.routers import ROUTERS, is_honest
from tosca_heads.routers.learned import RouterLearners, on_request

RECURRING = ("task_rows", "first_task")
MODULE_PER = ("task", "step")
DEFAULT_ROUTER = "lda"
TOLD = "told task"  # what answers in `til`: the told module, no router
# TOSCA's scenario options by default (what a kept cell records, what a flag moved from is)
TOSCA_DEFAULTS = {
    "routers": (DEFAULT_ROUTER,),
    "recurring": RECURRING[0],
    "module_per": MODULE_PER[0],
    "later_modules": LATER_MODULES[0],
}


def tosca_options(
    params: Mapping[str, Any] | None, spell: Spell = as_flag
) -> tuple[tuple[str, ...], str, str, dict[str, Any]]:
    """(routers, recurring, module_per, the estimator's keywords) from TOSCA's parameters, each
    checked in one line: an honest router each (a reference, told the task or the test order, is
    never a scenario's result), a choice of `RECURRING` and of `MODULE_PER`. `router` (one) and
    `routers` (several) are both taken; the default is the estimator's, lda. `spell`: how the
    caller's user names them (the command line's flags, Python's keywords)."""
    params = dict(params or {})
    if "routers" in params and "router" in params:
        raise UserValueError(f"give TOSCA's {spell('router')} or its {spell('routers')}, not both")
    if "routers" in params:
        routers = params.pop("routers")
        if isinstance(routers, str):
            routers = tuple(r.strip() for r in routers.split(",") if r.strip())
        if not routers:
            raise UserValueError(f"{spell('routers')} names no router (give one or more: lda, ncm, ...)")
    else:
        routers = (params.pop("router", DEFAULT_ROUTER),)
    picked = []
    for name in routers:
        router = ROUTERS.pick(str(name), spell("routers"))
        if not is_honest(router):
            honest = ", ".join(n for n in ROUTERS if is_honest(n))
            raise UserValueError(
                f"{spell('routers')} {router} is a reference, never a scenario's result (honest: {honest})"
            )
        if router not in picked:
            picked.append(router)
    recurring = params.pop("recurring", RECURRING[0])
    if recurring not in RECURRING:
        raise UserValueError(f"{spell('recurring')} must be one of {', '.join(RECURRING)}, got {recurring!r}")
    module_per = params.pop("module_per", MODULE_PER[0])
    if module_per not in MODULE_PER:
        raise UserValueError(
            f"{spell('module_per')} must be one of {', '.join(MODULE_PER)}, got {module_per!r}"
        )
    later = params.get("later_modules", LATER_MODULES[0])  # the estimator's keyword: left in `params`
    if later not in LATER_MODULES:
        raise UserValueError(
            f"{spell('later_modules')} must be one of {', '.join(LATER_MODULES)}, got {later!r}"
        )
    return tuple(picked), recurring, module_per, params


def answered_by(method: str, params: Mapping[str, Any], told_task: bool) -> str:
    """What answered for `method` with these parameters: TOSCA's first router (`TOLD` when told
    the task), "" for a baseline; a kept cell's row is named as a fresh one is."""
    if method != "tosca":
        return ""
    return TOLD if told_task else tosca_options(params)[0][0]


def learning_units(plan: ScenarioPlan, recurring: str, module_per: str) -> dict[int, np.ndarray]:
    """Step index -> the training rows TOSCA learns a module on after that step, by its choices: at
    each task's last step the task's rows (`module_per="task"`), or each step's (`"step"`); with
    `recurring="first_task"` the rows of classes learnt before are left out (a unit left empty
    learns nothing)."""
    units: dict[int, np.ndarray] = {}
    pending: list[np.ndarray] = []
    learnt = np.zeros(0, dtype=np.int64)
    for s, step in enumerate(plan.steps):
        pending.append(step.train_rows)
        task_ends = s + 1 == len(plan.steps) or plan.steps[s + 1].task != step.task
        if module_per == "step" or task_ends:
            rows = np.concatenate(pending)
            pending = []
            if recurring == "first_task":
                rows = rows[~np.isin(plan.train_ids[rows], learnt)]
            if len(rows):
                units[s] = rows
                learnt = np.union1d(learnt, plan.train_ids[rows])
    return units


def check_router_rows(plan: ScenarioPlan, params: Mapping[str, Any] | None, name_of: Any = str) -> None:
    """One line, before any learning, where an on-request router's baseline cannot learn a unit
    TOSCA learns: FeCAM needs two or more images of a class in each (`least_per_class`), and a
    blurry task's or a few-shot session's class may hold one. `name_of`: a plan class id as the
    store names it."""
    from tosca_heads.method.baseline_registry import BASELINES

    routers, recurring, module_per, _ = tosca_options(params)
    units = learning_units(plan, recurring, module_per)
    for router in on_request(routers):
        learner = ROUTERS[router].learner
        least = int(getattr(BASELINES[learner], "least_per_class", 1))
        for s, rows in units.items():
            ids, counts = np.unique(plan.train_ids[rows], return_counts=True)
            if counts.min() < least:
                raise UserValueError(
                    f"router {router} learns {learner}, which needs {least} or more training images of a "
                    f"class in each module's rows: in {plan.scenario}'s task {plan.steps[s].task}, class "
                    f"{name_of(int(ids[counts.argmin()]))} has {int(counts.min())} (leave {router} out of the routers)"
                )


def tosca_answers(
    plan: ScenarioPlan,
    train_x: np.ndarray,
    test_x: np.ndarray,
    told_task: bool,
    params: Mapping[str, Any] | None = None,
    train_views: np.ndarray | None = None,
    keep: dict[str, Any] | None = None,
) -> dict[str, list[np.ndarray]]:
    """The plan's class id TOSCA answers for each evaluation row at each step, per router (one
    training serves every router). Told the task (`til`), the told module's logits answer and no
    router is used: one list, under `TOLD`. An on-request router (`fecam`, `klda`, `randumb`)
    learns its baseline beside the modules, on the same rows with the same row ids, as a run's
    does (`routers.learned`). `train_views` [V, n, d]: the store's augmented views of the training
    rows, which the modules train on as `tosca fit`'s do (the routers' statistics, the prototypes
    and the on-request baselines read the clean features). `keep`: given, it receives the fitted
    estimator after the stream (`model`) and each classifier row's plan class id (`row_class`), what
    a scenario run keeps for `tosca predict`."""
    routers, recurring, module_per, keywords = tosca_options(params)
    model = TOSCAClassifier(router=routers[0], **keywords)
    learners = RouterLearners(on_request(routers))
    row_class = np.zeros(0, dtype=np.int64)  # each classifier row's class (the plan's id)
    units = learning_units(plan, recurring, module_per)
    answers: dict[str, list[np.ndarray]] = {router: [] for router in ((TOLD,) if told_task else routers)}
    for s, step in enumerate(plan.steps):
        rows = units.get(s)
        if rows is not None:
            ids = plan.train_ids[rows]
            classes = np.unique(ids)  # sorted: the rows of a task in the order partial_fit gives them
            row_ids = len(row_class) + np.searchsorted(classes, ids)  # the estimator's incremental ids
            views = None if train_views is None else train_views[:, rows]
            model.learn_task(train_x[rows], row_ids, views)
            if learners.routers:  # on-request routers only: no copy of the rows otherwise
                with single_threaded(torch.device("cpu")):
                    learners.partial_fit(torch.from_numpy(np.ascontiguousarray(train_x[rows])), row_ids)
            row_class = np.concatenate([row_class, classes])
        eval_x = test_x[step.eval_rows]
        step_answers = _answers(
            model, routers, learners.snapshot(), row_class, plan, step.eval_rows, eval_x, told_task
        )
        for router, answered in step_answers.items():
            answers[router].append(answered)
    if keep is not None:
        keep.update(model=model, row_class=row_class)
    return answers


def _answers(
    model: TOSCAClassifier,
    routers: tuple[str, ...],
    learned: dict[str, Any],
    row_class: np.ndarray,
    plan: ScenarioPlan,
    rows: np.ndarray,
    x: np.ndarray,
    told_task: bool,
) -> dict[str, np.ndarray]:
    """One step's answers as the plan's class ids, per router (the modules score the rows once):
    the routed module's top row's class (`TIED` where the router or the module tied, and everywhere
    before any module is learnt). Told the task, the told module's (under `TOLD`)."""
    if not hasattr(model, "trainer_"):
        return {
            router: np.full(len(rows), TIED, dtype=np.int64) for router in ((TOLD,) if told_task else routers)
        }
    if told_task:
        return {TOLD: _told_answer(model, row_class, plan, rows, x)}
    if model.later_modules == "first":  # one module, reused: no router has a choice to make
        answer = _plan_classes(model, row_class, model.routed(x)[1])
        return {router: answer for router in routers}
    predictor = model.predictor()
    predictor.learned_ = learned
    return {
        router: _plan_classes(model, row_class, predicted.incremental_classes)
        for router, predicted in predictor.predict_each(x, routers).items()
    }


def _plan_classes(model: TOSCAClassifier, row_class: np.ndarray, incremental: np.ndarray) -> np.ndarray:
    """The estimator's incremental classes as the plan's class ids (`TIED` stays: a tie counts as
    wrong, `ties`); the estimator's label is the classifier row, `row_class` its class."""
    tied = incremental == TIED
    row = model.labels_in_order_[np.where(tied, 0, incremental)]
    return np.where(tied, TIED, row_class[row]).astype(np.int64)


def _told_answer(
    model: TOSCAClassifier, row_class: np.ndarray, plan: ScenarioPlan, rows: np.ndarray, x: np.ndarray
) -> np.ndarray:
    """Told the task (`til`): the told module's logits over its task's classes only (the paper's
    told-the-task reference, honest here). No class recurs in a told-task plan, so each class has
    one row."""
    with single_threaded(torch.device(model.device)):
        logits = model.predictor().module_logits(x).cpu().numpy()  # [modules, n, rows]
    told = logits[plan.test_task[rows], np.arange(len(rows))]
    scores = np.full((len(rows), plan.num_classes), -np.inf)
    scores[:, row_class[model.labels_in_order_]] = told
    return told_among(scores, plan, rows)


def told_among(scores: np.ndarray, plan: ScenarioPlan, rows: np.ndarray) -> np.ndarray:
    """Each row's best class among its told task's classes (a tie counts as wrong: `ties`)."""
    masked = np.full_like(scores, -np.inf, dtype=np.float64)
    tasks = plan.test_task[rows]
    for t in np.unique(tasks):
        here = np.flatnonzero(tasks == t)
        classes = plan.task_classes[t][plan.task_classes[t] < scores.shape[1]]
        masked[np.ix_(here, classes)] = scores[np.ix_(here, classes)]
    return top_class(masked)
