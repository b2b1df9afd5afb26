"""The run folder's format: what `tosca fit` writes, a cell (`records.cell`, issue 54), and
reading its state back with checks.

```
runs/<name>/
  .tosca                       {"kind": "run"}: the folder is tosca's (tosca_foundation.folders)
  asked.json                   what was asked: the resolved recipe, task split, validation split
                               (when one is held out), store path and fingerprint, the protocol in
                               words (each task's class names, warnings), the versions that change
                               numbers; "format" (`records.run_config`)
  measured.json                what was measured and cannot be derived: per task its last epoch's
                               training figures (ce, l1_term, loss = ce + l1_term, train_acc), its
                               seconds and eval_seconds, its training curve; the machine
                               (`records.run_cell`)
  outcomes.safetensors         which test (and validation) images each router answered right and
                               routed right after each task, and the task it picked after the last
                               (`records.outcomes`): every figure is computed from them when read
  state/task_NNN.safetensors   task NNN's LuCA module (`luca.*`, the reference state dict), the
                               classifier after that task (`head.weight`, `head.sigma`) and its
                               training stats and curve (metadata): what a resumed fit starts from
  state/head.safetensors       the classifier after the last finished task
  state/router.safetensors     the frozen-feature routers' per-class statistics after the last task
  state/validation.json        the store ids of the training images held out for validation (when any)
  done.json                    written last: the sha256 of every file above (`records.cell`)
```

A fit or `tosca eval` removes done.json first, before anything is written, and writes it again
when every file is: a run killed mid-task is never read as finished, and is resumed from its
finished tasks' state files. Every figure (A_t, A_bar, A_last, forgetting, intervals, standard
errors, image counts, routing accuracy, the routing confusion, the finished tasks) is worked out
from the answers when read, and the parameter count from what was asked (`run_cell.read_run`, the
one reader).

Views, written for people and never read back by tosca (no figure in them is believed):
metrics.json (the figures as `read_run` gives them, with the training figures), results.csv (one
row per task, router and split: A_t with its exact interval and its images, the training figures),
confusion.json (the routing's confusion after the last task), accuracy.png, confusion.png,
curves.csv and curves.png (the training curves, one row per task and epoch).

A run folder written before runs were cells (a config.json, no asked.json) is refused in one line
(`run_config.read_run_config`). Every file is written whole or not at all (`tosca_foundation.atomic`).
Every state file read back is checked before it is used: a task or router file that is not
safetensors or does not fit the recorded recipe stops the command with one line naming the file
and what to do, never a traceback or a wrong number.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from featcache.store import FeatureStore, open_unchanged
from tosca_foundation import atomic
from tosca_foundation.errors import UserError
from tosca_foundation.files import parse_json
from tosca_foundation.folders import refuse_planted
from tosca_foundation.tensorfiles import Header, TensorFileError, expect, read_safetensors
from tosca_heads.engine.layout import ParamLayout
from tosca_heads.method.metrics import summarise
from tosca_heads.method.protocol import NO_VALIDATION, StreamConfig, ValidationConfig
from tosca_heads.method.recipe import TrainConfig
from tosca_heads.method.uncertainty import (
    Interval,
    Outcomes,
    accuracy_interval,
    clopper_pearson,
    intervals_of,
    methods_said,
)
from tosca_heads.records import (
    FORMAT,
    config_digest,  # noqa: F401 (what each task file records; a run's readers take it from here)
    plots,
    with_intervals,
)
from tosca_heads.records.cell import DONE, STATE, check_whole
from tosca_heads.records.run_config import CONFIG, EDITED, read_run_config
from tosca_heads.routers import ROUTERS

VALIDATION_FILE = f"{STATE}/validation.json"
METRICS = "metrics.json"  # a view: never read back
CONFUSION = "confusion.json"  # a view: the routing's confusion matrices after the last task
ROUTER_FILE = (
    f"{STATE}/router.safetensors"  # the frozen-feature routers' per-class statistics after the last task
)
HEAD_FILE = f"{STATE}/head.safetensors"
CURVES_FILE = "curves.csv"
CURVES_PLOT = "curves.png"
LOSS_PARTS = ("ce", "l1_term", "loss")  # cross-entropy, the L1 term, their sum: one name each, everywhere
STAT_KEYS = (*LOSS_PARTS, "train_acc", "seconds")  # a task's training figures (its last epoch's)
CURVE_COLUMNS = ("format", "task", "epoch", *LOSS_PARTS, "lr")
MAX_EPOCHS = 100_000  # a curve with more epochs is no curve tosca wrote


def validation_of(config: dict[str, Any], run_dir: Path) -> ValidationConfig:
    """The validation split a run's asked.json records (none when it records none), checked."""
    if "validation" not in config:
        return NO_VALIDATION
    block = config["validation"]
    if not isinstance(block, dict):
        raise UserError(
            f"{Path(run_dir) / CONFIG}: its validation is not an object; the file was edited or damaged"
        )
    return _recorded(
        run_dir, "validation split", ValidationConfig, {k: block.get(k) for k in ("fraction", "seed")}
    )


