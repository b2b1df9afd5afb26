"""outcomes.safetensors: which images a run (under each router) or a baseline answered right after
each task, on test and on the validation split. Every interval and paired test of its figures is
computed from them (`method.uncertainty`), never by training again.

```
S/rows         I64 [N]               the split's images: store rows (S: "test" or "validation",
                                     whose rows are the training images held out)
S/classes      I64 [N]               each image's class (the store's label)
S/task         I64 [N]               the task that brings that class (the same for a class's images)
S/right/NAME   U8  [T, ceil(N / 8)]  after each task t, the images NAME answered right: numpy's
                                     packbits of a [T, N] bool array (a class not seen yet: 0)
S/routed/NAME  U8  [T, ceil(N / 8)]  after each task t, the images router NAME sent to their own
                                     task's module (a baseline, which has no router: none)
S/chosen/NAME  I16 [N]               after the last task, the task whose module router NAME
                                     picked for each image (-1: a class not seen yet; -2: a tied
                                     route, no module picked); a run's routing confusion is
                                     counted from it (kept by runs only)
metadata       format, tasks (T)
```

A run keeps one beside its metrics.json, a baseline in its own folder, a sweep one per point in
its outcomes/ folder (outcomes/KEY.safetensors, KEY the point's results.csv key). The header is
checked before a tensor is read, its format (`records.check_format`), and the answers against the
figures they must give (`records.derived`): a file edited, damaged, of another format or of another
run is one line.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tosca_foundation import atomic
from tosca_foundation.errors import UserError
from tosca_foundation.tensorfiles import Header, TensorFileError, read_safetensors
from tosca_heads.method.ties import TIED_ROUTE
from tosca_heads.method.uncertainty import Outcomes
from tosca_heads.records import FORMAT, check_format

OUTCOMES = "outcomes.safetensors"
SPLITS = ("test", "validation")
IMAGE_KEYS = ("rows", "classes", "task")
MAX_TASKS = 10_000
MAX_IMAGES = 1 << 31

PerSplit = dict[str, dict[str, Outcomes]]  # split -> name (router or method) -> its outcomes


def write_outcomes(path: Path, found: Mapping[str, Mapping[str, Outcomes]]) -> None:
    """One file holding every name's outcomes on every split (all of one split on the same images)."""
    import torch

    tensors: dict[str, Any] = {}
    tasks = 0
    for split, named in found.items():
        for i, (name, outcome) in enumerate(named.items()):
            if i == 0:
                for key in IMAGE_KEYS:
                    tensors[f"{split}/{key}"] = torch.from_numpy(
                        np.ascontiguousarray(getattr(outcome, key), np.int64)
                    )
            tensors[f"{split}/right/{name}"] = torch.from_numpy(np.packbits(outcome.correct, axis=1))
            if outcome.routed is not None:
                tensors[f"{split}/routed/{name}"] = torch.from_numpy(np.packbits(outcome.routed, axis=1))
            if outcome.chosen is not None:
                tensors[f"{split}/chosen/{name}"] = torch.from_numpy(
                    np.ascontiguousarray(outcome.chosen, np.int16)
                )
            tasks = outcome.tasks
    atomic.write_safetensors(path, tensors, {"format": str(FORMAT), "tasks": str(tasks)})


