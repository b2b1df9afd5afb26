"""A suite folder's manifest.json: every cell with its store (fingerprint, sample lists' hash), full
configuration, the code that made it, its seconds and the one command that reruns it alone. The
cells themselves are run and baselines folders (records.run, records.baseline); the tables are
the suite's outputs (suite.tables), not records read back.

Format: the manifest records `records.FORMAT`; one of another format (or none) is refused in one
line (`records.check_format`).
"""

from __future__ import annotations

import contextlib
import json
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

import torch

from tosca_foundation import atomic
from tosca_foundation.errors import UserError
from tosca_foundation.files import read_json
from tosca_foundation.version import __version__
from tosca_heads.records import FORMAT, check_format
from tosca_heads.records.claim import FolderKind

MANIFEST = "manifest.json"
# a suite folder: no folder of it was written before markers (suites always carried one), and no config
# file of its own (each cell's folder records its cell's, compared when the cells are planned)
SUITE_FOLDER = FolderKind(name="suite", flag="--out", noun="suite folder")


def git_commit() -> str | None:
    """The commit of this checkout (`+changes` when it has uncommitted ones), None outside git."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        root = Path(__file__).resolve().parents[3]
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        )
        if done.returncode == 0:
            dirty = subprocess.run(
                ["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, timeout=10
            )
            return done.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")
    return None


def plain(value: Any) -> Any:
    """A configuration as JSON holds it (paths as text, tuples as lists)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def write_manifest(
    out: Path, suite: str, spec: dict[str, Any], stores: dict[str, Any], cells: list[dict[str, Any]]
) -> Path:
    """manifest.json of the suite folder `out`: the suite's name and spec, its stores and its cells
    (as suite.run describes them), with the machine and code that made it."""
    manifest = {
        "format": FORMAT,
        "suite": suite,
        "made": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "machine": f"{platform.node()}: {platform.machine()}, {platform.processor() or '?'}",
        "code": {
            "tosca": __version__,
            "git": git_commit(),
            "torch": torch.__version__,
            "python": platform.python_version(),
        },
        "spec": plain(spec),
        "stores": stores,
        "cells": cells,
    }
    path = Path(out) / MANIFEST
    atomic.write_text(path, json.dumps(manifest, indent=2, default=str) + "\n")
    return path


def read_manifest(out: Path) -> dict[str, Any]:
    """A suite folder's manifest, its format checked; one line for a missing or damaged one."""
    path = Path(out) / MANIFEST
    payload = read_json(path, "suite manifest", "run `tosca suite` on the folder to write it again")
    check_format(path, payload.get("format"), "suite manifest")
    if not isinstance(payload.get("cells"), list):
        raise UserError(f"suite manifest {path} has no list of cells: it was edited or damaged")
    return payload


def check_manifest(out: Path) -> None:
    """Refuse, in one line, a suite folder whose manifest is of another format (written before
    tosca's first release, or by a newer tosca): none of its cells is read or written over."""
    if (Path(out) / MANIFEST).exists():
        read_manifest(out)
