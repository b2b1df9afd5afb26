"""A fit's plan: every fact a fit needs, worked out once at the edge and handed down whole.

`FitPlan` holds the store (opened, fingerprinted, checked readable by whoever opened it), the task
split (its config, the stream it makes, the labels in its class order), the validation split and
the training rows it holds out (carved once), the protocol in words, the recipes (checked and
resolved), each run's config.json and folder, and the device asked for. `group.fit_group` takes one
plan and trains its recipes; nothing below it builds the stream, carves the split or writes a
config again. A sweep's group, a suite's cell or a comparison's run shares its command's plan but
for its own recipes (`with_trains`).

Import-light: numpy and the store only (no torch, no engine, no routers), so a command says its
plan before the heavy libraries load. The device stays as asked ("auto", "cpu", "cuda:N"): it is
resolved where torch is imported anyway, when the engine starts (`group.fit_group`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from featcache.store import FeatureStore
from tosca_heads.experiments.records import default_run_dir, store_block, validation_record
from tosca_heads.method.protocol import (
    HELD_OUT,
    NO_VALIDATION,
    ProtocolReport,
    StreamConfig,
    TaskStream,
    ValidationConfig,
    describe_protocol,
    split_origin,
    stream_config,
)
from tosca_heads.method.recipe import TrainConfig

if TYPE_CHECKING:
    import torch


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
    test_labels: np.ndarray  # each test row's class in the stream's order
    protocol: ProtocolReport
    device: str = "cpu"  # as asked: resolved by the engine's side
    runs_root: Path = Path("runs")  # where a run without a folder of its own goes
    trains: tuple[TrainConfig, ...] = ()  # resolved at the store's dimension (`with_trains`)
    configs: tuple[dict[str, Any], ...] = ()  # each recipe's config.json
    dirs: tuple[Path, ...] = ()  # each recipe's run folder (written there only where asked)

    @classmethod
    def build(
        cls,
        store: FeatureStore,
        stream_config: StreamConfig,
        validation: ValidationConfig = NO_VALIDATION,
        origin: str = "as given",
        trains: Sequence[TrainConfig] = (),
        dirs: Sequence[Path | None] = (),
        device: str | torch.device = "cpu",
        runs_root: Path = Path("runs"),
    ) -> FitPlan:
        """The plan of a split on a store whose values were checked where they came in: the stream
        built, the labels put in its order, the validation rows carved and the protocol said, once
        each."""
        stream = stream_config.task_stream(store.shape.classes)
        ident = store.identity["dataset"]
        names = ident.get("class_names")
        labels = store.labels("train")
        held = validation.carve(labels, names)
        train_labels = stream.remap(labels)
        test = store.labels("test")
        seed = stream_config.order_seed
        protocol = describe_protocol(
            ident["name"], names, stream, seed, origin, validation, labels, test, held
        )
        test_labels = stream.remap(test)
        held_labels = train_labels[held]
        train_labels[held] = HELD_OUT  # never trained on, never a prototype, never a router statistic
        plan = cls(
            store,
            stream_config,
            stream,
            validation,
            held,
            train_labels,
            held_labels,
            test_labels,
            protocol,
            str(device),
            runs_root,
        )
        return plan.with_trains(trains, dirs)

    @classmethod
    def asked(
        cls,
        store: FeatureStore,
        init_cls: int | None,
        increment: int | None,
        order_seed: int,
        validation: ValidationConfig = NO_VALIDATION,
        **rest: Any,
    ) -> FitPlan:
        """The plan of the split a command's flags ask for on this store (the dataset's default where
        not given, refused in one line where none fits). The caller checked the store (complete,
        attrs and labels that fit its arrays: `check_readable`): the plan reads its labels."""
        name = store.identity["dataset"]["name"]
        origin = split_origin(name, init_cls, increment)
        config = stream_config(name, store.shape.classes, init_cls, increment, order_seed)
        return cls.build(store, config, validation, origin, **rest)

    def with_trains(self, trains: Sequence[TrainConfig], dirs: Sequence[Path | None] = ()) -> FitPlan:
        """The same store, split and device for other recipes (a sweep's group, a suite's cell),
        resolved at the store's dimension, with their configs and run folders (a folder not given:
        the config's default under the runs root)."""
        resolved = tuple(t.resolved(self.store.dim) for t in trains)
        configs = tuple(self.run_config(t) for t in resolved)
        given = list(dirs) or [None] * len(configs)
        folders = tuple(
            Path(d) if d is not None else default_run_dir(c, self.runs_root)
            for d, c in zip(given, configs, strict=True)
        )
        return replace(self, trains=resolved, configs=configs, dirs=folders)

    # ------------------------------------------------------------------------------ what files record

    @cached_property
    def held_ids(self) -> tuple[str, ...]:
        """The store ids of the held-out training images (validation.json lists them)."""
        ids = self.store.ids("train")
        return tuple(str(ids[r]) for r in self.held)

    def run_config(self, train: TrainConfig) -> dict[str, Any]:
        """What a run's config.json holds for a recipe. The validation split is recorded only when
        one is held out, so a run without one has the config (and the default folder name) it had
        before validation existed."""
        store = self.store
        config = {
            **store_block(store),
            "feature_dim": store.dim,
            "views": store.views,
            "stream": asdict(self.stream_config),
            "train": asdict(train.resolved(store.dim)),
        }
        if self.validation.enabled:
            config["validation"] = validation_record(self.validation, self.held_ids)
        config["protocol"] = self.protocol.record()
        return config
