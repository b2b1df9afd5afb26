"""The class-incremental protocol: class order, task splits, per-task index arrays (method.md §2)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from featcache.foundation.errors import UserError

DEFAULT_ORDER_SEED = 1993
# (init_cls, increment) of the paper's settings; EuroSAT and CIFAR-10 are not in the paper: B0 Inc2.
PAPER_SPLITS: dict[str, tuple[int, int]] = {
    "cifar100": (5, 5),
    "cub200": (10, 10),
    "imagenet_r": (20, 20),
    "imagenet_a": (20, 20),
    "omnibenchmark": (30, 30),
    "vtab": (10, 10),
    "eurosat": (2, 2),
    "cifar10": (2, 2),
}


def class_order(num_classes: int, seed: int = DEFAULT_ORDER_SEED) -> np.ndarray:
    """The reference code's order: np.random.seed(seed); np.random.permutation(num_classes)."""
    return np.random.RandomState(seed).permutation(num_classes)


@dataclass(frozen=True)
class TaskStream:
    """Classes in incremental order and the blocks of that order that make each task."""

    order: np.ndarray  # order[i] = original label of incremental class i
    init_cls: int
    increment: int

    @classmethod
    def build(
        cls, num_classes: int, init_cls: int, increment: int, order_seed: int = DEFAULT_ORDER_SEED
    ) -> TaskStream:
        if not 0 <= order_seed < 2**32:
            raise UserError(f"--order-seed must be in [0, 2**32), got {order_seed}")
        if init_cls < 1 or increment < 1:
            raise UserError(f"--init-cls and --increment must be at least 1 (got {init_cls}, {increment})")
        if init_cls > num_classes:
            raise UserError(f"--init-cls {init_cls} exceeds the {num_classes} classes of the store")
        if (num_classes - init_cls) % increment:
            raise UserError(
                f"{num_classes} classes do not split into a first task of {init_cls} and tasks of {increment}"
            )
        return cls(class_order(num_classes, order_seed), init_cls, increment)

    @property
    def num_classes(self) -> int:
        return len(self.order)

    @property
    def num_tasks(self) -> int:
        return 1 + (self.num_classes - self.init_cls) // self.increment

    def task_classes(self, task: int) -> range:
        """Incremental class ids (positions in the order) of one task."""
        start = 0 if task == 0 else self.init_cls + (task - 1) * self.increment
        stop = self.init_cls if task == 0 else start + self.increment
        return range(start, stop)

    def seen_classes(self, task: int) -> int:
        return self.task_classes(task).stop

    def remap(self, labels: np.ndarray) -> np.ndarray:
        """Original labels -> incremental class ids."""
        position = np.empty(self.num_classes, dtype=np.int64)
        position[self.order] = np.arange(self.num_classes)
        return position[labels]

    def task_of(self, remapped: np.ndarray) -> np.ndarray:
        return np.where(remapped < self.init_cls, 0, 1 + (remapped - self.init_cls) // max(self.increment, 1))

    def rows_of_task(self, remapped: np.ndarray, task: int) -> np.ndarray:
        classes = self.task_classes(task)
        return np.flatnonzero((remapped >= classes.start) & (remapped < classes.stop))

    def rows_seen(self, remapped: np.ndarray, task: int) -> np.ndarray:
        return np.flatnonzero(remapped < self.seen_classes(task))


@dataclass(frozen=True)
class StreamConfig:
    init_cls: int
    increment: int
    order_seed: int = DEFAULT_ORDER_SEED

    def validate(self) -> None:
        """One line naming the first value of the wrong type or out of range."""
        for name in ("init_cls", "increment", "order_seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise UserError(f"--{name.replace('_', '-')} must be an integer, got {value!r}")
        for name in ("init_cls", "increment"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if not 0 <= self.order_seed < 2**32:
            raise UserError(f"--order-seed must be in [0, 2**32), got {self.order_seed}")

    def task_stream(self, num_classes: int) -> TaskStream:
        """The tasks this split makes of num_classes classes (a clear error if it does not split)."""
        self.validate()
        return TaskStream.build(num_classes, self.init_cls, self.increment, self.order_seed)


def default_stream(dataset: str, num_classes: int) -> StreamConfig:
    init_cls, increment = PAPER_SPLITS.get(dataset, (max(1, num_classes // 10),) * 2)
    return StreamConfig(init_cls, increment)


def stream_config(
    dataset: str,
    num_classes: int,
    init_cls: int | None,
    increment: int | None,
    order_seed: int = DEFAULT_ORDER_SEED,
) -> StreamConfig:
    """The class split a command asks for: the flags where given, else the dataset's paper split;
    refused in one line when it does not fit the store's classes."""
    for flag, value in (("--init-cls", init_cls), ("--increment", increment)):
        if value is not None and value < 1:
            raise UserError(f"{flag} must be at least 1, got {value}")
    if init_cls is not None and init_cls > num_classes:
        raise UserError(f"--init-cls {init_cls} is more than the store's {num_classes} classes")
    base = default_stream(dataset, num_classes)
    chosen = StreamConfig(
        init_cls if init_cls is not None else base.init_cls,
        increment if increment is not None else base.increment,
        order_seed,
    )
    chosen.task_stream(num_classes)  # refuses a split that does not divide the classes
    return chosen
