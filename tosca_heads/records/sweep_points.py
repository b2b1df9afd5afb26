"""A sweep's points, each a cell (`records.cell`) in points/KEY/ of its sweep folder: what the point
was asked (the store, its flags, the task split, the validation split, the versions), what was
measured (its seconds, its share of its group's, the worker and the machine) and its kept answers,
done.json written last. A point is reused only when `reusable_point` says so (the cell rule: asked
the same, every file whole); one never finished (killed, a full disk) is computed again.

Nothing here holds a figure: a point's A_t, A_bar, A_last, forgetting, routing accuracy, their
intervals and images, its finished tasks and its parameters per task are computed from its
answers and what it was asked when it is read (`figures_of_points`). `read_points` is the one
reader of a sweep's points; every table, plot and claim of a sweep is drawn from what it returns.
A sweep folder written before points were cells (results.csv and outcomes/ as truth, no points/)
is refused in one line (`check_points`).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from featcache.store import FeatureStore
from tosca_foundation.errors import UserError
from tosca_foundation.fingerprints import canonical_json
from tosca_heads.method.protocol import StreamConfig, ValidationConfig
from tosca_heads.method.recipe import TrainConfig
from tosca_heads.method.uncertainty import Outcomes
from tosca_heads.records import cell
from tosca_heads.records.derived import Block
from tosca_heads.records.outcomes import OUTCOMES

POINTS_FOLDER = "points"
KIND = "sweep point"
REDO = "delete the point's folder (points/KEY) to compute it again"
# what a point measured beside its seconds: its share of its group's training and evaluation, the
# group's wall seconds (each a finite number, not negative), the worker's process id and how many
# times it read the store, the points trained together, and the device
TIMED = ("train_seconds", "eval_seconds", "group_seconds")
COUNTED = {"worker_pid": 0, "feature_loads": 0, "group_size": 1}  # each a whole number of at least this
OLD_RESULTS, OLD_OUTCOMES = "results.csv", "outcomes"  # a sweep's truth before points were cells


def point_asked(
    store: FeatureStore,
    train: Mapping[str, Any],
    stream: Mapping[str, Any],
    validation_split: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """What a sweep point is asked (its asked.json): the store's identity and feature size, its
    training flags (r and s resolved), its task split, the validation split it holds out
    (`records.validation_record`, None without one) and the versions that change its numbers."""
    ident = store.identity
    return json.loads(
        json.dumps(
            {
                "kind": KIND,
                "store": {
                    "fingerprint": store.fingerprint,
                    "dataset": ident["dataset"]["name"],
                    "backbone": ident["backbone"]["alias"],
                    "dim": store.dim,
                },
                "train": dict(train),
                "stream": dict(stream),
                "validation_split": None if validation_split is None else dict(validation_split),
                "versions": cell.versions(),
            }
        )
    )


def point_key(flags: Mapping[str, Any]) -> str:
    """A sweep point's identity: a digest of every flag (`SweepPoint.key`), so a grown grid re-uses
    the points it shares; its cell's folder is named by it (points/KEY)."""
    return hashlib.sha256(canonical_json(dict(flags)).encode()).hexdigest()[:16]


def flags_of(asked: Mapping[str, Any]) -> dict[str, Any]:
    """A point's flags as `SweepPoint.flags` gives them (its key is their digest): the training
    flags, the task split's and, only where it holds one out, the validation split's."""
    flags = {**asked["train"], **asked["stream"]}
    held = asked.get("validation_split")
    if held is not None:
        flags.update(val_fraction=held["fraction"], val_seed=held["seed"])
    return flags


def points_folder(out: Path) -> Path:
    return Path(out) / POINTS_FOLDER


def point_folder(out: Path, key: str) -> Path:
    """Where a sweep keeps the point of `key`: points/KEY."""
    return points_folder(out) / key


