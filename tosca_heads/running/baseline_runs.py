"""The baselines under TOSCA's protocol (same store, class order, tasks, validation and test rows,
metrics), computed: `run_baseline` learns one registered baseline task by task and scores it after
each task; `check_baseline_params` checks a baseline's own parameters once, for a dry run and a
real one alike. Their files are `records.baseline`; the comparison beside TOSCA is `comparison`.
"""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from featcache.store import check_not_replaced
from tosca_foundation.errors import UserError
from tosca_foundation.names import as_flag
from tosca_heads.engine.numeric_errors import NumericalError
from tosca_heads.method.baseline_registry import BASELINES, check_fits, parameter_count, params_of
from tosca_heads.method.class_names import named_classes
from tosca_heads.method.features import CachedFeatures, FeatureSource
from tosca_heads.method.linalg import single_threaded
from tosca_heads.method.metrics import accuracy, block_accuracies, summarise
from tosca_heads.method.protocol import TaskStream
from tosca_heads.method.scale import ScaleRefusal
from tosca_heads.method.ties import TIED
from tosca_heads.method.uncertainty import Outcomes, intervals
from tosca_heads.records import with_intervals
from tosca_heads.records.baselines_folder import NO_ROUTING, MethodResult, baseline_reference
from tosca_heads.requests.plan import FitPlan

TaskCallback = Callable[[str, int, int], None]  # (baseline, task ended (-1: started), tasks)


LINALG_ERRORS = (np.linalg.LinAlgError, torch.linalg.LinAlgError)


@contextlib.contextmanager
def solvable(name: str, task: int, params: dict[str, Any]) -> Iterator[None]:
    """A solve that fails (a Cholesky of a matrix no longer positive definite, a singular one) is
    one line naming the baseline, the task and what sets the matrix's conditioning, not a
    LinAlgError traceback (issue 57, points 2: features x1e8 in ACIL and DS-AL, or a gamma of
    1e-300, valid but below what float64 can add to a diagonal). The cure of the solve itself
    lies with the solver (method/closed_form.py); this is the edge's refusal."""
    try:
        yield
    except ScaleRefusal as beyond:  # the keyword, and the command line's flag beside it
        raise NumericalError(beyond.said(as_flag(f"{name}_{beyond.param}"))) from None
    except LINALG_ERRORS as exc:
        given = ", ".join(f"{key}={value!r}" for key, value in params.items()) or "its defaults"
        reason = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else type(exc).__name__
        raise NumericalError(
            f"{name} cannot solve its linear system at task {task} ({reason}): with {given}, the "
            "features' scale or a regularisation that float64 cannot hold leaves the matrix singular; "
            "raise its regularisation or check the store's feature scale (`tosca cache info`)"
        ) from None


def run_baseline(
    name: str,
    plan: FitPlan,
    source: FeatureSource | None = None,
    on_task: TaskCallback | None = None,
    **params: Any,
) -> MethodResult:
    """Learn task by task (all seen classes at once for the joint probe); evaluate after each task
    on test and, with a validation split, on the held-out training rows (which never train). The
    plan's store, stream, validation rows and device are a fit's (`FitPlan`: built and checked at
    the edge, the split carved there once). Computed on one CPU thread: the same numbers in a
    suite's worker and from the single command, whatever OMP_NUM_THREADS says (multithreaded BLAS
    sums in another order)."""
    name = BASELINES.pick(name, "baseline")  # an alias stands for its name
    store, stream, held, device = plan.store, plan.stream, plan.held, plan.device.resolved
    check_baseline_params(name, params, store.dim, stream.num_classes, rows=len(plan.train_labels))
    fingerprint = store.fingerprint  # as opened: checked again after the last read
    source = source or CachedFeatures(store, device=device)
    train_y, test_y = plan.train_labels, plan.test_labels  # HELD_OUT rows never train
    train_x = source.clean("train", np.arange(len(train_y))).to(device)
    scored = {"test": (source.clean("test", np.arange(len(test_y))).to(device), test_y)}
    if len(held):
        scored["validation"] = (train_x[_index(held, train_x)], plan.held_labels)
    estimator = BASELINES[name](device=device, **params)
    names = store.identity["dataset"].get("class_names")
    curves: dict[str, tuple[list[float], list[list[float]]]] = {split: ([], []) for split in scored}
    right = {split: np.zeros((stream.num_tasks, len(y)), dtype=bool) for split, (_, y) in scored.items()}
    tied: dict[str, list[int]] = {split: [] for split in scored}  # per task: rows with no single top
    start = time.perf_counter()
    if on_task:  # started: a progress line's time counts from here, as the result's seconds do
        on_task(name, -1, stream.num_tasks)
    with single_threaded(device):
        for task in range(stream.num_tasks):
            rows = (stream.rows_of_task if estimator.incremental else stream.rows_seen)(train_y, task)
            with solvable(name, task, params), named_classes(stream.order, names):
                if estimator.incremental:
                    estimator.partial_fit(train_x[_index(rows, train_x)], train_y[rows])
                else:
                    estimator.fit(train_x[_index(rows, train_x)], train_y[rows])
            if task == 0 and "validation" in scored and callable(getattr(estimator, "tune", None)):
                x, y = scored["validation"]
                seen = stream.rows_seen(y, task)
                # its knob, on rows that never train; one that reshapes the features (KLDA's sigma)
                # refits the first task, whose rows it is handed while it is the task at hand
                first = {"first": (train_x[_index(rows, train_x)], train_y[rows])}
                takes_first = "first" in inspect.signature(estimator.tune).parameters
                estimator.tune(x[_index(seen, x)], y[seen], **(first if takes_first else {}))
            for split, (x, y) in scored.items():
                seen = stream.rows_seen(y, task)
                pred = checked_predictions(
                    name, estimator.predict(x[_index(seen, x)]), len(seen), task, stream
                )
                right[split][task, seen] = pred == y[seen]  # TIED equals no label: a tie is wrong
                tied[split].append(int((pred == TIED).sum()))
                curves[split][0].append(accuracy(pred, y[seen]))
                curves[split][1].append(block_accuracies(pred, y[seen], stream.task_of(y[seen]), task + 1))
            if on_task:
                on_task(name, task, stream.num_tasks)
    check_not_replaced(store.path, fingerprint, f"baseline {name!r}")
    rows = {"test": np.arange(len(test_y)), "validation": held}
    store_labels = {"test": store.labels("test"), "validation": store.labels("train")[held]}
    outcomes = {
        split: Outcomes(right[split], store_labels[split], stream.task_of(y), rows[split])
        for split, (_, y) in scored.items()
    }
    found = {split: intervals([outcome]) for split, outcome in outcomes.items()}
    metrics = with_intervals(summarise(*curves["test"]), found["test"])
    metrics.update(chosen_knob(estimator))
    if hasattr(estimator, "largest_residual_"):  # DS-AL: what its compensation stream was given
        metrics["largest_residual"] = float(estimator.largest_residual_)
    if any(tied["test"]):  # said under the table (`ties_said`); absent where none tied
        metrics["tied"], metrics["tied_of"] = tied["test"], len(test_y)
    if callable(getattr(estimator, "state_bytes", None)):
        metrics["state_bytes"] = int(estimator.state_bytes())  # what it keeps after the last task
    held_out = (
        with_intervals(summarise(*curves["validation"]), found["validation"])
        if "validation" in curves
        else None
    )
    reference = baseline_reference(name)
    return MethodResult(
        name,
        NO_ROUTING,
        metrics,
        parameter_count(name, params, store.dim, stream.num_classes),  # from what was asked, as a cell's
        time.perf_counter() - start,
        held_out,
        reference,
        outcomes,
    )


