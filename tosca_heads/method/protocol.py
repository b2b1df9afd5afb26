"""The class-incremental protocol: class order, task splits, per-task index arrays (method.md §2)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tosca_foundation.dataset_names import DATASETS, Split
from tosca_foundation.errors import UserError, UserTypeError, UserValueError
from tosca_foundation.names import Spell, as_flag

DEFAULT_ORDER_SEED = 1993
MAX_DEFAULT_TASKS = 10  # a dataset without a paper split: at most this many equal tasks by default
MAX_VAL_FRACTION = 0.5  # a validation split may take at most half of each class's training rows
HELD_OUT = -1  # the incremental label of a training row held out for validation: in no task


def class_order(num_classes: int, seed: int = DEFAULT_ORDER_SEED) -> np.ndarray:
    """The reference code's order: np.random.seed(seed); np.random.permutation(num_classes)."""
    return np.random.RandomState(seed).permutation(num_classes)


@dataclass(frozen=True)
class TaskStream:
    """Classes in incremental order and the blocks of that order that make each task."""

    order: np.ndarray  # order[i] = original label of incremental class i
    init_cls: int
    increment: int
    sizes: tuple[int, ...] = ()  # each task's class count where tasks differ in size (a scenario's)

    @classmethod
    def uneven(cls, order: np.ndarray, sizes: tuple[int, ...]) -> TaskStream:
        """Tasks of the given class counts, in order (a blurry or domain stream read as TOSCA's
        tasks, `applied/tosca_scenario.py`): every count at least 1, their sum the classes of `order`."""
        if not sizes or min(sizes) < 1 or sum(sizes) != len(order):
            raise ValueError(f"task sizes {sizes} do not cover {len(order)} classes")
        later = sizes[1] if len(sizes) > 1 else sizes[0]
        return cls(order, sizes[0], later, tuple(int(n) for n in sizes))

    @classmethod
    def build(
        cls, num_classes: int, init_cls: int, increment: int, order_seed: int = DEFAULT_ORDER_SEED
    ) -> TaskStream:
        """The split of num_classes classes (its values checked by `StreamConfig.validate`), refused
        in one line when it does not fit them."""
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
        if self.sizes:
            return len(self.sizes)
        return 1 + (self.num_classes - self.init_cls) // self.increment

    @property
    def name(self) -> str:
        return "uneven" if self.sizes else split_name(self.init_cls, self.increment)

    def describe(self) -> str:
        """'B0 Inc2: 5 tasks of 2 classes' or 'B50 Inc10: 6 tasks (50 classes, then 5 of 10)'."""
        if self.sizes:
            return (
                f"{_count(self.num_tasks, 'task')} of uneven size ({', '.join(map(str, self.sizes))} classes)"
            )
        if self.init_cls == self.increment:
            return f"{self.name}: {_count(self.num_tasks, 'task')} of {_count(self.increment, 'class')}"
        later = self.num_tasks - 1
        return f"{self.name}: {_count(self.num_tasks, 'task')} ({_count(self.init_cls, 'class')}, then {later} of {self.increment})"

    def task_classes(self, task: int) -> range:
        """Incremental class ids (positions in the order) of one task."""
        if self.sizes:
            start = sum(self.sizes[:task])
            return range(start, start + self.sizes[task])
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
        if self.sizes:
            return np.searchsorted(np.cumsum(self.sizes), remapped, side="right")
        return np.where(remapped < self.init_cls, 0, 1 + (remapped - self.init_cls) // max(self.increment, 1))

    def rows_of_task(self, remapped: np.ndarray, task: int) -> np.ndarray:
        classes = self.task_classes(task)
        return np.flatnonzero((remapped >= classes.start) & (remapped < classes.stop))

    def largest_task_rows(self, remapped: np.ndarray) -> int:
        """Training rows of the task that has the most (rows marked HELD_OUT are in none)."""
        counts = np.bincount(remapped[remapped >= 0], minlength=self.num_classes)
        return max(
            int(counts[self.task_classes(t).start : self.task_classes(t).stop].sum())
            for t in range(self.num_tasks)
        )

    def rows_seen(self, remapped: np.ndarray, task: int) -> np.ndarray:
        """Rows of every class seen by `task` (rows marked HELD_OUT are in no task)."""
        return np.flatnonzero((remapped >= 0) & (remapped < self.seen_classes(task)))


def _count(n: int, noun: str) -> str:
    plural = noun + ("es" if noun.endswith("s") else "s")
    return f"{n} {noun if n == 1 else plural}"


@dataclass(frozen=True)
class StreamConfig:
    init_cls: int
    increment: int
    order_seed: int = DEFAULT_ORDER_SEED

    def validate(self, spell: Spell = as_flag) -> None:
        """One line naming the first value of the wrong type or out of range, as `spell` names it
        (the command line's flag, Python's keyword)."""
        check_split_values(self.init_cls, self.increment, self.order_seed, spell)

    def task_stream(self, num_classes: int) -> TaskStream:
        """The tasks this split makes of num_classes classes (a clear error if it does not split).
        The split's own values were checked where it came in (`stream_config`, a run's files)."""
        return TaskStream.build(num_classes, self.init_cls, self.increment, self.order_seed)


def declared_split(dataset: str) -> Split | None:
    """The default split a dataset's registration declares (`tosca_foundation.dataset_names`:
    the paper's, or tosca's for one the paper does not use); None for a name with none (an image
    folder, a store of no registered dataset)."""
    return DATASETS[dataset].split if dataset in DATASETS else None


def default_stream(dataset: str, num_classes: int, spell: Spell = as_flag) -> StreamConfig:
    """The split a command uses when --init-cls/--increment are not given: the split the dataset's
    registration declares (`declared_split`), else `generic_increment`'s (refused in one line when
    there is none)."""
    split = declared_split(dataset)
    if split is not None:
        return StreamConfig(split.init_cls, split.increment)
    increment = generic_increment(num_classes)
    if increment is None:
        raise UserError(
            f"{num_classes} classes do not split into 2 or more equal tasks of 2 or more classes, and "
            f"dataset {dataset!r} has no paper split: pass {spell('init_cls')} and {spell('increment')}"
        )
    return StreamConfig(increment, increment)


def generic_increment(num_classes: int) -> int | None:
    """The default split of a dataset without a paper split (an image folder): the smallest number
    of classes per task, at least 2, that makes at most MAX_DEFAULT_TASKS equal tasks, and at least
    two of them (10 classes: B0 Inc2, 5 tasks; 100: B0 Inc10, 10 tasks). None when no such split
    exists (a prime number of classes, or fewer than 4): one class per task or a single task is
    never chosen by surprise."""
    for increment in range(2, num_classes // 2 + 1):
        if num_classes % increment == 0 and num_classes // increment <= MAX_DEFAULT_TASKS:
            return increment
    return None


def stream_config(
    dataset: str,
    num_classes: int,
    init_cls: int | None,
    increment: int | None,
    order_seed: int = DEFAULT_ORDER_SEED,
    spell: Spell = as_flag,
) -> StreamConfig:
    """The class split a command asks for: the flags where given, else the dataset's default split
    (`default_stream`); refused in one line when it does not fit the store's classes (naming the
    values as `spell` does)."""
    return task_split(dataset, num_classes, init_cls, increment, order_seed, spell)[0]


def check_split_values(
    init_cls: int | None = None,
    increment: int | None = None,
    order_seed: int | None = None,
    spell: Spell = as_flag,
) -> None:
    """A split's values (None: not given), each an integer in range, else one line naming the
    first that is not as `spell` names it: of the wrong type a `UserTypeError`, out of range a
    `UserValueError`."""
    given = {"init_cls": init_cls, "increment": increment, "order_seed": order_seed}
    for name, value in given.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise UserTypeError(f"{spell(name)} must be an integer, got {value!r}")
    for name in ("init_cls", "increment"):
        if given[name] is not None and given[name] < 1:
            raise UserValueError(f"{spell(name)} must be at least 1, got {given[name]}")
    if order_seed is not None and not 0 <= order_seed < 2**32:
        raise UserValueError(f"{spell('order_seed')} must be in [0, 2**32), got {order_seed}")


def task_split(
    dataset: str,
    num_classes: int,
    init_cls: int | None,
    increment: int | None,
    order_seed: int = DEFAULT_ORDER_SEED,
    spell: Spell = as_flag,
) -> tuple[StreamConfig, TaskStream]:
    """`stream_config`'s split and the task stream it makes of the store's classes, built once: the
    build is what refuses a split that does not divide them. Values named by `spell` in a refusal."""
    check_split_values(init_cls, increment, order_seed, spell)
    if init_cls is not None and init_cls > num_classes:
        raise UserValueError(f"{spell('init_cls')} {init_cls} is more than the store's {num_classes} classes")
    if init_cls is not None and increment is not None:
        base = StreamConfig(init_cls, increment)
    else:
        base = default_stream(dataset, num_classes, spell)
    chosen = StreamConfig(
        init_cls if init_cls is not None else base.init_cls,
        increment if increment is not None else base.increment,
        order_seed,
    )
    chosen.validate(spell)
    return chosen, chosen.task_stream(
        num_classes
    )  # the build refuses a split that does not divide the classes


def split_name(init_cls: int, increment: int) -> str:
    """The split in the literature's notation, the one naming used everywhere: B0 Inc5 when every
    task has `increment` classes (the first included), B50 Inc10 when the first task has more."""
    return f"B0 Inc{increment}" if init_cls == increment else f"B{init_cls} Inc{increment}"


def split_origin(dataset: str, init_cls: int | None, increment: int | None) -> str:
    """Where a command's split comes from, in words (the protocol line says it)."""
    if init_cls is not None and increment is not None:
        return "as given"
    split = declared_split(dataset)
    if split is not None and not split.paper:
        source = f"tosca's default for {dataset}, not in the paper"
    elif split is not None:
        source = f"the paper's split for {dataset}"
    else:
        source = f"the default without a paper split: at most {MAX_DEFAULT_TASKS} equal tasks, the fewest classes each"
    return source if (init_cls, increment) == (None, None) else f"given in part, the rest from {source}"


# ------------------------------------------------------------------------------------------ validation


@dataclass(frozen=True)
class ValidationConfig:
    """A validation split carved from the train split: per class, a seeded `fraction` of its
    training rows is held out (never trained on, never in the routers' statistics) and every
    router is evaluated on it after every task, beside the test split. Off (fraction 0) is the
    paper's protocol: every training image trains."""

    fraction: float = 0.0
    seed: int = 0

    @property
    def enabled(self) -> bool:
        return self.fraction > 0

    def validate(self, spell: Spell = as_flag) -> None:
        """One line naming the first value of the wrong type or out of range, as `spell` names it
        (the command line's flag, Python's keyword)."""
        if isinstance(self.fraction, bool) or not isinstance(self.fraction, (int, float)):
            raise UserTypeError(f"{spell('val_fraction')} must be a number, got {self.fraction!r}")
        if not (math.isfinite(self.fraction) and 0 <= self.fraction <= MAX_VAL_FRACTION):
            raise UserValueError(
                f"{spell('val_fraction')} must be in [0, {MAX_VAL_FRACTION}] (0: no validation split), "
                f"got {self.fraction!r}"
            )
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise UserTypeError(f"{spell('val_seed')} must be an integer in [0, 2**32), got {self.seed!r}")
        if not 0 <= self.seed < 2**32:
            raise UserValueError(f"{spell('val_seed')} must be an integer in [0, 2**32), got {self.seed!r}")

    def carve(self, labels: np.ndarray, class_names: list[str] | None = None) -> np.ndarray:
        """The held-out train rows (sorted store rows): per class (by its store label, so the carve
        does not depend on the class order), round(fraction x n) of its rows drawn by a generator
        seeded by (seed, label), at least 1 and at most n - 1. A class with fewer than 2 training
        rows cannot give one up: one line. The fraction and seed were checked where they came in
        (`validate`, at the request or the run's files): trusted here."""
        assert 0 <= self.fraction <= MAX_VAL_FRACTION, self.fraction
        labels = np.asarray(labels)
        if not self.enabled:
            return np.zeros(0, dtype=np.int64)
        held = []
        for label in np.unique(labels):
            rows = np.flatnonzero(labels == label)
            if len(rows) < 2:
                name = class_names[int(label)] if class_names and int(label) < len(class_names) else label
                raise UserError(
                    f"class {name!s} has {len(rows)} training sample(s): none can be held out for validation; "
                    "pass --val-fraction 0 (no validation split) or add samples"
                )
            take = min(len(rows) - 1, max(1, round(self.fraction * len(rows))))
            order = np.random.default_rng([self.seed, int(label)]).permutation(len(rows))
            held.append(rows[order[:take]])
        return np.sort(np.concatenate(held)) if held else np.zeros(0, dtype=np.int64)

    def record(self) -> dict[str, Any]:
        return {"fraction": float(self.fraction), "seed": int(self.seed)}

    def said(self) -> str:
        """The split in words: '10% of each class held out for validation (seed 0)', or none."""
        if not self.enabled:
            return "no validation split"
        return f"{100 * self.fraction:g}% of each class held out for validation (seed {self.seed})"


NO_VALIDATION = ValidationConfig()


# ------------------------------------------------------------------------------------------ the protocol, said

REFERENCE_BATCH = 48  # the reference code's test batch (`batch` routing votes over it)
FEW_IMAGES = 5  # fewer images than this per class make its accuracy move in big steps


@dataclass(frozen=True)
class ProtocolReport:
    """The protocol a command runs under, said once at its start and recorded in its files: the
    split and where it came from, the class order, each task's classes, the validation split, and
    warnings about figures that will mean little."""

    dataset: str
    split: str  # 'B0 Inc2'
    summary: str  # 'B0 Inc2: 5 tasks of 2 classes'
    origin: str
    order_seed: int
    tasks: tuple[tuple[str, ...], ...]  # each task's class names, in the class order
    validation: ValidationConfig
    held_out: int  # training images held out for validation
    warnings: tuple[str, ...]
    held_per_class: str = ""  # what each class gave up, as held: '1 of 16 in each class'

    def line(self) -> str:
        """One line: what every header shows; the validation split as it was held out (the share
        asked for is rounded to whole images, at least 1 and at most all but 1 of each class)."""
        held = (
            f"validation: {self.held_out:,} training images held out ({self.held_per_class}; seed "
            f"{self.validation.seed})"
            if self.validation.enabled
            else "no validation split (the paper's protocol: every training sample trains)"
        )
        return f"protocol: {self.dataset}, {self.summary} ({self.origin}), class order of seed {self.order_seed}; {held}"

    def record(self) -> dict[str, Any]:
        """What run, sweep and suite files keep of it."""
        return {
            "split": self.split,
            "summary": self.summary,
            "origin": self.origin,
            "order_seed": self.order_seed,
            "tasks": [list(names) for names in self.tasks],
            "validation": {**self.validation.record(), "held_out": self.held_out},
            "warnings": list(self.warnings),
        }


def describe_protocol(
    dataset: str,
    class_names: list[str] | None,
    stream: TaskStream,
    order_seed: int,
    origin: str,
    validation: ValidationConfig,
    train_labels: np.ndarray,
    test_labels: np.ndarray,
    held: np.ndarray,
) -> ProtocolReport:
    """The protocol of a command on a store: its task stream (of the class order of `order_seed`),
    its labels by split (store label ids) and `held`, the training rows the validation split holds
    out (carved by the caller)."""
    names = [str(n) for n in (class_names or range(stream.num_classes))]
    tasks = tuple(
        tuple(names[int(stream.order[c])] for c in stream.task_classes(t)) for t in range(stream.num_tasks)
    )
    trained = np.delete(np.asarray(train_labels), held)
    warnings = []
    test_tasks = stream.task_of(stream.remap(np.asarray(test_labels)))
    small = [(t, int((test_tasks == t).sum())) for t in range(stream.num_tasks)]
    small = [(t, n) for t, n in small if n < REFERENCE_BATCH]
    if small:
        t, n = small[0]
        more = f" (and {len(small) - 1} more task(s))" if len(small) > 1 else ""
        warnings.append(
            f"task {t} has {n} test sample(s), fewer than the {REFERENCE_BATCH} of a `batch` routing batch{more}: "
            "its batches mix tasks, so the `batch` and `batch_shuffled` figures mean little"
        )
    for what, labels in (
        ("test", test_labels),
        ("training", trained),
        ("validation", np.asarray(train_labels)[held]),
    ):
        if what == "validation" and not validation.enabled:
            continue
        counts = np.bincount(np.asarray(labels, dtype=np.int64), minlength=stream.num_classes)
        few = np.flatnonzero(counts < FEW_IMAGES)
        if len(few):
            c = int(few[0])
            more = f" (and {len(few) - 1} more class(es))" if len(few) > 1 else ""
            warnings.append(
                f"class {names[c]} has {int(counts[c])} {what} sample(s){more}, fewer than {FEW_IMAGES}: "
                f"its {what} accuracy moves in steps of {100 / max(1, int(counts[c])):.0f} points"
            )
    return ProtocolReport(
        dataset,
        stream.name,
        stream.describe(),
        origin,
        order_seed,
        tasks,
        validation,
        len(held),
        tuple(warnings),
        held_per_class(validation, np.asarray(train_labels), held),
    )


def _span(values: np.ndarray) -> str:
    low, high = int(values.min()), int(values.max())
    return f"{low:,}" if low == high else f"{low:,} to {high:,}"


def held_per_class(validation: ValidationConfig, train_labels: np.ndarray, held: np.ndarray) -> str:
    """What each class gave up, as held out: '1 of 16 in each class, 6.2%; 1e-07% asked, rounded to
    whole images, at least 1 per class' (the asked share said only where it is not what was held)."""
    if not validation.enabled or len(held) == 0:
        return ""
    classes, totals = np.unique(train_labels, return_counts=True)
    taken = np.bincount(train_labels[held], minlength=int(classes.max()) + 1)[classes]
    share = 100 * len(held) / len(train_labels)
    said = f"{_span(taken)} of {_span(totals)} in each class, {share:.3g}%"
    asked = 100 * validation.fraction
    if abs(share - asked) > 0.05 * asked:
        said += f"; {asked:g}% asked, rounded to whole images, at least 1 and at most all but 1 per class"
    return said