def write_validation_ids(path: Path, validation: ValidationConfig, ids: Sequence[str]) -> None:
    """The held-out training images' store ids (the split, recorded) at `path`: a run's
    state/validation.json (`VALIDATION_FILE`), a sweep's validation.json."""
    if validation.enabled:
        payload = {**validation.record(), "ids": list(ids)}
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic.write_text(Path(path), json.dumps(payload, indent=1) + "\n")


# ------------------------------------------------------------------------------------------ asked.json


def open_run_store(config: dict[str, Any], run_dir: Path) -> FeatureStore:
    """The store a run was fitted on, checked (complete, attrs that fit) and still the same one."""
    return open_unchanged(
        config["store"],
        config["store_fingerprint"],
        f"run {run_dir} was made",
        "fit a new run on it (another --run)",
    )


def _recorded(run_dir: Path, what: str, make: Any, values: Any) -> Any:
    """`make(**values)` validated; a value of the wrong type or out of range names the file."""
    where = Path(run_dir) / CONFIG
    if not isinstance(values, dict):
        raise UserError(f"{where}: its {what} is not an object; the file was edited or damaged")
    try:
        made = make(**values)
    except TypeError as exc:
        raise UserError(
            f"run {run_dir} records a {what} this tosca does not know ({exc}); was it made by a newer version?"
        ) from None
    try:
        made.validate()
    except UserError as exc:
        raise UserError(
            f"{where} records an invalid {what} ({exc}); the file was edited or damaged"
        ) from None
    return made


def train_config_of(config: dict[str, Any], run_dir: Path) -> TrainConfig:
    """The recipe recorded in a run's config, checked like the command line's flags."""
    train = _recorded(run_dir, "recipe", TrainConfig, config["train"])
    if train.r is None or train.s is None:
        raise UserError(f"{Path(run_dir) / CONFIG} records no r or s; the file was edited or damaged")
    return train


def stream_config_of(config: dict[str, Any], run_dir: Path) -> StreamConfig:
    """The task split recorded in a run's config, checked like the command line's flags."""
    return _recorded(run_dir, "task split", StreamConfig, config["stream"])


def feature_dim_of(config: dict[str, Any], run_dir: Path) -> int:
    dim = config["feature_dim"]
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise UserError(
            f"{Path(run_dir) / CONFIG} records feature_dim {dim!r}; the file was edited or damaged"
        )
    return dim


# ------------------------------------------------------------------------------------------ task files


def check_whole_if_finished(run_dir: Path) -> None:
    """A run that finished (its done.json there) is read only whole (`cell.check_whole`): a state
    file edited, copied in or deleted since is one line before anything is read or rewritten; a
    link or fifo planted in it is named as such first (`folders.refuse_planted`), never read."""
    if (Path(run_dir) / DONE).exists():
        refuse_planted(Path(run_dir), "--run")
        check_whole(run_dir, EDITED)


