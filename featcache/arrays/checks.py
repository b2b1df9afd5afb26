"""What imported columns must hold, checked once, before any store is made: features [N, D] of
floats, finite; labels [N] of integers inside the class list; class names distinct; a split (given,
or a seeded stratified rule) that leaves every class rows in train and test; ids distinct; views
[N, V, D] of floats. Each mistake is one line naming the column and the source it came from."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from featcache.arrays.readers import Found
from featcache.arrays.requests import ImportRequest
from featcache.arrays.split_rule import stratified_test_rows
from featcache.store.format import SPLITS
from tosca_foundation.errors import UserError
from tosca_foundation.files import read_text
from tosca_foundation.text import printable

SPLIT_WORDS = {"train": "train", "test": "test", "0": "train", "1": "test"}
MAX_NAME = 200  # characters of a class name


@dataclass(frozen=True)
class Part:
    """One split's rows, in the order of the source: features [n, D], labels [n], ids, views [V, n, D]."""

    features: np.ndarray
    labels: np.ndarray
    ids: list[str]
    views: np.ndarray | None


@dataclass(frozen=True)
class Checked:
    """Everything a store is made of, checked: its splits, class names and the split's rule in words."""

    parts: dict[str, Part]
    class_names: list[str]
    split_rule: str

    @property
    def dim(self) -> int:
        return int(self.parts["train"].features.shape[1])

    @property
    def views(self) -> int:
        views = self.parts["train"].views
        return 0 if views is None else int(views.shape[0])


def _column(found: Found, name: str, flag: str, required: bool = True) -> np.ndarray | None:
    if name in found.columns:
        return found.columns[name]
    if not required:
        return None
    held = ", ".join(sorted(found.columns)) or "none"
    raise UserError(f"no column {name!r} in the sources (they hold: {held}): pass {flag} NAME")


def _of(found: Found, name: str) -> str:
    return f"{name!r} (in {printable(found.where[name])})"


def checked_features(found: Found, name: str) -> np.ndarray:
    values = _column(found, name, "--features")
    assert values is not None
    if values.ndim != 2:
        raise UserError(
            f"features {_of(found, name)} have shape {list(values.shape)}: features are one row per sample, [N, D]"
        )
    if values.dtype.kind != "f":
        raise UserError(
            f"features {_of(found, name)} hold {values.dtype} values, not floats: convert them to float32"
        )
    if values.shape[0] == 0 or values.shape[1] == 0:
        raise UserError(
            f"features {_of(found, name)} have shape {list(values.shape)}: no rows or no dimensions"
        )
    return values


def checked_labels(found: Found, name: str, rows: int) -> np.ndarray:
    values = _column(found, name, "--labels")
    assert values is not None
    if values.ndim != 1:
        raise UserError(f"labels {_of(found, name)} have shape {list(values.shape)}, not [N]")
    if values.dtype.kind not in "iu":
        raise UserError(
            f"labels {_of(found, name)} hold {values.dtype} values, not integers: labels are class indices "
            "into the class names"
        )
    if len(values) != rows:
        raise UserError(
            f"the features have {rows:,} rows and labels {_of(found, name)} {len(values):,}: one label per row"
        )
    return values.astype(np.int64)


def class_names_of(found: Found, given: Path | None, labels: np.ndarray) -> list[str]:
    """--class-names' file, else the sources' own, else the labels' indices as names."""
    if given is not None:
        names = [line.strip() for line in read_text(given, "--class-names file").splitlines() if line.strip()]
        where = f"--class-names {printable(given)}"
    elif "class_names" in found.meta:
        names, where = found.meta["class_names"], "the sources' class names"
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise UserError(f"{where} are not a list of texts")
    else:
        return [str(i) for i in range(int(labels.max()) + 1 if labels.size and labels.max() >= 0 else 0)]
    if not names:
        raise UserError(f"{where} name no class")
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise UserError(f"{where} name the class {printable(name)!r} twice: each class has one name")
        if len(name) > MAX_NAME:
            raise UserError(f"{where} hold a class name of {len(name)} characters (at most {MAX_NAME})")
        seen.add(name)
    return list(names)


def _check_label_range(labels: np.ndarray, names: list[str]) -> None:
    outside = np.flatnonzero((labels < 0) | (labels >= len(names)))
    if outside.size:
        row = int(outside[0])
        raise UserError(
            f"label {int(labels[row])} of row {row} is outside the {len(names)} class names (0..{len(names) - 1})"
            + (f"; and {outside.size - 1} more rows" if outside.size > 1 else "")
        )


