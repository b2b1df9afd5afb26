"""A trained run applied to new features: every task module, a router, the chosen module's class.

A run folder holds each task's module, the classifier after the last task and the frozen-feature
routers' statistics; nothing else is needed to route and classify a feature vector
(`RunPredictor`). `predict_images(PredictRequest, ...)` is `tosca predict`: the images are listed
and embedded by the store's own backbone through functions the caller hands in (stage 1's
`featcache.embed`: stage 2 never imports the backbone side), then routed and classified here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from featcache.store import FeatureStore
from tosca_foundation.devices import resolve_device
from tosca_foundation.errors import UserError, UserTypeError, UserValueError
from tosca_heads.engine.evaluate import ModuleScorer, Snapshot
from tosca_heads.engine.layout import ParamLayout
from tosca_heads.method.class_statistics import ClassStatistics
from tosca_heads.method.features import CachedFeatures
from tosca_heads.method.linalg import single_threaded
from tosca_heads.method.metrics import RANKED
from tosca_heads.method.protocol import TaskStream
from tosca_heads.method.ties import TIED
from tosca_heads.records.run_cell import read_run
from tosca_heads.records.run_folder import (
    ROUTER_FILE,
    check_task_count,
    check_whole_if_finished,
    config_digest,
    feature_dim_of,
    finished_tasks,
    load_router_statistics,
    load_task,
    open_run_store,
    read_run_config,
    stream_config_of,
    train_config_of,
    validation_of,
)
from tosca_heads.requests.command_requests import PredictRequest
from tosca_heads.requests.plan import FitPlan
from tosca_heads.routers import ROUTERS, StageView, resolve_routers, route
from tosca_heads.routers.learned import RouterLearners
from tosca_heads.routers.scores import predict as predict_classes

TIED_NAME = "(tied)"  # a tied answer's name: two classes or more shared the top score (`method.ties`)


@dataclass
class Predictions:
    """Per sample, in the dataset's terms: `classes`, the store's label ids (what
    `store.labels(split)` holds, so `(found.classes == store.labels("test")).mean()` is an
    accuracy), `class_names` their names, `probabilities` the predicted class's softmax
    probability under the chosen module, `tasks` the chosen task module; `incremental_classes`
    are the same classes as positions in the run's class order (what the run's classifier rows
    are indexed by). A tied answer (`method.ties`: two classes or more share the top score, or the
    router's modules tied) is `TIED` in `classes` and `incremental_classes`, named `TIED_NAME`,
    with a NaN probability; a tied route is `TIED` in `tasks`. `router` is the router that chose, `chosen_on` how it was picked ("default": a
    told-task scenario run's lda, it kept no router's figures): "given",
    "validation" (the run's best honest router on its validation split) or "test" (the best
    on the test split: a choice tuned on test, said so)."""

    classes: np.ndarray
    class_names: list[str]
    probabilities: np.ndarray
    tasks: np.ndarray
    incremental_classes: np.ndarray
    router: str = ""
    chosen_on: str = "given"


class RunPredictor:
    """A finished run, ready to classify features: `load` reads it, `predict` routes and classifies."""

    def __init__(
        self,
        run_dir: Path,
        num_classes: int,
        device: torch.device | str = "cpu",
        class_names: list[str] | None = None,
    ):
        self.run_dir = Path(run_dir)
        self.num_classes = num_classes  # the dataset's: the class order permutes all of them
        self.device = torch.device(device)
        self.class_names = class_names  # the store's, by label id (None: the ids as names)

    def load(self) -> RunPredictor:
        """Read the modules, the last classifier and the router statistics (nothing is trained)."""
        self.config_ = read_run_config(self.run_dir)
        check_whole_if_finished(self.run_dir)
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
            seen = self.stream_.seen_classes(task)
            module, head, _ = load_task(self.run_dir, task, self.layout_, seen, config_digest(self.config_))
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
        self.learned_: dict[str, Any] = {}  # on-request routers' baselines, refitted where asked
        return self

    def check_router(self, router: str, flag: str = "--router") -> None:
        """Refuse a router this run cannot serve (before any image is embedded), naming it `flag`
        (the command line's; Python's `router` where `predict` is called from Python)."""
        ROUTERS.pick(router, flag)
        if ROUTERS[router].reference:
            raise UserValueError(
                f"{flag} {router} is a reference (it needs the task id or a batch of test images); "
                "pick an honest router"
            )
        if ROUTERS[router].needs_statistics and self.statistics_ is None:
            raise UserValueError(
                f"run {self.run_dir} has no {ROUTER_FILE}: router {router!r} cannot be used; pick entropy"
            )
        if ROUTERS[router].on_request and router not in getattr(self, "learned_", {}):
            raise UserValueError(
                f"router {router!r} learns from the run's store, which this prediction was not given "
                "(`tosca predict` refits it there): pick another router"
            )

    def learn_router(self, router: str, store: FeatureStore) -> RunPredictor:
        """An on-request router's baseline (`routers.learned`), refitted from the run's store as the
        fit learned it: task by task on the clean training rows of its split, its validation rows
        left out (a run's router file keeps the statistics, not a baseline's matrices)."""
        if not ROUTERS[router].on_request or router in getattr(self, "learned_", {}):
            return self
        plan = FitPlan.build(
            store, stream_config_of(self.config_, self.run_dir), validation_of(self.config_, self.run_dir)
        )
        source = CachedFeatures(store)
        learners = RouterLearners((router,))
        with single_threaded():
            for task in range(self.tasks_):
                rows = plan.stream.rows_of_task(plan.train_labels, task)
                learners.partial_fit(
                    source.clean("train", rows).to("cpu", torch.float32), plan.train_labels[rows]
                )
        self.learned_ = {**getattr(self, "learned_", {}), **learners.snapshot()}
        return self

    @torch.no_grad()
    def module_logits(self, features: np.ndarray | torch.Tensor) -> torch.Tensor:
        """Every module's logits over all classes of the last classifier on frozen features [n, d]:
        [M, n, C] (the arithmetic of evaluation and `predict`)."""
        x = _checked_features(features, self.layout_.dim, self.run_dir).to(self.device)
        scorer = ModuleScorer(x, self.device, cache_bytes=0)
        return torch.stack([scorer.logits(self.snapshot(), m, 0, len(x))[0] for m in range(self.tasks_)])

    def snapshot(self) -> Snapshot:
        """The run after its last finished task, as evaluation scores it."""
        return Snapshot(self.layout_, self.modules_, self.weight_, self.sigma_)

    @torch.no_grad()
    def predict(
        self, features: np.ndarray | torch.Tensor, router: str, chosen_on: str = "given"
    ) -> Predictions:
        """Route and classify [n, d] frozen features with the named (honest) router: the same
        computation as the run's evaluation after its last task. (A method called from Python: the
        command checked its --router before any image was embedded.)"""
        return self.predict_each(features, (router,), chosen_on)[router]

    @torch.no_grad()
    def predict_each(
        self, features: np.ndarray | torch.Tensor, routers: Sequence[str], chosen_on: str = "given"
    ) -> dict[str, Predictions]:
        """`predict` with each of several routers, the modules scoring the features once (what a
        scenario's TOSCA row per router costs: one scoring, not one per router); each router's
        answers are its `predict`'s, bit for bit."""
        for router in routers:
            self.check_router(router, "router")
        x = _checked_features(features, self.layout_.dim, self.run_dir).to(self.device)
        scorer = ModuleScorer(x, self.device, cache_bytes=0)
        with single_threaded(self.device):  # as evaluation computes: one thread, the same numbers
            scores = scorer.scores(self.snapshot(), self.tasks_, len(x), True)
            view = self._view(x, scores)
            return {router: self._routed(scores, view, router, chosen_on) for router in routers}

    def _view(self, x: torch.Tensor, scores: tuple[torch.Tensor, ...]) -> StageView:
        """What an honest router is handed: the modules' entropy and energy, the frozen features'
        class statistics (and on-request learners), the features and each class's task."""
        entropy, _, energy, _ = scores
        classes = np.arange(int(self.weight_.shape[1]))
        frozen = None if self.statistics_ is None else self.statistics_.model().to(self.device)
        return StageView(
            entropy=entropy,
            energy=energy,
            frozen=None if frozen is None else replace(frozen, learned=getattr(self, "learned_", {})),
            features=x,
            class_task=torch.from_numpy(self.stream_.task_of(classes)).to(self.device),
        )

    def _routed(
        self, scores: tuple[torch.Tensor, ...], view: StageView, router: str, chosen_on: str
    ) -> Predictions:
        """One router's choice of module for each row, and that module's answer."""
        _, predictions, _, top = scores
        chosen = route(router, view)  # [1, n]; TIED where the router's top was tied
        incremental = predict_classes(predictions, chosen)[0].cpu().numpy()  # TIED: a tied answer
        probability = top.gather(1, chosen.clamp(min=0).unsqueeze(1)).squeeze(1)[0].cpu().numpy()
        tied = incremental == TIED
        probability = np.where(tied, np.nan, probability)  # no class answered: no probability of it
        labels = np.where(tied, TIED, self.stream_.order[np.where(tied, 0, incremental)]).astype(np.int64)
        names = [TIED_NAME if t else self._name(int(label)) for label, t in zip(labels, tied, strict=True)]
        return Predictions(
            labels, names, probability, chosen[0].cpu().numpy(), incremental, router, chosen_on
        )

    def _name(self, label: int) -> str:
        return str(self.class_names[label]) if self.class_names else str(label)

    def class_names_in_order(self) -> list[str]:
        """The class names by incremental id (the run's class order)."""
        return [self._name(int(original)) for original in self.stream_.order]


def _checked_features(features: Any, dim: int, run_dir: Path) -> torch.Tensor:
    """[n, dim] finite real features as float32, or one line saying what is wrong (complex, text or
    boolean values, another width, NaN or inf)."""
    kind = features.dtype if isinstance(features, torch.Tensor) else np.asarray(features).dtype
    real = (
        not (kind.is_complex or kind == torch.bool) if isinstance(kind, torch.dtype) else kind.kind in "fiu"
    )
    if not real:
        raise UserTypeError(f"features of dtype {kind} cannot be classified: give real numbers (float32)")
    x = torch.as_tensor(features).to(torch.float32)
    if x.ndim != 2 or x.shape[1] != dim:
        raise UserValueError(
            f"features of shape {list(x.shape)} cannot be classified by run {run_dir}: "
            f"it needs [n, {dim}] (the frozen features of its store's backbone)"
        )
    if not bool(torch.isfinite(x).all()):
        raise UserValueError("features hold NaN or infinite values: they cannot be classified")
    return x


# ------------------------------------------------------------------------------------------ the command


@dataclass
class PredictOutcome:
    """One row per image (image, class, class_id: the store's label id, incremental_class,
    probability, task, router), the router and on which split it was chosen, and what the listing
    left out."""

    rows: list[dict[str, Any]]
    router: str
    tasks: int
    left_out: Any = field(default=None)
    chosen_on: str = "given"


ListImages = Callable[[list[Path]], tuple[list[Path], Any]]  # paths -> (images, what was left out)
Embed = Callable[[FeatureStore, list[Path], torch.device, "int | None"], np.ndarray]


def predict_images(request: PredictRequest, list_images: ListImages, embed: Embed) -> PredictOutcome:
    """Classify new images with a run: its store's backbone (through `embed`), every task module, a
    router (one honest router; by default the run's best on validation, else on test, said so)."""
    if request.batch_size is not None and request.batch_size < 1:
        raise UserError(f"--batch-size must be at least 1, got {request.batch_size}")
    config = read_run_config(request.run)
    run = read_run(request.run)  # finished, every file whole; its figures computed if asked
    if request.router is None:
        chosen, chosen_on = default_router(run.metrics)
    else:
        names = resolve_routers(request.router)
        if len(names) != 1:
            raise UserError(f"--router takes one router for predict, got {request.router!r}")
        chosen, chosen_on = names[0], "given"
    device = resolve_device(request.device)
    paths, left_out = list_images(list(request.images))
    store = open_run_store(config, request.run)
    names = list(store.identity["dataset"].get("class_names") or range(store.shape.classes))
    predictor = RunPredictor(request.run, store.shape.classes, device, [str(n) for n in names]).load()
    predictor.learn_router(chosen, store).check_router(chosen)
    result = predictor.predict(embed(store, paths, device, request.batch_size), chosen, chosen_on)
    rows = image_rows(paths, result)
    return PredictOutcome(rows, chosen, predictor.tasks_, left_out, chosen_on)


def image_rows(paths: Sequence[Path], result: Predictions) -> list[dict[str, Any]]:
    """`tosca predict`'s answer, one row per image: its class (name and the store's label id), its
    position in the run's class order, the probability, the task module and the router."""
    return [
        {
            "image": str(path),
            "class": name,
            "class_id": int(label),
            "incremental_class": int(incremental),
            "probability": float(p),
            "task": int(t),
            "router": result.router,
        }
        for path, name, label, incremental, p, t in zip(
            paths,
            result.class_names,
            result.classes,
            result.incremental_classes,
            result.probabilities,
            result.tasks,
            strict=True,
        )
    ]


def best_honest_router(metrics: dict[str, Any], split: str = "test") -> str:
    """The honest router with the highest A_last on `split` ("test", or "validation" where the
    run has one) in a run's metrics (ties: the registry's order)."""
    blocks = metrics["routers"] if split == "test" else metrics.get("validation") or {}
    candidates = [n for n in ROUTERS if ROUTERS[n].honest and n in blocks]
    if not candidates:
        raise UserError("this run has no honest router's answers; re-evaluate it with `tosca eval RUN`")
    return max(candidates, key=lambda n: blocks[n][RANKED])


def default_router(metrics: dict[str, Any]) -> tuple[str, str]:
    """The router `predict` uses when none is given, and the split it was chosen on: the best
    honest router on the run's validation split where it has one, else on test (a choice tuned on
    the test set, which the caller says)."""
    split = "validation" if metrics.get("validation") else "test"
    return best_honest_router(metrics, split), split