def task_file(run_dir: Path, task: int) -> Path:
    return Path(run_dir) / STATE / f"task_{task:03d}.safetensors"


def finished_tasks(run_dir: Path) -> int:
    n = 0
    while task_file(Path(run_dir), n).exists():
        n += 1
    return n


def check_no_task_lost(run_dir: Path, found: int) -> None:
    """Before a run never finished is evaluated again: every task file it had is there (a finished
    one is checked whole first: `check_whole_if_finished`). A task file past the first missing one
    means one was deleted; evaluating what is left would rewrite the run's files with tasks dropped
    without a word. One line naming the file; nothing is rewritten."""
    later = sorted((Path(run_dir) / STATE).glob("task_*.safetensors"))
    beyond = [path.name for path in later if path.name > task_file(run_dir, found).name]
    if beyond:
        raise UserError(
            f"run {run_dir}: {task_file(run_dir, found).name} is missing ({', '.join(beyond)} remain): "
            f"evaluating it would drop tasks from its files; `tosca fit --run {run_dir}` trains that task again"
        )


def check_task_count(run_dir: Path, found: int, tasks: int) -> None:
    """More task files than the run's split has tasks: one came from elsewhere, or asked.json's
    split was edited; nothing of such a run can be scored."""
    if found > tasks:
        raise UserError(
            f"run {run_dir} holds {found} task files but its split (asked.json) has {tasks} tasks: "
            "a task file was copied in or the split edited"
        )


def save_task(
    run_dir: Path,
    task: int,
    module: dict[str, torch.Tensor],
    head: dict[str, torch.Tensor],
    flow: str,
    stats: dict[str, Any],
    digest: str,
    curve: dict[str, list[float]] | None = None,
) -> None:
    """A finished task's file (module, classifier, stats, the config's digest, the training curve:
    {"ce": [...], "l1_term": [...], "lr": [...]} per epoch) and the last head."""
    tensors = {f"luca.{k}": v for k, v in module.items()}
    tensors.update(head)
    meta = {"task": str(task), "flow": flow, "stats": json.dumps(stats), "config": digest}
    if curve is not None:
        meta["curve"] = json.dumps(curve)
    (Path(run_dir) / STATE).mkdir(parents=True, exist_ok=True)
    atomic.write_safetensors(task_file(run_dir, task), tensors, meta)  # whole or not at all
    atomic.write_safetensors(Path(run_dir) / HEAD_FILE, head)


def _damaged(run_dir: Path, name: str, why: str, fix: str) -> UserError:
    return UserError(f"run {run_dir}: {name} is damaged ({why}); {fix}")