def _refuse_link(path: Path) -> None:
    """A points folder or a point's folder is one tosca made: never a link (it would be written
    through) nor a file."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise UserError(f"{path} is not a folder tosca made (a link or a file): remove it")


def write_point(
    out: Path,
    key: str,
    asked: Mapping[str, Any],
    measured: Mapping[str, Any],
    answers: Mapping[str, Mapping[str, Outcomes]],
) -> None:
    """A finished point's cell, written once by the process that claimed the sweep (`cell.write_cell`:
    done.json last): whatever a killed writer left in its folder removed first, never through a link."""
    check_measured(measured, str(point_folder(out, key) / cell.MEASURED))
    _refuse_link(points_folder(out))
    points_folder(out).mkdir(exist_ok=True)
    folder = point_folder(out, key)
    _refuse_link(folder)
    if folder.exists():  # never finished, or asked otherwise: computed again, from nothing
        shutil.rmtree(folder)
    cell.write_cell(folder, asked, measured, answers)


def reusable_point(out: Path, key: str, asked: Mapping[str, Any]) -> bool:
    """Whether the point of `key` is in the folder to reuse (`cell.reusable`: finished, whole and
    asked the same); a finished point edited or damaged since is one line."""
    folder = point_folder(out, key)
    if not folder.exists() and not folder.is_symlink():
        return False
    _refuse_link(folder)
    return cell.reusable(folder, asked, REDO)


def check_measured(measured: Mapping[str, Any], where: str) -> None:
    """A point's measured values as a machine gives them, each refused in one line otherwise."""
    try:
        for name in ("seconds", *TIMED):
            cell.check_seconds(measured.get(name), where, name)
    except UserError as exc:
        raise UserError(f"{exc}; {REDO}") from None
    for name, least in COUNTED.items():
        value = measured.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise UserError(
                f"{where}: {name} must be a whole number of at least {least}, got {value!r}; {REDO}"
            )
    if not isinstance(measured.get("device"), str):
        raise UserError(f"{where}: device must be a device's name, got {measured.get('device')!r}; {REDO}")


@dataclass(frozen=True)
class Point:
    """A finished sweep point as read (`read_points`): its key, its cell (what it was asked, what
    it measured, its answers)."""

    key: str
    cell: cell.Cell

    @property
    def flags(self) -> dict[str, Any]:
        return flags_of(self.cell.asked)

    @property
    def answers(self) -> dict[str, dict[str, Outcomes]]:
        return self.cell.answers

    def params_per_task(self) -> int:
        """The parameters one of its modules holds, from what it was asked (`engine.layout`)."""
        from tosca_heads.engine.layout import parameter_count  # torch: not to list a folder

        train = self.cell.asked["train"]
        return parameter_count(int(self.cell.asked["store"]["dim"]), train["r"], train["s"], train["flow"])

    def columns(self) -> dict[str, Any]:
        """Its own columns of results.csv (`records.sweep.POINT_COLUMNS`): its flags, its
        validation split, the store's dataset and backbone, its tasks and parameters, its timings."""
        asked, measured = self.cell.asked, self.cell.measured
        held = asked.get("validation_split") or {"fraction": 0.0, "seed": 0}
        return {
            "key": self.key,
            **self.flags,
            "val_fraction": held["fraction"],
            "val_seed": held["seed"],
            "dataset": asked["store"]["dataset"],
            "backbone": asked["store"]["backbone"],
            "tasks": self.cell.tasks,
            "params_per_task": self.params_per_task(),
            "train_seconds": measured["train_seconds"],
            "eval_seconds": measured["eval_seconds"],
            "run_seconds": measured["seconds"],
            **{name: measured[name] for name in ("worker_pid", "feature_loads", "group_size")},
            "group_seconds": measured["group_seconds"],
            "device": measured["device"],
        }