def split_of(found: Found, request: ImportRequest, labels: np.ndarray) -> tuple[np.ndarray, str]:
    """(True where a row is a test row, the rule in words): the split column, or --test-fraction's."""
    column = _column(found, request.split, "--split", required=False)
    if column is not None:
        if request.test_fraction is not None:
            raise UserError(
                f"the sources have a split column {_of(found, request.split)} and --test-fraction is given: use one"
            )
        if column.ndim != 1 or len(column) != len(labels):
            raise UserError(
                f"split {_of(found, request.split)} has shape {list(column.shape)}, not one entry per row ({len(labels):,})"
            )
        words = np.asarray([SPLIT_WORDS.get(str(v).strip().lower(), "") for v in column.tolist()])
        bad = np.flatnonzero(words == "")
        if bad.size:
            raise UserError(
                f"split {_of(found, request.split)} says {printable(column[int(bad[0])])!r} at row {int(bad[0])}: "
                "each row is train or test (or 0 or 1)"
            )
        recorded = found.meta.get("split_rule")  # `tosca export` says how its split column was made
        rule = recorded if isinstance(recorded, str) else f"as given (column {request.split!r})"
        return words == "test", rule
    if request.test_fraction is None:
        raise UserError(
            f"the sources have no split column {request.split!r}: pass --split NAME, or --test-fraction F for a "
            "seeded stratified split"
        )
    test = stratified_test_rows(labels, request.test_fraction, request.split_seed)
    return test, f"stratified: {request.test_fraction:g} of each class to test, seed {request.split_seed}"


def ids_of(found: Found, name: str, rows: int) -> list[str]:
    column = _column(found, name, "--ids", required=False)
    if column is None:
        return [str(i) for i in range(rows)]
    if column.ndim != 1 or len(column) != rows:
        raise UserError(f"ids {_of(found, name)} have shape {list(column.shape)}, not one per row ({rows:,})")
    ids = [str(v) for v in column.tolist()]
    if len(set(ids)) != rows:
        first = next(i for i in ids if ids.count(i) > 1)
        raise UserError(f"ids {_of(found, name)} name {printable(first)!r} twice: each row needs its own id")
    return ids


def views_of(found: Found, name: str, rows: int, dim: int, train: np.ndarray) -> np.ndarray | None:
    """[V, n_train, D]: the train rows' views (a test row's are never read: a store keeps none)."""
    column = _column(found, name, "--views", required=False)
    if column is None:
        return None
    if column.ndim != 3 or column.shape[0] != rows or column.shape[2] != dim:
        raise UserError(
            f"views {_of(found, name)} have shape {list(column.shape)}, not [{rows}, V, {dim}] (rows, views, dim)"
        )
    if column.dtype.kind != "f":
        raise UserError(f"views {_of(found, name)} hold {column.dtype} values, not floats")
    return np.ascontiguousarray(np.swapaxes(column[train], 0, 1))


def _check_finite(part: Part, split: str) -> None:
    for what, values in (("features", part.features), ("views", part.views)):
        if values is None:
            continue
        bad = ~np.isfinite(values).all(axis=-1)
        if bad.any():
            row = int(np.argwhere(bad)[0][-1])
            raise UserError(
                f"{split} {what} hold NaN or inf (first in row {printable(part.ids[row])!r}, {int(bad.sum())} row(s) "
                "in all): nothing was imported"
            )
    features = part.features
    # `verify.one_vector`, at the edge; the last row first, so a store of varied rows costs no pass
    if (
        len(features) > 1
        and np.array_equal(features[-1], features[0])
        and bool((features == features[:1]).all())
    ):
        raise UserError(
            f"every one of the {len(features):,} {split} rows holds the same features, so nothing tells its "
            "classes apart and no figure would mean anything: check the encoder that computed them; nothing "
            "was imported"
        )


def _check_classes(parts: dict[str, Part], names: list[str]) -> None:
    for split in SPLITS:
        counts = np.bincount(parts[split].labels, minlength=len(names))
        empty = np.flatnonzero(counts == 0)
        if empty.size:
            raise UserError(
                f"class {printable(names[int(empty[0])])!r} has no {split} rows"
                + (f" (nor {empty.size - 1} other classes)" if empty.size > 1 else "")
                + ": every class needs rows in train and test (drop it from the class names, or change the split)"
            )


def check_columns(found: Found, request: ImportRequest) -> Checked:
    """The columns a store is made of, every rule above checked, in the order of the sources' rows."""
    features = checked_features(found, request.features)
    rows, dim = features.shape
    labels = checked_labels(found, request.labels, rows)
    names = class_names_of(found, request.class_names, labels)
    _check_label_range(labels, names)
    test, rule = split_of(found, request, labels)
    ids = ids_of(found, request.ids, rows)
    views = views_of(found, request.views, rows, dim, ~test)
    parts = {}
    for split, rows_of in (("train", ~test), ("test", test)):
        index = np.flatnonzero(rows_of)
        parts[split] = Part(  # float32, as the writer buffers them: a value beyond its range is inf
            np.ascontiguousarray(features[index], dtype=np.float32),
            labels[index],
            [ids[i] for i in index],
            None if views is None or split != "train" else views.astype(np.float32, copy=False),
        )
        _check_finite(parts[split], split)
    _check_classes(parts, names)
    return Checked(parts, names, rule)