def load_task(
    run_dir: Path,
    task: int,
    layout: ParamLayout,
    seen_classes: int,
    digest: str,
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], dict[str, float]]:
    """A finished task's module (reference LuCA state dict, checked against the recipe's shapes),
    classifier snapshot and training stats (`STAT_KEYS`), with its training curve under "curve"
    (`read_curve`'s form). Everything in the file is checked against the run's
    recipe and split (flow, task, the classes seen by then, the digest of the config the caller
    holds: `config_digest`), finite float32 values included: a file copied from another run or
    edited must stop here, never be scored."""
    path = task_file(run_dir, task)
    refit = (
        f"delete it and the task files after it, then `tosca fit --run {run_dir}` trains those tasks again"
    )
    try:  # the header first: the run, names, dtypes and shapes it expects, or no tensor is read
        tensors, meta = read_safetensors(path, _task_header(task, layout, seen_classes, digest))
        stats = parse_json(meta["stats"], "its training stats")
        curve = parse_json(meta["curve"], "its training curve")
    except KeyError as exc:
        raise _damaged(run_dir, path.name, f"no {exc} in its metadata", refit) from None
    except _OtherConfig as exc:
        raise _damaged(run_dir, path.name, str(exc), "restore asked.json, or fit a new run") from None
    except UserError as exc:
        raise _damaged(run_dir, path.name, str(exc), refit) from None
    for key, value in tensors.items():
        if value.dtype != torch.float32:
            raise _damaged(run_dir, path.name, f"{key} holds {value.dtype} values, not float32", refit)
        if not bool(torch.isfinite(value).all()):
            raise _damaged(run_dir, path.name, f"{key} holds NaN or inf", refit)
    module = {k[5:]: v for k, v in tensors.items() if k.startswith("luca.")}
    head = {k: v for k, v in tensors.items() if k.startswith("head.")}
    expected = layout.state_shapes()
    shapes = {k: tuple(v.shape) for k, v in module.items()}
    if shapes != expected:
        raise _damaged(run_dir, path.name, "its module does not fit the recipe in asked.json", refit)
    weight, sigma = head.get("head.weight"), head.get("head.sigma")
    if (
        weight is None
        or sigma is None
        or weight.dim() != 2
        or weight.shape[1] != layout.dim
        or sigma.numel() != 1
    ):
        raise _damaged(run_dir, path.name, "its classifier does not fit the recipe in asked.json", refit)
    if weight.shape[0] != seen_classes:
        why = f"its classifier has {weight.shape[0]} classes where task {task} of the run's split has seen {seen_classes}"
        raise _damaged(run_dir, path.name, why, refit)
    if (
        not isinstance(stats, dict)
        or not all(_finite(stats.get(k)) for k in STAT_KEYS)
        or not 0.0 <= stats["train_acc"] <= 1.0
    ):
        raise _damaged(run_dir, path.name, "its training stats are unreadable", refit)
    stats = {k: stats[k] for k in STAT_KEYS}
    stats["curve"] = read_curve(curve)
    if stats["curve"] is None:
        raise _damaged(run_dir, path.name, "its training curve is unreadable", refit)
    return module, head, stats


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def read_curve(curve: Any) -> dict[str, list[float]] | None:
    """A training curve as a task file keeps it, {"ce": [...], "l1_term": [...], "lr": [...]}; None
    when it is not one: as many finite numbers each, at least one epoch and at most MAX_EPOCHS."""
    if not isinstance(curve, dict) or set(curve) != {"ce", "l1_term", "lr"}:
        return None
    columns = list(curve.values())
    if not all(isinstance(c, list) and 0 < len(c) == len(columns[0]) <= MAX_EPOCHS for c in columns):
        return None
    return curve if all(_finite(v) for c in columns for v in c) else None


def curve_epochs(curve: dict[str, list[float]]) -> list[dict[str, float]]:
    """A curve epoch by epoch, as curves.csv, the trackers and curves.png show it: ce, l1_term,
    loss (= ce + l1_term) and lr."""
    return [
        {"ce": ce, "l1_term": l1, "loss": ce + l1, "lr": lr}
        for ce, l1, lr in zip(curve["ce"], curve["l1_term"], curve["lr"], strict=True)
    ]


class _OtherConfig(TensorFileError):
    """A task file written under another asked.json (restoring it is the fix, not refitting)."""


