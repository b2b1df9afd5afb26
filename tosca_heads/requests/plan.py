"""A fit's plan: every fact a fit needs, worked out once at the edge and handed down whole.

`FitPlan` holds the store (opened, fingerprinted, checked readable by whoever opened it), the task
split (its config, the stream it makes, the labels in its class order), the validation split and
the training rows it holds out (carved once: `held_out`, the house's one carve), the protocol in
words, the recipes (checked and resolved), each run's config.json, its digest and folder, and the
device. `group.fit_group` takes one plan and trains its recipes; nothing below it builds the
stream, carves the split, resolves the device or writes a config again. A sweep's group, a suite's
cell or a comparison's run shares its command's plan but for its own recipes (`with_trains`).

Import-light: numpy and the store only (no torch, no engine, no routers), so a command says its
plan before the heavy libraries load. The device (`PlannedDevice`) is held as asked ("auto", "cpu",
"cuda:N") and resolved once, where the engine first needs it (torch is imported then), or is
handed in resolved by a caller that had torch loaded anyway.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from featcache.store import FeatureStore
from tosca_foundation.devices import resolve_device
from tosca_foundation.errors import UserValueError
from tosca_foundation.names import Spell, as_flag
from tosca_heads.method.protocol import (
    HELD_OUT,
    NO_VALIDATION,
    ProtocolReport,
    StreamConfig,
    TaskStream,
    ValidationConfig,
    describe_protocol,
    split_origin,
    task_split,
)
from tosca_heads.method.recipe import TrainConfig
from tosca_heads.records import config_digest, default_run_dir
from tosca_heads.records.run_config import make_run_config

if TYPE_CHECKING:
    import torch


class PlannedDevice:
    """A plan's device: the name as asked (checked where it came in, without torch) and what it
    resolves to here (`resolve_device`, which imports torch), worked out once, when the engine first
    asks, and shared by every plan made from this one (`FitPlan.with_trains`). A caller that had
    torch loaded anyway hands the device in resolved."""

    def __init__(self, device: str | torch.device):
        self.asked = str(device)
        self._resolved = None if isinstance(device, str) else device

    @property
    def resolved(self) -> torch.device:
        if self._resolved is None:
            self._resolved = resolve_device(self.asked)
        return self._resolved

    def __str__(self) -> str:
        return self.asked

    def __repr__(self) -> str:
        return f"PlannedDevice({self.asked!r})"


def planned_device(device: str | torch.device | PlannedDevice) -> PlannedDevice:
    """A device as a plan holds it (a `PlannedDevice` stays the one it is: resolved once)."""
    return device if isinstance(device, PlannedDevice) else PlannedDevice(device)


def held_out(
    store: FeatureStore, validation: ValidationConfig, labels: np.ndarray | None = None
) -> np.ndarray:
    """The training rows `validation` holds out of a store (sorted store rows): the house's one carve
    (`ValidationConfig.carve`, per class by store label, so it does not depend on the class order),
    for a fit's plan, a baseline's (its plan's) and an estimator's validation fold alike. `labels`:
    the store's training labels where the caller read them already."""
    labels = store.labels("train") if labels is None else labels
    return validation.carve(labels, store.identity["dataset"].get("class_names"))


@dataclass(frozen=True)
class FitPlan:
    """What a fit (or a sweep's group, a suite's cell, a comparison's run) works on, each fact once."""

    store: FeatureStore
    stream_config: StreamConfig
    stream: TaskStream
    validation: ValidationConfig
    held: np.ndarray  # the training rows held out for validation (store rows, sorted)
    train_labels: np.ndarray  # each training row's class in the stream's order; HELD_OUT: in no task
    held_labels: np.ndarray  # the held-out rows' classes in the stream's order
    held_ids: tuple[str, ...]  # the held-out rows' store ids (validation.json lists them)
    test_labels: np.ndarray  # each test row's class in the stream's order
    protocol: ProtocolReport
    device: PlannedDevice  # as asked, resolved once (`PlannedDevice.resolved`)
    runs_root: Path = Path("runs")  # where a run without a folder of its own goes
    trains: tuple[TrainConfig, ...] = ()  # resolved at the store's dimension (`with_trains`)
    configs: tuple[dict[str, Any], ...] = ()  # each recipe's config.json
    digests: tuple[str, ...] = ()  # each config's digest, recorded in its task files
    dirs: tuple[Path, ...] = ()  # each recipe's run folder (written there only where asked)
    upto: int | None = None  # the last task to train (checked where it came in); None: every task
    routers: tuple[str, ...] = ()  # on-request routers (`routers.learned`) computed besides the others
    evaluates_only: bool = False  # a run's trained tasks evaluated again (`tosca eval`): its recipe is fixed
    spell: Spell = as_flag  # how the caller names a value (flags, or the Python API's keywords)

    def __post_init__(self) -> None:
        tasks = self.stream.num_tasks
        if self.upto is not None and not 0 <= self.upto < tasks:  # an edge lets no such task through
            raise ValueError(f"a plan's last task {self.upto} is not one of its tasks 0..{tasks - 1}")

    @property
    def last_task(self) -> int:
        """The last task this plan trains (every task's where no `upto` was asked)."""
        return self.stream.num_tasks - 1 if self.upto is None else self.upto

    def check_learners(self, methods: Sequence[str], what: str) -> None:
        """Before any work: each baseline of `methods` (run as a baseline, or learned as a router)
        that needs more training images of a class than this plan trains on (FeCAM: two; the
        held-out rows do not train) is one line naming the class by the store's label and name and
        `what` to do instead. Refused inside a worker, it was a traceback per worker after the work
        began (issue 57, point 10)."""
        from tosca_heads.method.baseline_registry import too_few_images

        trained = self.train_labels[self.train_labels != HELD_OUT]
        counts = np.bincount(trained, minlength=self.stream.num_classes)
        names = self.store.identity["dataset"].get("class_names") or []

        def named(position: int) -> str:
            store_label = int(self.stream.order[position])
            return f"{store_label} ({names[store_label]})" if store_label < len(names) else str(store_label)

        for method in dict.fromkeys(methods):
            line = too_few_images(method, range(len(counts)), counts, "this split's training rows", named)
            if line:
                raise UserValueError(f"{line}; {what}")

    @classmethod
    def build(
        cls,
        store: FeatureStore,
        stream_config: StreamConfig,
        validation: ValidationConfig = NO_VALIDATION,
        origin: str = "as given",
        **rest: Any,
    ) -> FitPlan:
        """The plan of a split given whole (a sweep's point, a run's files, a test's), its values
        checked where they came in: `planned` with the stream it makes of the store's classes."""
        stream = stream_config.task_stream(store.shape.classes)
        return cls.planned(store, stream_config, stream, validation, origin, **rest)

    @classmethod
    def asked(
        cls,
        store: FeatureStore,
        init_cls: int | None,
        increment: int | None,
        order_seed: int,
        validation: ValidationConfig = NO_VALIDATION,
        spell: Spell = as_flag,
        **rest: Any,
    ) -> FitPlan:
        """The plan of the split a command's flags ask for on this store (the dataset's default where
        not given, refused in one line where none fits, naming the values as `spell` does; its
        stream built once, here). The caller checked the store (complete, attrs and labels that fit
        its arrays: `check_readable`): the plan reads its labels."""
        name = store.identity["dataset"]["name"]
        config, stream = task_split(name, store.shape.classes, init_cls, increment, order_seed, spell)
        origin = split_origin(name, init_cls, increment)
        return replace(cls.planned(store, config, stream, validation, origin, **rest), spell=spell)

    @classmethod
    def planned(
        cls,
        store: FeatureStore,
        stream_config: StreamConfig,
        stream: TaskStream,
        validation: ValidationConfig,
        origin: str,
        trains: Sequence[TrainConfig] = (),
        dirs: Sequence[Path | None] = (),
        device: str | torch.device | PlannedDevice = "cpu",
        runs_root: Path = Path("runs"),
        upto: int | None = None,
    ) -> FitPlan:
        """The plan of a stream on a store, in one pass: the validation rows carved, the protocol
        said, the labels put in the stream's order, then the recipes resolved with their configs,
        digests and folders (`with_trains`); once each."""
        labels = store.labels("train")
        held = held_out(store, validation, labels)
        ident = store.identity["dataset"]
        test = store.labels("test")
        names, seed = ident.get("class_names"), stream_config.order_seed
        protocol = describe_protocol(
            ident["name"], names, stream, seed, origin, validation, labels, test, held
        )
        train_labels = stream.remap(labels)
        held_labels = train_labels[held]
        train_labels[held] = HELD_OUT  # never trained on, never a prototype, never a router statistic
        ids = store.ids("train") if len(held) else ()  # read once, only where rows are held out
        plan = cls(
            store,
            stream_config,
            stream,
            validation,
            held,
            train_labels,
            held_labels,
            tuple(str(ids[r]) for r in held),
            stream.remap(test),
            protocol,
            planned_device(device),
            runs_root,
            upto=upto,
        )
        return plan.with_trains(trains, dirs)

    def with_trains(self, trains: Sequence[TrainConfig], dirs: Sequence[Path | None] = ()) -> FitPlan:
        """The same store, split and device for other recipes (a sweep's group, a suite's cell),
        resolved at the store's dimension, with their configs, digests and run folders (a folder not
        given: the config's default under the runs root)."""
        resolved = tuple(t.resolved(self.store.dim) for t in trains)
        configs = tuple(self._config(t) for t in resolved)
        given = list(dirs) or [None] * len(configs)
        folders = tuple(
            Path(d) if d is not None else default_run_dir(c, self.runs_root)
            for d, c in zip(given, configs, strict=True)
        )
        digests = tuple(config_digest(c) for c in configs)
        return replace(self, trains=resolved, configs=configs, digests=digests, dirs=folders)

    # ------------------------------------------------------------------------------ what files record

    def run_config(self, train: TrainConfig) -> dict[str, Any]:
        """What a run's config.json holds for a recipe (resolved here at the store's dimension)."""
        return self._config(train.resolved(self.store.dim))

    def _config(self, resolved: TrainConfig) -> dict[str, Any]:
        """config.json of a resolved recipe (`records.run_config`, beside its reader and the
        comparison the run folder's claim makes)."""
        return make_run_config(
            self.store, self.stream_config, self.validation, self.held_ids, self.protocol.record(), resolved
        )
