"""A trained run applied to new features: every task module, a router, the chosen module's class.

A run folder holds each task's module, the classifier after the last task and the frozen-feature
routers' statistics; nothing else is needed to route and classify a feature vector
(`RunPredictor`). `predict_images(PredictRequest, ...)` is `tosca predict`: the images are listed
and embedded by the store's own backbone through functions the caller hands in (stage 1's
`featcache.embed`: stage 2 never imports the backbone side), then routed and classified here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from featcache.foundation.devices import resolve_device
from featcache.foundation.errors import UserError
from featcache.store import FeatureStore
from tosca_heads.engine.kernels import normalize_rows
from tosca_heads.engine.layout import ParamLayout
from tosca_heads.engine.outputs import module_outputs
from tosca_heads.experiments.requests import PredictRequest
from tosca_heads.experiments.runfiles import (
    ROUTER_FILE,
    check_task_count,
    feature_dim_of,
    finished_tasks,
    load_router_statistics,
    load_task,
    open_run_store,
    read_metrics,
    read_run_config,
    stream_config_of,
    train_config_of,
)
from tosca_heads.method.protocol import TaskStream
from tosca_heads.routers import ROUTERS, ClassStatistics, StageView, resolve_routers, route
from tosca_heads.routers.scores import module_scores


@dataclass
class Predictions:
    """Per image: the incremental class id, its probability under the chosen module, the chosen task."""

    classes: np.ndarray
    probabilities: np.ndarray
    tasks: np.ndarray


class RunPredictor:
    """A finished run, ready to classify features: `load` reads it, `predict` routes and classifies."""

    def __init__(self, run_dir: Path, num_classes: int, device: torch.device | str = "cpu"):
        self.run_dir = Path(run_dir)
        self.num_classes = num_classes  # the dataset's: the class order permutes all of them
        self.device = torch.device(device)

    def load(self) -> RunPredictor:
        """Read the modules, the last classifier and the router statistics (nothing is trained)."""
        self.config_ = read_run_config(self.run_dir)
        tasks = finished_tasks(self.run_dir)
        if tasks == 0:
            raise UserError(
                f"run {self.run_dir} has no finished task; train one with `tosca fit --run {self.run_dir}`"
            )
        train = train_config_of(self.config_, self.run_dir)
        dim = feature_dim_of(self.config_, self.run_dir)
        self.layout_ = ParamLayout(dim, train.r, train.s, train.flow)
        self.stream_: TaskStream = stream_config_of(self.config_, self.run_dir).task_stream(self.num_classes)
        check_task_count(self.run_dir, tasks, self.stream_.num_tasks)
        modules, head = [], {}
        for task in range(tasks):
            module, head, _ = load_task(self.run_dir, task, self.layout_, self.stream_.seen_classes(task))
            modules.append(self.layout_.pack(module, train.r, train.s).unsqueeze(0).to(self.device))
        self.modules_ = tuple(modules)
        self.weight_ = head["head.weight"].unsqueeze(0).to(self.device)
        self.sigma_ = head["head.sigma"].reshape(1).to(self.device)
        state = load_router_statistics(self.run_dir)
        self.statistics_ = None
        if state is not None:
            try:
                self.statistics_ = ClassStatistics(dim).load_state_dict(state)
            except (KeyError, IndexError, ValueError, RuntimeError):
                raise UserError(
                    f"run {self.run_dir}: {ROUTER_FILE} does not hold router statistics; "
                    f"`tosca eval {self.run_dir}` rebuilds it"
                ) from None
        classes = int(self.weight_.shape[1])
        if self.statistics_ is not None and self.statistics_.classes != classes:
            raise UserError(
                f"run {self.run_dir}: {ROUTER_FILE} covers {self.statistics_.classes} classes but the "
                f"classifier of its {tasks} finished tasks has {classes} (the fit stopped before it "
                f"ended); rebuild them with `tosca eval {self.run_dir}`"
            )
        self.tasks_ = tasks
        return self

    def check_router(self, router: str) -> None:
        """Refuse a router this run cannot serve (before any image is embedded)."""
        if router not in ROUTERS:
            raise UserError(f"unknown --router {router!r}: use one of {', '.join(ROUTERS)}")
        if not ROUTERS[router].honest:
            raise UserError(
                f"--router {router} needs the task id or a batch of test images; pick an honest router"
            )
        if ROUTERS[router].needs_statistics and self.statistics_ is None:
            raise UserError(
                f"run {self.run_dir} has no {ROUTER_FILE}: router {router!r} cannot be used; pick entropy"
            )

    @torch.no_grad()
    def module_logits(self, x: torch.Tensor) -> torch.Tensor:
        """Every module's logits over all classes of the last classifier, on frozen features x [n, d]: [M, n, C]."""
        w_unit = normalize_rows(self.weight_[0]).T
        return torch.stack(
            [
                self.sigma_ * module_outputs(self.layout_, m, x, normalize=True)[0] @ w_unit
                for m in self.modules_
            ]
        )

    @torch.no_grad()
    def predict(self, features: np.ndarray | torch.Tensor, router: str) -> Predictions:
        """Route and classify [n, d] frozen features with the named (honest) router."""
        self.check_router(router)
        kind = features.dtype if isinstance(features, torch.Tensor) else np.asarray(features).dtype
        if isinstance(kind, torch.dtype) and (kind.is_complex or kind == torch.bool):
            raise UserError(f"features of dtype {kind} cannot be classified: give real numbers (float32)")
        if isinstance(kind, np.dtype) and kind.kind not in "fiu":
            raise UserError(f"features of dtype {kind} cannot be classified: give real numbers (float32)")
        x = torch.as_tensor(features).to(self.device, torch.float32)
        dim = self.layout_.dim
        if x.ndim != 2 or x.shape[1] != dim:
            raise UserError(
                f"features of shape {list(x.shape)} cannot be classified by run {self.run_dir}: "
                f"it needs [n, {dim}] (the frozen features of its store's backbone)"
            )
        if not bool(torch.isfinite(x).all()):
            raise UserError("features hold NaN or infinite values: they cannot be classified")
        logits = self.module_logits(x)  # [M, n, C]
        entropy, predictions, energy = module_scores(logits)
        classes = np.arange(int(self.weight_.shape[1]))
        view = StageView(
            entropy=entropy.unsqueeze(0),
            energy=energy.unsqueeze(0),
            frozen=None if self.statistics_ is None else self.statistics_.model().to(self.device),
            features=x,
            class_task=torch.from_numpy(self.stream_.task_of(classes)).to(self.device),
            true_task=torch.zeros(
                len(x), dtype=torch.long, device=self.device
            ),  # never read by honest routers
            class_ordered=torch.arange(len(x), device=self.device),
            shuffled=torch.arange(len(x), device=self.device),
        )
        chosen = route(router, view)[0]
        rows = torch.arange(len(x), device=self.device)
        chosen_logits = logits[chosen, rows]  # [n, C]
        probabilities = torch.softmax(chosen_logits, -1)
        predicted = predictions[chosen, rows]
        return Predictions(
            predicted.cpu().numpy(),
            probabilities[rows, predicted].cpu().numpy(),
            chosen.cpu().numpy(),
        )

    def class_names(self, names: list[str]) -> list[str]:
        """Names of the incremental class ids, from the dataset's class names (original label order)."""
        return [names[int(original)] for original in self.stream_.order]