def _task_header(task: int, layout: ParamLayout, seen_classes: int, digest: str) -> Callable[[Header], None]:
    """What a task file's header must say before its tensors are read: the recipe's module (names
    and shapes), a classifier of the run's dimension whose rows are the classes seen by `task`,
    float32 only."""

    def check(header: Header) -> None:
        meta = header.metadata
        missing = [key for key in ("task", "flow", "config", "stats", "curve") if key not in meta]
        if missing:
            raise TensorFileError(f"no {missing[0]!r} in its metadata")
        if meta["config"] != digest:
            raise _OtherConfig(
                "it was written under another asked.json: the split or recipe there was edited since"
            )
        if meta["task"] != str(task) or meta["flow"] != layout.flow:
            raise TensorFileError(
                f"it was written for task {meta.get('task')} of a {meta.get('flow')} run, not task {task} "
                f"of this {layout.flow} run"
            )
        module = {f"luca.{k}": v for k, v in layout.state_shapes().items()}
        unknown = sorted(set(header.tensors) - set(module) - {"head.weight", "head.sigma"})
        if unknown:
            raise TensorFileError(f"it holds a tensor {unknown[0][:60]!r} that no task file has")
        for key, info in header.tensors.items():
            if info.dtype != "F32":
                raise TensorFileError(f"{key} holds {info.dtype} values, not float32")
        if {k: v.shape for k, v in header.tensors.items() if k.startswith("luca.")} != module:
            raise TensorFileError("its module does not fit the recipe in asked.json")
        weight, sigma = header.tensors.get("head.weight"), header.tensors.get("head.sigma")
        if (
            weight is None
            or sigma is None
            or len(weight.shape) != 2
            or weight.shape[1] != layout.dim
            or math.prod(sigma.shape) != 1
        ):
            raise TensorFileError("its classifier does not fit the recipe in asked.json")
        if weight.shape[0] != seen_classes:
            raise TensorFileError(
                f"its classifier has {weight.shape[0]} classes where task {task} of the run's split has "
                f"seen {seen_classes}"
            )

    return check


def _router_header(run_dir: Path) -> Callable[[Header], None]:
    """A routers' statistics file holds per-class counts and sums, one scatter matrix and one
    shrinkage per task, float64, at the run's feature dimension, for no more classes than the run's
    finished tasks have seen; checked before its tensors are read."""
    config = read_run_config(run_dir)
    dim = feature_dim_of(config, run_dir)
    stream = stream_config_of(config, run_dir)
    tasks = max(1, finished_tasks(run_dir))
    most = stream.init_cls + (tasks - 1) * stream.increment

    def check(header: Header) -> None:
        counts, shrinkage = header.tensors.get("counts"), header.tensors.get("shrinkage")
        classes = counts.shape[0] if counts is not None and len(counts.shape) == 1 else None
        steps = shrinkage.shape[0] if shrinkage is not None and len(shrinkage.shape) == 1 else None
        shapes = {
            "counts": (classes,),
            "sums": (classes, dim),
            "tsums": (classes, dim),
            "scatter": (dim, dim),
            "shrinkage": (steps,),
            "tukey": (1,),
        }
        expect(header, shapes, {**dict.fromkeys(shapes, "F64"), "tukey": "BOOL"})
        if (classes or 0) > most or (steps or 0) > tasks:
            raise TensorFileError(
                f"it covers {classes} classes in {steps} tasks; the run's {tasks} finished task(s) have seen "
                f"at most {most} classes"
            )

    return check


def load_router_statistics(run_dir: Path) -> dict[str, torch.Tensor] | None:
    """The routers' statistics file of a run (None when the run has none), its header checked
    against the run's feature dimension before a tensor is read."""
    path = Path(run_dir) / ROUTER_FILE
    if not path.is_file():
        return None
    try:
        tensors, _ = read_safetensors(path, _router_header(run_dir))
    except UserError as exc:
        raise _damaged(run_dir, ROUTER_FILE, str(exc), f"`tosca eval {run_dir}` rebuilds it") from None
    return tensors


# ------------------------------------------------------------------------------------------ results


@dataclass
class StageResult:
    """Evaluation after one task: per router, A_t, block accuracies and routing accuracy, on the
    test split (`routers`) and on the validation split (`validation`, None without one)."""

    task: int
    stats: dict[str, float]
    routers: dict[str, dict[str, Any]]
    eval_seconds: float
    validation: dict[str, dict[str, Any]] | None = None
    curve: dict[str, list[float]] | None = None  # per epoch: "ce", "l1_term" and "lr" (None: not kept)


