"""The cell: one folder format for every unit that runs (issue 54), so what was asked, what was
measured and what was answered are kept once, and every figure is computed when read.

```
asked.json             what was asked: the store (fingerprint, dataset, backbone), the task split,
                       the validation split, the method and its parameters, the versions that
                       change numbers; `format`
measured.json          what was measured and cannot be derived: seconds (finite, not negative),
                       the machine, and what the method counted or chose as it ran
outcomes.safetensors   the kept answers: per image and stage, right or not, the route taken
                       (`records.outcomes`); a scenario's cell keeps the class ids answered at
                       each step in state/answers.safetensors instead
state/                 the state a method keeps, where it keeps one
done.json              written last: the sha256 of every file above
```

A cell killed, or stopped by a full disk, has no done.json: it is computed again, never reused
(`reusable`). A cell whose done.json is there but whose files are not the ones it names was edited
or damaged after it was written: one line, never a number. Every figure (A_t, A_bar, A_last,
forgetting, intervals, standard errors, image counts, routing accuracy, finished tasks) is worked
out from the answers when read (`figures`, `records.derived`): no file holds a figure to edit.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import platform
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from tosca_foundation import atomic
from tosca_foundation.errors import UserError
from tosca_foundation.files import parse_json, read_bytes
from tosca_foundation.fingerprints import canonical_json
from tosca_foundation.version import __version__
from tosca_heads.method.uncertainty import Outcomes, intervals_of
from tosca_heads.records import FORMAT, check_format
from tosca_heads.records.derived import Block, expected_block, image_key
from tosca_heads.records.outcomes import OUTCOMES, PerSplit, read_outcomes, write_outcomes

ASKED, MEASURED, DONE, STATE = "asked.json", "measured.json", "done.json", "state"
CELL_FILES = (ASKED, MEASURED, OUTCOMES, DONE)
# a scenario cell's answers: the class ids answered at each step (`records.scenario_folder`), kept
# in place of outcomes.safetensors, whose images and stages a scenario's steps are not
STEP_ANSWERS = f"{STATE}/answers.safetensors"
# a scenario run's model after its stream (`records.scenario_model`): its modules, classifier and
# router statistics, what `tosca predict` reads; a cell of no answers
SCENARIO_MODEL = f"{STATE}/model.safetensors"
IN_PLACE_OF_OUTCOMES = (STEP_ANSWERS, SCENARIO_MODEL)
MAX_FILE = 1 << 30  # bytes: a cell's file larger than this is not one tosca wrote
VERSIONED = ("torch", "numpy")  # the libraries whose versions change a cell's numbers


def versions() -> dict[str, str]:
    """tosca's version and those of the libraries that change numbers, as asked.json records them:
    a cell made by another is computed again."""
    return dict(_versions())


@functools.cache
def _versions() -> dict[str, str]:
    """Looked up once per process (a sweep asks it of every point)."""
    found = {"tosca": __version__}
    for package in VERSIONED:
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = "not installed"
    return found


def machine(device: str) -> dict[str, str]:
    """Where a cell's seconds were measured: the processor, the system and the device."""
    return {"machine": platform.machine(), "system": platform.system(), "device": device}


def check_seconds(seconds: Any, where: str, name: str = "seconds") -> float:
    """Seconds as a cell keeps them (`name`: which of them): a finite number, not negative;
    anything else is one line."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        raise UserError(f"{where}: {name} must be a finite number of seconds, got {seconds!r}")
    if seconds < 0:
        raise UserError(f"{where}: {name} must not be negative, got {seconds!r}")
    return float(seconds)


@dataclass(frozen=True)
class Cell:
    """One cell as read: what was asked, what was measured, and the answers kept (split -> name ->
    `Outcomes`). Its figures are `figures(cell)`; `seconds` its measured seconds."""

    folder: Path
    asked: dict[str, Any]
    measured: dict[str, Any]
    answers: PerSplit = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return float(self.measured["seconds"])

    @property
    def tasks(self) -> int:
        """The tasks the cell finished: those its kept answers cover."""
        return max((o.tasks for named in self.answers.values() for o in named.values()), default=0)


def _digest(path: Path) -> str:
    return hashlib.sha256(read_bytes(path, "cell file", "", MAX_FILE)).hexdigest()


def _kept_files(folder: Path) -> list[str]:
    """The files a cell's done.json digests: asked, measured, the answers and its state/."""
    names = [name for name in (ASKED, MEASURED, OUTCOMES) if (folder / name).exists()]
    state = folder / STATE
    if state.is_dir():
        names += sorted(str(p.relative_to(folder)) for p in state.rglob("*") if p.is_file())
    return names


def write_cell(
    folder: Path,
    asked: Mapping[str, Any],
    measured: Mapping[str, Any],
    answers: Mapping[str, Mapping[str, Outcomes]] | None,
) -> None:
    """Write a cell: done.json removed first (a cell rewritten is never reused half-way), then
    asked, measured and the answers, then done.json with every file's digest, last. `answers`
    None: a cell whose answers are not per image and stage (a scenario's: `records.scenario_folder`)
    keeps them in its `STEP_ANSWERS`, written before, and has no outcomes file."""
    check_seconds(measured.get("seconds"), str(folder / MEASURED))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / DONE).unlink(missing_ok=True)
    atomic.write_text(folder / ASKED, json.dumps({"format": FORMAT, **asked}, indent=2) + "\n")
    atomic.write_text(folder / MEASURED, json.dumps({"format": FORMAT, **measured}, indent=2) + "\n")
    if answers is None:
        (folder / OUTCOMES).unlink(missing_ok=True)
    else:
        write_outcomes(folder / OUTCOMES, answers)
    files = {name: _digest(folder / name) for name in _kept_files(folder)}
    atomic.write_text(folder / DONE, json.dumps({"format": FORMAT, "sha256": files}, indent=2) + "\n")