def check_asked(asked: Mapping[str, Any], where: str) -> None:
    """What a point's asked.json holds, checked as the command line's flags are (its recipe and task
    split validated, the store's names text, its feature size and the validation split's numbers
    possible): one line otherwise, never a traceback from a table drawn from it."""
    store, held = asked.get("store"), asked.get("validation_split")
    try:
        if not isinstance(asked.get("train"), dict) or not isinstance(asked.get("stream"), dict):
            raise TypeError("no recipe or task split")
        TrainConfig(**asked["train"]).validate()
        StreamConfig(**asked["stream"]).validate()
        if held is not None:
            if not isinstance(held, dict):
                raise TypeError("a validation split that is not an object")
            ValidationConfig(held.get("fraction"), held.get("seed")).validate()
        if not (
            isinstance(store, dict)
            and all(isinstance(store.get(k), str) for k in ("fingerprint", "dataset", "backbone"))
            and isinstance(store.get("dim"), int)
            and not isinstance(store.get("dim"), bool)
            and store["dim"] >= 1
        ):
            raise TypeError("no store of a feature size")
    except (TypeError, UserError) as exc:
        raise UserError(
            f"{where} records no point's flags ({exc}); the file was edited or damaged; {REDO}"
        ) from None
    if asked["train"].get("r") is None or asked["train"].get("s") is None:
        raise UserError(f"{where} records no r or s; the file was edited or damaged; {REDO}")


def _entries(folder: Path) -> list[Path]:
    return sorted(folder.iterdir()) if folder.is_dir() else []


def read_point(folder: Path) -> Point:
    """A finished point, checked: every file whole (`cell.read_cell`), nothing else in its folder,
    its folder named by the key its flags give, what it measured possible."""
    _refuse_link(folder)
    found = cell.read_cell(folder, REDO)
    strangers = [p.name for p in _entries(folder) if p.name not in cell.CELL_FILES]
    if strangers:
        raise UserError(
            f"{folder} holds {strangers[0][:60]!r}, no file of a sweep point (added since); {REDO}"
        )
    if found.asked.get("kind") != KIND:
        raise UserError(f"{folder / cell.ASKED} is not a sweep point's (edited or damaged); {REDO}")
    check_asked(found.asked, str(folder / cell.ASKED))
    key = point_key(flags_of(found.asked))
    if key != folder.name:
        raise UserError(
            f"{folder} holds the point {key}, not the one its folder names (moved or renamed); {REDO}"
        )
    check_measured(found.measured, str(folder / cell.MEASURED))
    if not found.answers.get("test"):
        raise UserError(f"{folder / OUTCOMES} holds no answers on test (edited or damaged); {REDO}")
    return Point(key, found)


def read_points(out: Path) -> list[Point]:
    """Every finished point of a sweep folder (a point never finished is left to be computed
    again), each checked (`read_point`); in the order of its flags. The one reader of a sweep's
    points."""
    folder = points_folder(out)
    if not folder.exists() and not folder.is_symlink():
        return []
    _refuse_link(folder)
    points = []
    for entry in _entries(folder):
        if entry.is_symlink() or not entry.is_dir():
            raise UserError(
                f"{folder} holds {entry.name[:60]!r}, no sweep point's folder (added since); {REDO}"
            )
        if (entry / cell.DONE).exists() or (entry / cell.DONE).is_symlink():
            points.append(read_point(entry))
    return in_order(points)


def in_order(points: Sequence[Point]) -> list[Point]:
    """Points in their place in results.csv: by their flags (None first), as a grid lists them."""

    def place(point: Point) -> tuple[Any, ...]:
        flags = point.flags.values()
        return (*((value is not None, value if value is not None else 0) for value in flags), point.key)

    return sorted(points, key=place)


def check_points(out: Path) -> None:
    """Before anything runs: a sweep folder written before points were cells refused in one line,
    then every finished point read and checked (`read_points`)."""
    out = Path(out)
    old = (out / OLD_OUTCOMES).exists() or ((out / OLD_RESULTS).exists() and not points_folder(out).exists())
    if old:
        raise UserError(
            f"sweep folder {out} was written before sweep points were kept as cells (results.csv and "
            f"outcomes/, no {POINTS_FOLDER}/): pass another --out to run the sweep again"
        )
    read_points(out)


def figures_of_points(points: Sequence[Point]) -> list[dict[str, dict[str, Block]]]:
    """Each point's metrics blocks (split -> router -> block), computed from its answers
    (`cell.figures_of_many`: one bootstrap for all the points on the same images)."""
    return cell.figures_of_many([p.answers for p in points])
