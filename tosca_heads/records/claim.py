"""One claim for every folder tosca writes: a run, a sweep, a baselines or a suite folder.

`with claim_folder(folder, KIND, config) as folder:` does, in this order and in this one place:

1. checks the folder is claimable (`check`): a new or empty folder, or one of this kind already
   (`tosca_foundation.folders`: never a stranger's files, a folder of another kind, a store,
   a planted link), its files readable, and the config it was made with the one asked for, all
   before anything is written, not even a lock file beside it;
2. takes its lock (`tosca_foundation.locks.folder_lock`: another writer is refused, naming
   who holds it), held for the with-block;
3. claims it (the `.tosca` marker naming its kind), removes what a killed writer left
   half-written, compares the config again (under the lock now) and writes it when the folder
   has none (or the kind grows it: a sweep's grid).

A group of folders (a fit's G run folders) is claimed by `claim_folders`: every one checked
before any lock is made, then each locked and claimed in turn. A folder that a process claimed
for writers it starts (a suite's baselines folder, its cells written by workers) is claimed
without a lock of its own by `mark`.

What differs between kinds is declared once, where each kind's files are written, as a
`FolderKind`: its flag, the file recording what it was made with, how that file is read and
compared, and the few parts only it has (a sweep's grown grid, its results checked, its
validation split's message). The comparison is one line (`refuse_other_config`): the first
differences and the flag to change.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tosca_foundation import atomic, folders
from tosca_foundation.errors import UserError
from tosca_foundation.fingerprints import identity_differences
from tosca_foundation.locks import folder_lock

Config = dict[str, Any]
SHOWN_DIFFERENCES = 3  # a refusal names the first few differences, then how many more


@dataclass(frozen=True)
class FolderKind:
    """One kind of folder tosca writes, declared beside the code that writes its files."""

    name: str  # the marker's kind (`folders.KINDS`)
    flag: str  # the flag that names the folder: what a refusal says to change ("--run", "--out")
    noun: str  # how a refusal names the folder ("run", "sweep folder")
    written_before: Callable[[Path], bool] | None = None  # a folder of this kind from before markers
    # the file recording what the folder was made with (None: nothing to compare), and its reader
    # (refused in one line when damaged)
    config_file: str | None = None
    read_config: Callable[[Path], Config] | None = None
    differences: Callable[[Config, Config], list[str]] = identity_differences  # what makes another config
    # the kind's own words for a difference with a better remedy than another folder (None: the generic line)
    explain: Callable[[Path, Config, Config], str | None] | None = None
    # the config to write over a recorded one that is the same by `differences` (None: keep the file)
    grown: Callable[[Config, Config], Config | None] | None = None
    check_files: Callable[[Path], None] | None = None  # its other files, checked before anything runs

    @property
    def advice(self) -> str:
        return f"pass another {self.flag}"


def check(folder: Path, kind: FolderKind, config: Config | None = None) -> bool:
    """Refuse, before anything is written (even a lock file beside it), a folder that may not be
    claimed as a `kind` folder for `config`; True when it exists and is one already."""
    folder = Path(folder)
    if not folders.check_claimable(folder, kind.name, kind.flag, kind.written_before):
        return False
    if config is not None:
        compare(folder, kind, config)
    if kind.check_files is not None:
        kind.check_files(folder)
    return True


def compare(folder: Path, kind: FolderKind, config: Config) -> Config | None:
    """The config the folder records (None: it records none yet), refused when it is not `config`."""
    recorded = recorded_config(folder, kind)
    if recorded is not None:
        refuse_other_config(folder, kind, recorded, config)
    return recorded


def recorded_config(folder: Path, kind: FolderKind) -> Config | None:
    """The kind's config file of a folder, read back (None: the kind keeps none, or it is not there)."""
    if kind.config_file is None or not (Path(folder) / kind.config_file).exists():
        return None
    if kind.read_config is None:
        raise ValueError(f"folder kind {kind.name!r} names a config file but no reader")
    return kind.read_config(Path(folder))


