"""TOSCA and the baselines as scikit-learn estimators: what a lab hands to `clone`, a `Pipeline`
or a `GridSearchCV` on a store's features (or any [n, d] frozen features and their labels).

- `TOSCAClassifier`: any recipe (a preset and fit flags over it), any flow, any honest router.
  `fit(X, y)` runs the whole class-incremental stream (init_cls, increment, order_seed as
  `tosca fit` takes them); `partial_fit(X, y)` learns the next task (classes never seen before;
  nothing of an earlier task's features is kept). It trains through the engine's own
  `GroupTrainer` and the routers' `ClassStatistics`, under the thread plan of `runs.GroupFit`, and
  predicts through `RunPredictor`, so its numbers are `tosca fit`'s on the same features and
  split (tests/tosca_heads/applied/test_estimators.py holds them equal).
- `BaselineClassifier`: a registered baseline (`method`, its own parameters in `params`) learned
  as `run_baseline` learns it, on one CPU thread.
- `validation_split(store)`: the honest protocol's validation rows of a store's train split as a
  `PredefinedSplit` (fold 0), the split `tosca sweep` holds out and ranks on.

Labels may be any sortable values; `predict` returns them (the store's label ids on a store).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.model_selection import PredefinedSplit
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from featcache.store import FeatureStore
from tosca_foundation.arguments import as_path, shown
from tosca_foundation.devices import check_device_name
from tosca_foundation.errors import UserTypeError, UserValueError
from tosca_foundation.names import as_keyword, check_keywords
from tosca_heads.applied.predict import RunPredictor
from tosca_heads.engine import native
from tosca_heads.engine.device import plan_threads, step_mode
from tosca_heads.engine.trainer import GroupTrainer
from tosca_heads.method.baseline_registry import BASELINES, too_few_images
from tosca_heads.method.class_statistics import ClassStatistics
from tosca_heads.method.linalg import single_threaded
from tosca_heads.method.protocol import (
    DEFAULT_ORDER_SEED,
    TaskStream,
    ValidationConfig,
    generic_increment,
    task_split,
)
from tosca_heads.method.recipe import TrainConfig, recipe
from tosca_heads.method.ties import TIED, top_class
from tosca_heads.requests.plan import held_out
from tosca_heads.routers import ROUTERS
from tosca_heads.running.baseline_runs import check_baseline_params

RECIPE_FIELDS = tuple(f.name for f in fields(TrainConfig))  # the recipe's numbers, in its order


_ARG = inspect.Parameter.POSITIONAL_OR_KEYWORD


def _argument(name: str, default: Any, annotation: str) -> inspect.Parameter:
    return inspect.Parameter(name, _ARG, default=default, annotation=annotation)


def _recipe_init(cls: type) -> type:
    """`cls.__init__` with the recipe's fields as parameters (each None: the preset's value) between
    `cls.INIT_HEAD` and `cls.INIT_TAIL`: scikit-learn's `get_params`, `clone` and `set_params` read
    the signature, so a field added to `TrainConfig` is a parameter here without being written twice."""
    recipe_params = [
        _argument(f.name, None, str(f.type) if "None" in str(f.type) else f"{f.type} | None")
        for f in fields(TrainConfig)
    ]
    cls.INIT_PARAMS = (*cls.INIT_HEAD, *recipe_params, *cls.INIT_TAIL)
    return _stored_init(cls)


def _stored_init(cls: type) -> type:
    """`cls.__init__` taking `cls.INIT_PARAMS` and storing each as an attribute of its name, nothing
    else (scikit-learn's contract), with the signature `get_params`, `clone` and `set_params` read."""
    signature = inspect.Signature([inspect.Parameter("self", _ARG), *cls.INIT_PARAMS])

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        check_keywords(type(self), kwargs)  # a misspelt one: its class's name, the closest keyword
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        for name, value in list(bound.arguments.items())[1:]:
            setattr(self, name, value)  # scikit-learn's contract: __init__ stores its arguments, nothing else

    __init__.__signature__ = signature  # type: ignore[attr-defined]
    __init__.__doc__ = f"Store the parameters ({', '.join(list(signature.parameters)[1:])})."
    cls.__init__ = __init__  # type: ignore[misc]
    return cls


class ArrayFeatures:
    """A feature source over one task's arrays, what an estimator trains on: the clean features
    [n, d] and, where given, augmented views [V, n, d], read as a store's are (epoch e trains on
    view e mod V; `CachedFeatures`)."""

    def __init__(self, features: torch.Tensor, views: torch.Tensor | None = None):
        self.features, self.augmented = features, views
        self.views = 0 if views is None else int(views.shape[0])

    def epoch_features(self, rows: np.ndarray, epoch: int) -> torch.Tensor:
        index = torch.from_numpy(np.asarray(rows, dtype=np.int64))
        if self.augmented is None:
            return self.features[index]
        return self.augmented[epoch % self.views][index]

    def clean(self, split: str, rows: np.ndarray) -> torch.Tensor:
        return self.features[torch.from_numpy(np.asarray(rows, dtype=np.int64))]


def validation_split(
    store: FeatureStore | str | Path, val_fraction: float = 0.1, val_seed: int = 0
) -> PredefinedSplit:
    """The store's validation rows (`--val-fraction`, `--val-seed`: the rows a fit or a sweep holds
    out) as fold 0 of a `PredefinedSplit` over its train split; every other row trains.

    >>> split = validation_split(STORE, val_fraction=0.25)  # 6 classes of 16 training images
    >>> split.get_n_splits(), int((split.test_fold == 0).sum())
    (1, 24)
    """
    if not isinstance(store, FeatureStore):
        store = FeatureStore.open(as_path("validation_split", "store", store))
    validation = ValidationConfig(val_fraction, val_seed)
    validation.validate(as_keyword)
    held = held_out(store, validation)  # the carve of a fit's plan
    if len(held) == 0:
        raise UserValueError(f"val_fraction must be above 0 for a validation split, got {val_fraction!r}")
    fold = np.full(len(store.labels("train")), -1, dtype=np.int64)
    fold[held] = 0
    return PredefinedSplit(fold)


class _Incremental(ClassifierMixin, BaseEstimator):
    """What both estimators share: labels to incremental class ids and back, the task split of
    `fit`, the next task of `partial_fit`."""

    init_cls: int | None
    increment: int | None
    order_seed: int

    def fit(self, X: Any, y: Any) -> _Incremental:
        """Learn the whole stream: the classes of y in the seeded order (`order_seed`), split into
        a first task of `init_cls` classes and tasks of `increment` (the default split where not
        given: at most 10 equal tasks), learned task by task."""
        X, y = validate_data(self, X, y, dtype=np.float32)
        check_classification_targets(y)
        for name in [a for a in vars(self) if a.endswith("_") and not a.startswith("_")]:
            delattr(self, name)  # a refit starts again
        self.n_features_in_ = X.shape[1]
        classes = np.unique(y)
        stream = self._split(len(classes))
        self.labels_in_order_ = classes[stream.order]  # incremental class id -> label
        incremental = stream.remap(np.searchsorted(classes, y))
        self.stream_ = TaskStream(np.arange(len(classes)), stream.init_cls, stream.increment)
        self.classes_ = classes
        self._start()
        for task in range(stream.num_tasks):
            rows = stream.rows_of_task(incremental, task)
            self._learn(task, X[rows], incremental[rows])
        return self

    def _split(self, num_classes: int) -> TaskStream:
        """The task split of `fit`: `init_cls` and `increment` where given, else `tosca fit`'s
        default for a dataset without a paper split (at most 10 equal tasks of 2 or more classes),
        and where none fits (2 or 3 classes, a prime number of them), one task of every class."""
        init_cls, increment = self.init_cls, self.increment
        if (init_cls, increment) == (None, None) and generic_increment(num_classes) is None:
            init_cls = increment = num_classes
        return task_split("", num_classes, init_cls, increment, self.order_seed)[1]

    def partial_fit(self, X: Any, y: Any, classes: Any = None) -> _Incremental:
        """Learn the next task: X and y hold its rows, of classes never seen before (in sorted
        order they follow the classes seen so far). The first call fixes the first task's size,
        the second every later task's (the stream's B-n Inc-k shape). `classes` (scikit-learn's
        argument for every class up front) is not used: a continual stream does not know them."""
        return self._next_task(X, y, equal_tasks=True)

    def learn_task(self, X: Any, y: Any, views: np.ndarray | None = None) -> _Incremental:
        """`partial_fit` where tasks may differ in size: the next task's rows, of classes never seen
        before, however many (a scenario whose tasks do, such as a blurry stream read as TOSCA's
        tasks; the stream is then `TaskStream.uneven`). `views` [V, n, d]: the rows' augmented
        views, trained on as `tosca fit` trains on a store's (TOSCA; a baseline reads X only)."""
        return self._next_task(X, y, equal_tasks=False, views=views)

    def _next_task(self, X: Any, y: Any, equal_tasks: bool, views: np.ndarray | None = None) -> _Incremental:
        first = not hasattr(self, "stream_")
        X, y = validate_data(self, X, y, dtype=np.float32, reset=first)
        check_classification_targets(y)
        new = np.unique(y)
        seen = np.zeros(0, dtype=new.dtype) if first else self.labels_in_order_
        if np.isin(new, seen).any():
            raise ValueError(
                f"partial_fit takes a new task's classes; {new[np.isin(new, seen)][:5].tolist()} were seen "
                "before (class-incremental: refit with `fit` for the whole stream)"
            )
        task = 0 if first else len(self.trainer_tasks())
        if first:
            self.stream_ = TaskStream(np.arange(len(new)), len(new), len(new))
            self._start()
        elif not equal_tasks:
            sizes = (*(self.stream_.sizes or self._even_sizes()), len(new))
            self.stream_ = TaskStream.uneven(np.arange(len(seen) + len(new)), sizes)
        elif self.stream_.sizes:
            raise ValueError("tasks of uneven size were learnt with learn_task: go on with learn_task")
        else:
            increment = len(new) if task == 1 else self.stream_.increment
            if len(new) != increment:
                raise ValueError(
                    f"task {task} has {len(new)} classes; every task after the first has {increment} "
                    "(the stream's increment, fixed by the second task)"
                )
            total = len(seen) + len(new)
            self.stream_ = TaskStream(np.arange(total), self.stream_.init_cls, increment)
        order = np.concatenate([seen, new])
        self.labels_in_order_ = order
        self.classes_ = np.sort(order)
        position = {label: i for i, label in enumerate(order.tolist())}
        incremental = np.array([position[label] for label in y.tolist()], dtype=np.int64)
        self._learn(task, X, incremental, views)
        return self

    def _even_sizes(self) -> tuple[int, ...]:
        """Each task's class count so far, of a stream whose tasks are B-n Inc-k."""
        stream = self.stream_
        return tuple(len(stream.task_classes(t)) for t in range(stream.num_tasks))

    def _labels(self, incremental: np.ndarray) -> np.ndarray:
        """The caller's labels of incremental ids; a tied answer (`method.ties`) stays `TIED` where
        the labels are integers (never a class, so scored wrong), else None (an object array)."""
        ids = np.asarray(incremental, dtype=np.int64)
        tied = ids == TIED
        labels = self.labels_in_order_[np.where(tied, 0, ids)]
        if not tied.any():
            return labels
        if labels.dtype.kind in "iu":
            return np.where(tied, TIED, labels.astype(np.int64))
        answered = labels.astype(object)
        answered[tied] = None
        return answered

    def _checked(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "stream_")
        return validate_data(self, X, dtype=np.float32, reset=False)

    def _start(self) -> None:  # pragma: no cover - each estimator defines it
        raise NotImplementedError

    def _learn(  # pragma: no cover
        self, task: int, X: np.ndarray, incremental: np.ndarray, views: np.ndarray | None = None
    ) -> None:
        raise NotImplementedError

    def trainer_tasks(self) -> list[Any]:  # pragma: no cover
        raise NotImplementedError


LATER_MODULES = ("train", "first")  # each task after the first: its own module trained, or the first's


@_recipe_init
class TOSCAClassifier(_Incremental):
    """TOSCA on frozen features: one LuCA module per task, the cosine classifier, a router.

    Parameters: `preset` (paper, ...), every field of the recipe over it (`TrainConfig`'s: r, s, l1,
    lr, ...; None: the preset's value; `_recipe_init` derives them), `router`
    (an honest one: lda, ncm, entropy, energy, fusion, ...), the split (`init_cls`, `increment`,
    `order_seed`), `later_modules` (each task after the first: "train", its own module, the
    paper's; "first", the first task's module reused frozen, its classes' rows the prototypes of
    that module's output: the few-shot literature's freeze-after-base) and `device`. Fitted: `classes_`, `labels_in_order_` (label of each incremental
    class), `stream_`, `trainer_` (the engine's trainer: modules, classifier), `statistics_` (the
    frozen-feature routers' class statistics), `n_features_in_`.
    """

    INIT_HEAD = (
        _argument("preset", "paper", "str"),
        _argument("router", "lda", "str"),
        _argument("init_cls", None, "int | None"),
        _argument("increment", None, "int | None"),
        _argument("order_seed", DEFAULT_ORDER_SEED, "int"),
    )
    INIT_TAIL = (_argument("later_modules", "train", "str"), _argument("device", "cpu", "str"))

    def recipe(self) -> TrainConfig:
        """The recipe these parameters ask for (checked): the preset with the given flags over it."""
        return recipe(self.preset, {name: getattr(self, name) for name in RECIPE_FIELDS}, as_keyword)

    def _start(self) -> None:
        honest = [n for n in ROUTERS if ROUTERS[n].honest]
        if ROUTERS.pick(self.router, "router") not in honest:
            raise UserValueError(
                f"router must be an honest router ({', '.join(honest)}), got {self.router!r}"
            )
        if self.later_modules not in LATER_MODULES:
            raise UserValueError(
                f"later_modules must be one of {', '.join(LATER_MODULES)}, got {shown(self.later_modules)}"
            )
        check_device_name(self.device, "device")
        device = torch.device(self.device)
        self.threads_ = plan_threads(device, False, compiled=native.use_native(device))
        dim = self.n_features_in_
        self.trainer_ = GroupTrainer([self.recipe().resolved(dim)], dim, device, self.threads_.step_threads)
        self.statistics_ = ClassStatistics(dim)

    def trainer_tasks(self) -> list[Any]:
        return self.trainer_.modules_

    def _learn(
        self, task: int, X: np.ndarray, incremental: np.ndarray, views: np.ndarray | None = None
    ) -> None:
        """One task as `GroupFit.train_task` and its snapshot do it: the module and classifier (on
        the views where given), then the routers' statistics from the task's clean features."""
        device = torch.device(self.device)
        features = torch.from_numpy(np.ascontiguousarray(X))
        augmented = None if views is None else torch.from_numpy(np.asarray(views, dtype=np.float32))
        source = ArrayFeatures(features.to(device), None if augmented is None else augmented.to(device))
        with step_mode(device, self.threads_.matmul_threads):
            if task and self.later_modules == "first":
                self.trainer_.reuse_task(task, self.stream_, incremental, source, module_of=0)
            else:
                self.trainer_.partial_fit(task, self.stream_, incremental, source)
        self.statistics_.partial_fit(features, incremental, self.stream_.task_classes(task))

    def predictor(self) -> RunPredictor:
        """The fitted estimator as a run's predictor (what `predict`, `tosca predict` compute with)."""
        check_is_fitted(self, "trainer_")
        trainer = self.trainer_
        names = [str(label) for label in self.labels_in_order_]
        predictor = RunPredictor(_NO_RUN, len(names), self.device, names)
        predictor.layout_ = trainer.layout
        predictor.stream_ = self.stream_
        predictor.modules_ = tuple(trainer.modules_)
        predictor.weight_, predictor.sigma_ = trainer.weight_, trainer.sigma_
        predictor.statistics_ = self.statistics_
        predictor.tasks_ = len(trainer.modules_)
        return predictor

    def routed(self, X: np.ndarray, predictor: RunPredictor | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Each row's module and incremental class (`TIED` on a tie): the router's pick; with
        `later_modules="first"` every module is the first's, so the first answers (no router has
        a choice to make, and a tie among identical modules is no tie of the answer)."""
        predictor = predictor or self.predictor()
        if self.later_modules == "first":
            with single_threaded(torch.device(self.device)):
                logits = predictor.module_logits(X)[0].cpu().numpy()  # [n, classes]
            return np.zeros(len(X), dtype=np.int64), top_class(logits)
        predicted = predictor.predict(X, self.router)
        return np.asarray(predicted.tasks), np.asarray(predicted.incremental_classes)

    def predict(self, X: Any) -> np.ndarray:
        """Each row's label: the module the router picks, that module's argmax over every class seen."""
        X = self._checked(X)
        return self._labels(self.routed(X)[1])

    def predict_proba(self, X: Any) -> np.ndarray:
        """Each row's softmax over every class seen under the module the router picks; columns in
        `classes_` order (the argmax is `predict`'s class)."""
        X = self._checked(X)
        predictor = self.predictor()
        chosen = torch.from_numpy(self.routed(X, predictor)[0])
        with single_threaded(torch.device(self.device)):
            logits = predictor.module_logits(X).cpu()  # [M, n, C]
        picked = logits[chosen, torch.arange(len(X))]
        proba = torch.softmax(picked.double(), dim=-1).numpy()
        return proba[:, np.argsort(self.labels_in_order_, kind="stable")]


@_stored_init
class BaselineClassifier(_Incremental):
    """A registered baseline (`method`: simplecil, ranpac, joint_probe or one of your own) with its
    own parameters (`params`, e.g. {"projection_dim": 2000} for RanPAC). Fitted: `classes_`,
    `labels_in_order_`, `stream_`, `estimator_` (the baseline itself), `n_features_in_`.
    `partial_fit` exists for the continual ones only (a joint probe sees every task at once)."""

    INIT_PARAMS = (
        _argument("method", "simplecil", "str"),
        _argument("params", None, "dict[str, Any] | None"),
        _argument("init_cls", None, "int | None"),
        _argument("increment", None, "int | None"),
        _argument("order_seed", DEFAULT_ORDER_SEED, "int"),
        _argument("device", "cpu", "str"),
    )

    def _start(self) -> None:
        BASELINES.pick(self.method, "method")  # an unknown one: one line, with the closest name
        if self.params is not None and not isinstance(self.params, Mapping):
            raise UserTypeError(
                f"params must be a dict of the baseline's parameters or None, got {shown(self.params)}"
            )
        takes = inspect.signature(BASELINES[self.method]).parameters.values()
        if not any(p.kind is p.VAR_KEYWORD for p in takes):  # else its class takes any keyword
            check_keywords(BASELINES[self.method], self.params or {})
        method = self.method  # a refusal names the class's own keyword, as `params` holds it
        check_baseline_params(
            method,
            dict(self.params or {}),
            self.n_features_in_,
            spell=lambda key: f"params key {key.removeprefix(method + '_')}",
        )
        check_device_name(self.device, "device")
        self.estimator_ = BASELINES[self.method](device=self.device, **(self.params or {}))
        self.tasks_: list[int] = []
        self.seen_x_: list[np.ndarray] = []  # a joint (non-incremental) baseline's rows only

    def trainer_tasks(self) -> list[Any]:
        return self.tasks_

    def _incremental(self) -> bool:
        return bool(getattr(BASELINES.get(self.method), "incremental", True))

    def _learn(
        self, task: int, X: np.ndarray, incremental: np.ndarray, views: np.ndarray | None = None
    ) -> None:
        """One task as `run_baseline` learns it: partial_fit on its rows, or (a joint baseline)
        fit on every row seen so far (views are TOSCA's: a baseline reads the clean features).
        A class-incremental task gives all of a class's rows, so a class with fewer than the
        baseline needs is refused here (FeCAM holds a class met once for a later call's second
        image, which this stream never brings: it would be learned and never answered)."""
        ids, counts = np.unique(incremental, return_counts=True)
        line = too_few_images(
            self.method, ids, counts, f"task {task}", lambda i: shown(self.labels_in_order_[i].item())
        )
        if line:
            raise UserValueError(line)
        with single_threaded(torch.device(self.device)):
            if self._incremental():
                self.estimator_.partial_fit(X, incremental)
            else:
                self.seen_x_.append((X, incremental))
                xs, ys = zip(*self.seen_x_, strict=True)
                self.estimator_.fit(np.concatenate(xs), np.concatenate(ys))
        self.tasks_.append(task)

    def fit(self, X: Any, y: Any) -> BaselineClassifier:
        super().fit(X, y)
        if not self._incremental():
            self.seen_x_ = []  # the stream is over: nothing of it is kept
        return self

    @available_if(lambda self: bool(getattr(BASELINES.get(self.method), "incremental", True)))
    def partial_fit(self, X: Any, y: Any, classes: Any = None) -> BaselineClassifier:
        return super().partial_fit(X, y, classes)

    def predict(self, X: Any) -> np.ndarray:
        X = self._checked(X)
        with single_threaded(torch.device(self.device)):
            return self._labels(self.estimator_.predict(X))

    @available_if(lambda self: callable(getattr(BASELINES.get(self.method), "predict_proba", None)))
    def predict_proba(self, X: Any) -> np.ndarray:
        X = self._checked(X)
        with single_threaded(torch.device(self.device)):
            proba = np.asarray(self.estimator_.predict_proba(X))
        return proba[:, np.argsort(self.labels_in_order_, kind="stable")]


_NO_RUN = "(a fitted TOSCAClassifier)"  # the predictor's name in its messages: no run folder