def _check_header(header: Header) -> None:
    meta = header.metadata
    if not meta.get("tasks", "").isdigit() or not 1 <= int(meta["tasks"]) <= MAX_TASKS:
        raise TensorFileError("its metadata records no task count")
    tasks = int(meta["tasks"])
    images: dict[str, int] = {}
    lists: dict[str, set[str]] = {}  # the image lists each split has
    for name, info in header.tensors.items():
        split, _, key = name.partition("/")
        if split not in SPLITS:
            raise TensorFileError(f"it holds a tensor {name[:60]!r} of no split")
        if key in IMAGE_KEYS:
            if info.dtype != "I64" or len(info.shape) != 1 or info.shape[0] > MAX_IMAGES:
                raise TensorFileError(f"{name[:60]} is not a list of image numbers")
            if images.setdefault(split, info.shape[0]) != info.shape[0]:
                raise TensorFileError(f"its {split} image lists differ in length")
            lists.setdefault(split, set()).add(key)
    for name, info in header.tensors.items():
        split, _, key = name.partition("/")
        if key in IMAGE_KEYS:
            continue
        if key.startswith("chosen/") and split in images:
            if info.dtype != "I16" or info.shape != (images[split],):
                raise TensorFileError(f"{name[:60]} does not hold a task for each of {images[split]} images")
            continue
        if not key.startswith(("right/", "routed/")) or split not in images:
            raise TensorFileError(f"it holds a tensor {name[:60]!r} that no outcomes file has")
        if info.dtype != "U8" or info.shape != (tasks, math.ceil(images[split] / 8)):
            raise TensorFileError(f"{name[:60]} does not hold {tasks} tasks of {images[split]} images")
    if any(found != set(IMAGE_KEYS) for found in lists.values()):
        raise TensorFileError("a split lacks its image lists")


def read_outcomes(path: Path, hint: str) -> PerSplit:
    """The outcomes in a file, checked: one line naming the file and `hint` (what rewrites it) when
    it is missing (every run, baseline and sweep point tosca writes keeps one: its figures' intervals
    come from it) or not what tosca writes."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise UserError(
            f"{path} is missing (deleted?): the figures beside it have no answers to show; {hint}"
        )
    try:
        tensors, meta = read_safetensors(path, _check_header)
        text = meta.get("format")
        check_format(path, int(text) if text and text.isdigit() else text, "outcomes")
        return _unpacked(tensors, int(meta["tasks"]))
    except TensorFileError as exc:
        raise UserError(f"{path}: {exc}; {hint}") from None


def _bits(packed: Any, images: int) -> np.ndarray:
    """A packed [T, ceil(N / 8)] tensor back to [T, N] bools."""
    return np.unpackbits(packed.numpy(), axis=1, count=images).astype(bool)


def _chosen(packed: Any, tasks: int, split: str) -> np.ndarray | None:
    """The tasks picked after the last task (None: not kept), each -1 (not seen), -2 (a tied
    route: `TIED_ROUTE`) or one of the `tasks`."""
    if packed is None:
        return None
    chosen = packed.numpy().astype(np.int64)
    if len(chosen) and (chosen.min() < TIED_ROUTE or chosen.max() >= tasks):
        raise TensorFileError(f"its {split} routes name a task it does not have")
    return chosen


def _unpacked(tensors: dict[str, Any], tasks: int) -> PerSplit:
    found: PerSplit = {}
    for split in SPLITS:
        if f"{split}/rows" not in tensors:
            continue
        rows, classes, task = (tensors[f"{split}/{k}"].numpy() for k in IMAGE_KEYS)
        if len(rows) and (rows.min() < 0 or classes.min() < 0 or task.min() < 0):
            raise TensorFileError(f"its {split} images hold a negative number")
        order = np.argsort(classes, kind="stable")
        same_class = classes[order][1:] == classes[order][:-1]
        if (task[order][1:][same_class] != task[order][:-1][same_class]).any():
            raise TensorFileError(f"its {split} images of one class come in different tasks")
        prefix = f"{split}/right/"
        for key in tensors:
            if key.startswith(prefix):
                name = key[len(prefix) :]
                correct = _bits(tensors[key], len(rows))
                packed = tensors.get(f"{split}/routed/{name}")
                routed = None if packed is None else _bits(packed, len(rows))
                chosen = _chosen(tensors.get(f"{split}/chosen/{name}"), correct.shape[0], split)
                found.setdefault(split, {})[name] = Outcomes(correct, classes, task, rows, routed, chosen)
        for kind in ("routed", "chosen"):
            routes = {key.split("/", 2)[2] for key in tensors if key.startswith(f"{split}/{kind}/")}
            if routes - set(found.get(split, {})):
                raise TensorFileError(f"its {split} routes are of a name it holds no answers of")
    return found