def is_cell(folder: Path) -> bool:
    """A folder holding a cell's files (finished or not)."""
    return (Path(folder) / ASKED).is_file() or (Path(folder) / DONE).is_file()


def _json(path: Path, what: str, hint: str) -> dict[str, Any]:
    payload = parse_json(read_bytes(path, what, hint), str(path), hint)
    if not isinstance(payload, dict):
        raise UserError(f"{path} is not a {what} tosca wrote (the file was edited or damaged); {hint}")
    check_format(path, payload.get("format"), what)
    return payload


def _in_state(name: str) -> bool:
    parts = Path(name).parts
    return len(parts) > 1 and parts[0] == STATE and ".." not in parts and not Path(name).is_absolute()


def check_whole(folder: Path, hint: str) -> None:
    """Every file done.json names is there and is the file that was written: one line otherwise
    (edited or damaged after the cell finished)."""
    folder = Path(folder)
    done = _json(folder / DONE, "cell record", hint)
    digests = done.get("sha256")
    if not isinstance(digests, dict) or not all(isinstance(v, str) for v in digests.values()):
        raise UserError(f"{folder / DONE} does not hold the cell's digests (edited or damaged); {hint}")
    for name in digests:
        if name not in (ASKED, MEASURED, OUTCOMES) and not _in_state(name):
            raise UserError(
                f"{folder / DONE} names {name[:60]!r}, no file of a cell (edited or damaged); {hint}"
            )
    strangers = sorted(set(_kept_files(folder)) - set(digests))
    if strangers:
        raise UserError(
            f"{folder} holds {strangers[0]}, a file its done.json does not name (added since); {hint}"
        )
    kept_in_state = any(n in digests for n in IN_PLACE_OF_OUTCOMES)  # a scenario's cell: no outcomes file
    for name in (ASKED, MEASURED) if kept_in_state else (ASKED, MEASURED, OUTCOMES):
        if name not in digests:
            raise UserError(f"{folder / DONE} does not name {name} (edited or damaged); {hint}")
    for name, digest in digests.items():
        path = folder / name
        if not path.exists() and not path.is_symlink():
            raise UserError(f"{path} is missing (deleted?); {hint}")
        if _digest(path) != digest:
            raise UserError(
                f"{path} is not the file that was written (edited or damaged since: its sha256 is not "
                f"the one done.json records); {hint}"
            )


def reusable(folder: Path, asked: Mapping[str, Any], hint: str) -> bool:
    """The one reuse rule of every cell: True when the cell finished (its done.json written last is
    there), every file it names is whole, and what it was asked is `asked` (versions included).
    A cell never finished (killed, or stopped by a full disk) or asked otherwise: False (computed
    again). A finished cell whose files were edited or damaged: one line (`check_whole`)."""
    folder = Path(folder)
    if not (folder / DONE).exists() and not (folder / DONE).is_symlink():
        return False
    check_whole(folder, hint)
    made = asked_of(folder, hint)
    return canonical_json(made) == canonical_json({"format": FORMAT, **json.loads(json.dumps(dict(asked)))})


def asked_of(folder: Path, hint: str) -> dict[str, Any]:
    """What a cell was asked (its asked.json, as written), before its other files are read."""
    return _json(Path(folder) / ASKED, "cell's asked.json", hint)


def read_cell(folder: Path, hint: str) -> Cell:
    """A finished cell, every file checked whole (`check_whole`), its seconds possible."""
    folder = Path(folder)
    if not (folder / DONE).is_file():
        raise UserError(f"{folder} holds no finished cell (no done.json: it was stopped); {hint}")
    check_whole(folder, hint)
    asked = asked_of(folder, hint)
    measured = _json(folder / MEASURED, "cell's measured.json", hint)
    check_seconds(measured.get("seconds"), str(folder / MEASURED))
    answers = read_outcomes(folder / OUTCOMES, hint) if (folder / OUTCOMES).exists() else {}
    return Cell(folder, asked, measured, answers)


def figures(answers: PerSplit) -> dict[str, dict[str, Block]]:
    """Every metrics block the answers give (split -> name -> block), as the writers made them:
    `derived.expected_block`, the intervals of one split's names from one bootstrap."""
    blocks: dict[str, dict[str, Block]] = {}
    for split, named in answers.items():
        found = intervals_of({name: [outcome] for name, outcome in named.items()})
        blocks[split] = {name: expected_block(outcome, found.get(name)) for name, outcome in named.items()}
    return blocks


def figures_of_many(many: Sequence[PerSplit]) -> list[dict[str, dict[str, Block]]]:
    """`figures` of many cells' answers at once (a sweep's points), each block the one `figures`
    gives: the intervals of every block on the same images come from one bootstrap, whose draws
    depend only on the seed and the classes' sizes (`derived`), so many cells pay for one."""
    groups: dict[tuple[str, str], dict[tuple[int, str, str], list[Outcomes]]] = {}
    for i, answers in enumerate(many):
        for split, named in answers.items():
            for name, outcome in named.items():
                groups.setdefault(image_key(split, outcome), {})[(i, split, name)] = [outcome]
    found: dict[Any, Any] = {}
    for named_runs in groups.values():
        found.update(intervals_of(named_runs))  # type: ignore[arg-type]  # any hashable names a run
    return [
        {
            split: {
                name: expected_block(outcome, found.get((i, split, name))) for name, outcome in named.items()
            }
            for split, named in answers.items()
        }
        for i, answers in enumerate(many)
    ]