def refuse_other_config(folder: Path, kind: FolderKind, recorded: Config, wanted: Config) -> None:
    """One line when a folder was made with another config than `wanted`: the kind's own words
    where it has them, else the first differences and the flag to change."""
    if kind.explain is not None:
        said = kind.explain(Path(folder), recorded, wanted)
        if said:
            raise UserError(said)
    differences = kind.differences(recorded, wanted)
    if differences:
        shown = "; ".join(differences[:SHOWN_DIFFERENCES])
        if len(differences) > SHOWN_DIFFERENCES:
            shown += f"; and {len(differences) - SHOWN_DIFFERENCES} more"
        raise UserError(
            f"{kind.noun} {folder} was made with another config or store ({shown}); {kind.advice}"
        )


@contextlib.contextmanager
def claim_folder(folder: Path, kind: FolderKind, config: Config | None = None) -> Iterator[Path]:
    """The folder checked, locked for the with-block, claimed and its config written or compared
    (the module docstring)."""
    with claim_folders([folder], kind, [config]) as (claimed,):
        yield claimed


@contextlib.contextmanager
def claim_folders(
    wanted: Sequence[Path], kind: FolderKind, configs: Sequence[Config | None]
) -> Iterator[list[Path]]:
    """Several folders of one kind claimed at once: each checked before any lock file is made
    beside one, then each locked (all held for the with-block) and claimed in turn."""
    for folder, config in zip(wanted, configs, strict=True):
        check(folder, kind, config)
    fresh = {Path(f): Path(f).exists() for f in wanted if not Path(f).exists() or not any(Path(f).iterdir())}
    with contextlib.ExitStack() as locks:
        for folder, config in zip(wanted, configs, strict=True):
            locks.enter_context(folder_lock(folder, kind.noun, kind.advice))
            _take(Path(folder), kind, config)
        try:
            yield [Path(f) for f in wanted]
        except UserError:  # refused: a folder claimed for nothing is given back (under its lock)
            for folder, existed in fresh.items():
                _give_back(folder, kind, existed)
            raise


def _give_back(folder: Path, kind: FolderKind, existed: bool) -> None:
    """A folder this claim found new or empty and a refused command wrote nothing into but the
    claim's own files (its marker, its config): those removed, and the folder too where the claim
    made it (the lock's release removes the parents it made). A command refused before any work leaves nothing behind (issue 57, point 10:
    a refused FeCAM run left a `.tosca` folder); one that wrote anything else keeps it all."""
    own = {folders.MARKER, *([kind.config_file] if kind.config_file else [])}
    if not folder.is_dir() or any(entry.name not in own for entry in folder.iterdir()):
        return
    for name in own:
        with contextlib.suppress(FileNotFoundError):
            (folder / name).unlink()
    if not existed:
        with contextlib.suppress(OSError):
            folder.rmdir()


def _take(folder: Path, kind: FolderKind, config: Config | None) -> None:
    """Under the folder's lock: the marker, the stale temporary files gone, the config compared
    (again: a writer may have finished between the check and the lock) and written."""
    mark(folder, kind)
    atomic.remove_stale(folder)  # what a killed writer left half-written (its process is gone)
    if config is None or kind.config_file is None:
        return
    recorded = compare(folder, kind, config)
    if recorded is not None:
        config = kind.grown(recorded, config) if kind.grown is not None else None
    if config is not None:
        atomic.write_text(folder / kind.config_file, json.dumps(config, indent=2) + "\n")


def mark(folder: Path, kind: FolderKind) -> Path:
    """Claim a folder without taking its lock: for writers started by a process that claimed it
    first and holds the lock around it (a suite's baselines folder, written by its workers at once:
    a second claimant would find the first one's half-written marker, a file tosca cannot tell from
    a stranger's)."""
    return folders.claim(folder, kind.name, kind.flag, kind.written_before)