# ------------------------------------------------------------------------------------------ the command


@dataclass
class PredictOutcome:
    """One row per image (image, class, class_id, probability, task, router), and what the listing
    left out."""

    rows: list[dict[str, Any]]
    router: str
    tasks: int
    left_out: Any = field(default=None)


ListImages = Callable[[list[Path]], tuple[list[Path], Any]]  # paths -> (images, what was left out)
Embed = Callable[[FeatureStore, list[Path], torch.device, "int | None"], np.ndarray]


def predict_images(request: PredictRequest, list_images: ListImages, embed: Embed) -> PredictOutcome:
    """Classify new images with a run: its store's backbone (through `embed`), every task module, a
    router (one honest router; the run's best by default)."""
    if request.batch_size is not None and request.batch_size < 1:
        raise UserError(f"--batch-size must be at least 1, got {request.batch_size}")
    config = read_run_config(request.run)
    metrics = read_metrics(request.run)
    if request.router is None:
        chosen = best_honest_router(metrics)
    else:
        names = resolve_routers(request.router)
        if len(names) != 1:
            raise UserError(f"--router takes one router for predict, got {request.router!r}")
        chosen = names[0]
    device = resolve_device(request.device)
    paths, left_out = list_images(list(request.images))
    store = open_run_store(config, request.run)
    predictor = RunPredictor(request.run, store.shape.classes, device).load()
    predictor.check_router(chosen)
    result = predictor.predict(embed(store, paths, device, request.batch_size), chosen)
    names = predictor.class_names(
        list(store.identity["dataset"].get("class_names") or range(store.shape.classes))
    )
    rows = [
        {
            "image": str(path),
            "class": str(names[int(c)]),
            "class_id": int(c),
            "probability": float(p),
            "task": int(t),
            "router": chosen,
        }
        for path, c, p, t in zip(paths, result.classes, result.probabilities, result.tasks, strict=True)
    ]
    return PredictOutcome(rows, chosen, predictor.tasks_, left_out)


def best_honest_router(metrics: dict[str, Any]) -> str:
    """The honest router with the highest A_last in a run's metrics (ties: the registry's order)."""
    candidates = [n for n in ROUTERS if ROUTERS[n].honest and n in metrics["routers"]]
    if not candidates:
        raise UserError("this run's metrics.json has no honest router; re-evaluate it with `tosca eval RUN`")
    return max(candidates, key=lambda n: metrics["routers"][n]["A_last"])