@dataclass
class RunResult:
    run_dir: Path
    config: dict[str, Any]
    stages: list[StageResult]
    trained: list[int] = field(default_factory=list)
    params_per_task: int = 0
    group_size: int = 1  # configurations trained together in its engine run
    # per split: each image's store row, class and task (`StageEvaluator.images`), in the order of
    # the stages' per-image answers; empty when the stages kept none
    images: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    _found: tuple[int, dict[str, dict[str, dict[str, Interval]]]] | None = field(default=None, repr=False)

    def outcomes(self) -> dict[str, dict[str, Outcomes]]:
        """Per split and router (the registry's order), which images it answered right after each
        task; a split whose stages kept no answers is left out."""
        found: dict[str, dict[str, Outcomes]] = {}
        for split in ("test", "validation"):
            images = self.images.get(split)
            stages = [(s.routers if split == "test" else s.validation) or {} for s in self.stages]
            if images is None or not stages or not stages[0]:
                continue
            n = len(images["rows"])
            for name in (r for r in ROUTERS if r in stages[0]):
                if not all("correct" in s.get(name, {}) and "routed" in s[name] for s in stages):
                    continue
                right = np.stack([np.unpackbits(s[name]["correct"], count=n).astype(bool) for s in stages])
                routed = np.stack([np.unpackbits(s[name]["routed"], count=n).astype(bool) for s in stages])
                chosen = stages[-1][name].get("chosen")  # the route taken after the last task
                found.setdefault(split, {})[name] = Outcomes(
                    right, images["classes"], images["task"], images["rows"], routed, chosen
                )
        return found

    def intervals(self) -> dict[str, dict[str, dict[str, Interval]]]:
        """Per split and router, A_bar, A_last and forgetting with their intervals
        (`uncertainty.intervals_of`), computed once per number of stages."""
        if self._found is None or self._found[0] != len(self.stages):
            found = {
                split: intervals_of({n: [o] for n, o in named.items()})
                for split, named in self.outcomes().items()
            }
            self._found = (len(self.stages), found)
        return self._found[1]

    def metrics(self) -> dict[str, Any]:
        """What metrics.json holds (format `FORMAT`): per router on test ("routers"), and
        on the validation split ("validation") where the run holds one out; each router's block
        with its images and intervals where the stages kept their answers, and how the intervals
        are computed ("uncertainty")."""
        found = self.intervals()
        metrics = {
            "format": FORMAT,
            "finished_tasks": len(self.stages),
            "params_per_task": self.params_per_task,
            "routers": _summaries([s.routers for s in self.stages], found.get("test")),
            "tasks": [{"task": s.task, **s.stats, "eval_seconds": s.eval_seconds} for s in self.stages],
        }
        if self.stages and self.stages[0].validation is not None:
            metrics["validation"] = _summaries(
                [s.validation or {} for s in self.stages], found.get("validation")
            )
        if found:
            metrics["uncertainty"] = methods_said()
        return metrics


def _summaries(
    stages: list[dict[str, dict[str, Any]]], found: dict[str, dict[str, Interval]] | None = None
) -> dict[str, Any]:
    """Per router (the registry's order), its metrics over the stages' scores, with their
    intervals where `found` has them."""
    summaries = {}
    for name in (r for r in ROUTERS if stages and r in stages[0]):
        curve = [s[name]["A_t"] for s in stages]
        matrix = [s[name]["blocks"] for s in stages]
        routing = [s[name]["routing"] for s in stages]
        block = summarise(curve, matrix, routing)
        mine = (found or {}).get(name)
        routed = None if mine is None else accuracy_interval(routing[-1], next(iter(mine.values())).images)
        summaries[name] = {**with_intervals(block, mine, routed), **tied_of([s[name] for s in stages])}
    return summaries


def tied_of(scores: list[dict[str, Any]]) -> dict[str, list[int]]:
    """One router's ties over the stages (`method.ties`): "tied", per task the answers whose top
    (or route) was tied, each counted wrong, and "tied_routes", the routes among them that were
    tied; empty where nothing tied (so a run without a tie keeps the figures it had)."""
    tied = [int(s.get("tied", 0)) for s in scores]
    routes = [int(s.get("tied_routes", 0)) for s in scores]
    return {"tied": tied, "tied_routes": routes} if any(tied) or any(routes) else {}


