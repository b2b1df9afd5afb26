"""Files that appear whole or not at all: written beside their target, flushed, then renamed over it.

A run or sweep folder is read back by resumes, `tosca eval` and `tosca routers`; a process killed
mid-write must leave the previous version or none, never a half-written file that loads.
Import-light: torch and safetensors are imported by the one writer that needs them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; when the block ends without error, fsync it and
    rename it onto `path` (atomic on POSIX). On error the temporary file is removed."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: str | Path, text: str) -> None:
    with replacing(path) as tmp:
        tmp.write_text(text)


def write_safetensors(
    path: str | Path, tensors: dict[str, Any], metadata: dict[str, str] | None = None
) -> None:
    from safetensors.torch import save_file

    with replacing(path) as tmp:
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp), metadata=metadata)


def save_figure(figure: object, path: str | Path, dpi: int) -> None:
    with replacing(path) as tmp:
        figure.savefig(tmp, dpi=dpi, format=Path(path).suffix.lstrip("."))  # type: ignore[attr-defined]


def remove_stale(folder: str | Path) -> list[Path]:
    """Delete the temporary files in `folder` whose writer process is gone (killed mid-write);
    a live writer's file is left alone. Returns what was removed."""
    removed = []
    for tmp in Path(folder).glob(".*.tmp"):
        pid = tmp.name.rsplit(".", 2)[-2]
        if pid.isdigit() and not _alive(int(pid)):
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True
