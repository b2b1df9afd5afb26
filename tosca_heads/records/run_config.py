"""What a run was asked (its cell's asked.json, `records.cell`), in one place: what a plan writes
there (`make_run_config`), how it is read back (`read_run_config`), what makes two configs
different runs (`config_differences`), and the run folder's kind for the one claim (`RUN_FOLDER`:
`records.claim`), which compares the two before a run folder is written and refuses a run edited
since it finished, or written before runs were cells.

asked.json holds the resolved recipe, the task split, the validation split (when one is held
out), the store's path and fingerprint, the feature dimension and views, the protocol in words and
the versions that change numbers (`cell.versions`: a run resumed under another torch is another
run); "format" (`records.FORMAT`). The store's path, the format and the protocol are
informational: a moved store still matches.

Import-light (no torch): the plan builds configs before the engine loads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tosca_foundation.errors import UserError
from tosca_foundation.files import read_json
from tosca_foundation.fingerprints import identity_differences
from tosca_foundation.folders import marked_kind
from tosca_heads.method.protocol import StreamConfig, ValidationConfig
from tosca_heads.method.recipe import TrainConfig
from tosca_heads.records import INFORMATIONAL, cell, check_format, store_block, validation_record
from tosca_heads.records.claim import FolderKind

CONFIG = cell.ASKED
BEFORE_CELLS = "config.json"  # what a run folder written before runs were cells holds instead
RUN_CONFIG_KEYS = ("store", "store_fingerprint", "stream", "train", "feature_dim")


def make_run_config(
    store: Any,
    stream: StreamConfig,
    validation: ValidationConfig,
    held_ids: Sequence[str],
    protocol: dict[str, Any],
    train: TrainConfig,
) -> dict[str, Any]:
    """config.json of a resolved recipe on a store and split. The validation split is recorded only
    when one is held out, so a run without one has the config (and the default folder name) it
    had before validation existed."""
    config = {
        **store_block(store),
        "feature_dim": store.dim,
        "views": store.views,
        "stream": asdict(stream),
        "train": asdict(train),
    }
    if validation.enabled:
        config["validation"] = validation_record(validation, held_ids)
    config["protocol"] = protocol
    config["versions"] = cell.versions()
    return config


def read_run_config(run_dir: Path) -> dict[str, Any]:
    """A run's asked.json, refused in one line when the folder is no run, a run written before runs
    were cells, or the file is damaged."""
    path = Path(run_dir) / CONFIG
    if marked_kind(Path(run_dir)) == "scenario-run":
        raise UserError(
            f"run {run_dir} was fit under a scenario: `tosca eval`, `tosca routers` and `tosca predict` read it, "
            "this needs a class-incremental run (`tosca fit` without --scenario)"
        )
    if written_before_cells(run_dir):
        raise UserError(
            f"run {run_dir} was written before runs were kept as cells (a {BEFORE_CELLS}, no {CONFIG}): "
            "delete it and fit it again"
        )
    if not path.is_file():
        raise UserError(f"not a run directory: {run_dir} (no {CONFIG})")
    config = read_json(path, "run config", "it was edited or damaged")
    missing = [k for k in RUN_CONFIG_KEYS if k not in config]
    if missing:
        raise UserError(f"{path} lacks {', '.join(missing)}: not an {CONFIG} written by tosca fit")
    for key in ("store", "store_fingerprint"):
        if not isinstance(config[key], str):
            raise UserError(f"{path} records a {key} that is not text; the file was edited or damaged")
    check_format(path, config.get("format"), "run config")
    return config


def config_differences(existing: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Differences that matter: not the store's path (a moved store still matches), the format, nor
    the protocol in words."""
    return identity_differences(
        {k: v for k, v in existing.items() if k not in INFORMATIONAL},
        {k: v for k, v in new.items() if k not in INFORMATIONAL},
    )


def written_before_cells(folder: Path) -> bool:
    """A run folder of the format before cells: a config.json and no asked.json."""
    return (Path(folder) / BEFORE_CELLS).is_file() and not (Path(folder) / CONFIG).exists()


def is_run_dir(folder: Path) -> bool:
    """A run folder written before folders carried tosca's marker: it holds a tosca asked.json, or
    a config.json of the format before cells (`check_run_files` then refuses it in one line)."""
    if written_before_cells(folder):
        return True
    try:
        read_run_config(folder)
    except UserError:
        return False
    return True


def check_run_files(folder: Path) -> None:
    """Before a run folder is written again: a run of the format before cells is refused in one
    line, and a finished one (its done.json there) must be whole (`cell.check_whole`): a file
    edited or damaged since it finished is one line, never written over. A run never finished is
    resumed from its state files (each checked as it is read)."""
    if written_before_cells(folder):
        read_run_config(folder)  # its one line
    if (Path(folder) / cell.DONE).exists():
        cell.check_whole(folder, EDITED)


EDITED = "restore it, or delete the run and fit it again"


RUN_FOLDER = FolderKind(
    name="run",
    flag="--run",
    noun="run",
    written_before=is_run_dir,
    config_file=CONFIG,
    read_config=read_run_config,
    differences=config_differences,
    check_files=check_run_files,
)