RESULT_COLUMNS = (
    "format",
    "task",
    "split",
    "router",
    "A_t",
    "A_t_low",
    "A_t_high",
    "images",
    "routing_accuracy",
    *LOSS_PARTS,
    "train_acc",
    "train_seconds",
    "eval_seconds",
)


def write_results(result: RunResult) -> None:
    """metrics.json, results.csv (one row per task, split and router), accuracy.png, and the
    training curves (curves.csv, curves.png) of a run."""
    run_dir = result.run_dir
    outcomes = result.outcomes()
    atomic.write_text(run_dir / METRICS, json.dumps(result.metrics(), indent=2) + "\n")
    with atomic.writing(run_dir / "results.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(RESULT_COLUMNS)
        for stage in result.stages:
            for split, routers in (("test", stage.routers), ("validation", stage.validation or {})):
                for name, scores in routers.items():
                    low, high, images = stage_interval(
                        outcomes.get(split, {}).get(name), stage.task, scores["A_t"]
                    )
                    writer.writerow(
                        [
                            FORMAT,
                            stage.task,
                            split,
                            name,
                            f"{scores['A_t']:.6f}",
                            low,
                            high,
                            images,
                            f"{scores['routing']:.6f}",
                            *(f"{stage.stats[k]:.6f}" for k in LOSS_PARTS),
                            f"{stage.stats['train_acc']:.6f}",
                            f"{stage.stats['seconds']:.4f}",
                            f"{stage.eval_seconds:.4f}",
                        ]
                    )
    write_confusion(result)
    curves = {name: [s.routers[name]["A_t"] for s in result.stages] for name in result.stages[0].routers}
    title = f"{result.config['dataset']} / {result.config['backbone']} / {result.config['train']['flow']}"
    plots.run_curves([s.task for s in result.stages], curves, title, run_dir / "accuracy.png")
    write_curves(run_dir, result.stages, title)


def stage_interval(outcome: Outcomes | None, task: int, a_t: float) -> tuple[str, str, str]:
    """A_t's exact interval after `task` and its images, as results.csv cells ('' when the run kept
    no answers): A_t is a plain accuracy over the images of every class seen."""
    if outcome is None:
        return "", "", ""
    images = int((outcome.task <= task).sum())
    low, high = clopper_pearson(round(a_t * images), images)
    return f"{low:.6f}", f"{high:.6f}", str(images)


def write_confusion(result: RunResult) -> None:
    """confusion.json and confusion.png: where each router sends each task's images after the last
    task (the files of a run evaluated before they existed are written by `tosca eval`)."""
    last = result.stages[-1]
    splits = {"test": last.routers, "validation": last.validation or {}}
    payload = {
        "format": FORMAT,
        "task": last.task,
        **{
            split: {name: scores["confusion"] for name, scores in routers.items() if "confusion" in scores}
            for split, routers in splits.items()
            if routers
        },
    }
    atomic.write_text(result.run_dir / CONFUSION, json.dumps(payload) + "\n")
    honest = {
        name: m for name, m in payload.get("test", {}).items() if name in ROUTERS and ROUTERS[name].honest
    }
    if honest:
        plots.routing_confusion(
            honest, f"routing after task {last.task} (test)", result.run_dir / "confusion.png"
        )


# ------------------------------------------------------------------------------------------ curves


def write_curves(run_dir: Path, stages: list[StageResult], title: str) -> None:
    """curves.csv (one row per task and epoch) and curves.png from the stages' curves."""
    kept = {s.task: s.curve for s in stages if s.curve is not None}
    with atomic.writing(Path(run_dir) / CURVES_FILE, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(CURVE_COLUMNS)
        for task, curve in kept.items():
            for epoch, values in enumerate(curve_epochs(curve)):
                writer.writerow([FORMAT, task, epoch, *(repr(float(v)) for v in values.values())])
    plots.training_curves(kept, title, Path(run_dir) / CURVES_PLOT)