def chosen_knob(estimator: Any) -> dict[str, Any]:
    """The knob a baseline chose for itself (its class's `tuned`, "ridge": the value in `ridge_`)
    and how (`tuned_by_`: "validation" when the run's validation split chose it, else the paper's
    rule in words), for its metrics.json and the comparison's notes; {} for one with no knob."""
    knob = getattr(estimator, "tuned", None)
    if not knob or not hasattr(estimator, f"{knob}_"):
        return {}
    value = getattr(estimator, f"{knob}_")
    said = str(getattr(estimator, "tuned_by_", "its paper's rule"))
    return {knob: float(value), "knob": knob, "chosen_by": said}


def check_baseline_params(
    name: str,
    params: dict[str, Any],
    dim: int,
    classes: int = 0,
    rows: int = 0,
    spell: Callable[[str], str] = as_flag,
) -> None:
    """A baseline's own keywords (`baseline_registry.arguments`' answer, or a `BaselineClassifier`'s),
    checked once for the dry run and the real one against what its class declares: one line each.
    `rows`: the training rows at most (0: not known), for a method whose memory depends on them."""
    for param in params_of(name):
        if param.name in params:
            param.check(params[param.name], f"baseline {name!r}'s {param.name}")
    values = {**{p.name: p.default for p in params_of(name)}, **params}
    check_fits(name, values, dim, classes, rows, spell)  # `spell`: a refusal's words for METHOD_NAME


def checked_predictions(name: str, pred: Any, n: int, task: int, stream: TaskStream) -> np.ndarray:
    """A baseline's predictions as class ids, refused in one line unless they are what `predict` must
    give: n integers among the classes seen so far. A plug-in's [n, 1] or NaN would otherwise be
    scored as a plausible but meaningless accuracy."""
    seen = stream.init_cls + task * stream.increment
    values = pred.detach().cpu().numpy() if isinstance(pred, torch.Tensor) else pred
    if not isinstance(values, np.ndarray):
        raise UserError(
            f"baseline {name!r}: predict returned {type(pred).__name__}, not an array of class ids"
        )
    if values.shape != (n,):
        raise UserError(
            f"baseline {name!r}: predict returned shape {list(values.shape)}, not [{n}] (one class id per test sample)"
        )
    if not np.issubdtype(values.dtype, np.integer):
        raise UserError(f"baseline {name!r}: predict returned {values.dtype} values, not integer class ids")
    answered = values[values != TIED]  # a tie is an answer: wrong, counted (`ties`)
    if len(answered) and (answered.min() < 0 or answered.max() >= seen):
        wrong = int(answered.min()) if answered.min() < 0 else int(answered.max())
        raise UserError(
            f"baseline {name!r}: predicted class {wrong}; the classes seen so far are 0 to {seen - 1}"
        )
    return values


def _index(rows: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(rows).to(like.device)
