"""`--log tensorboard[=LOGDIR]`: every run an event folder under LOGDIR (default runs/tensorboard),
a sweep's or suite's a folder with a sub-folder per point or cell, so `tensorboard --logdir LOGDIR`
shows them side by side and no two runs share an event file. Params go in as a text summary;
every run that holds no other (a fit, a sweep's point, a suite's cell, a baseline) is also an
HParams session: its settings with its status, so TensorBoard's HParams tab lists every point's
settings beside its final figures (its scalars, test and validation) and a sweep's points
compare there. No experiment summary is written: TensorBoard then builds the table from every
session in LOGDIR, where one written by any run would hide the others' settings. Files go in as a
text summary listing them, each .png as an image and each .md as text. Installed by
`pip install 'tosca[tensorboard]'`.

LOGDIR is checked before any work, nothing written (`trackers.places`): not a file, not inside a
zarr store or a tosca folder, writable; the default runs/tensorboard, and every run folder tosca
makes under LOGDIR, is never a link.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tosca_foundation import atomic
from tosca_heads.trackers.logger_registry import Logger, Metric, register_logger
from tosca_heads.trackers.places import TrackerFolder

FOLDER = "tensorboard"  # runs/tensorboard: the default LOGDIR
TEXT_LIMIT = 100_000  # a markdown file larger than this is listed, not copied in


@dataclass
class _Run:
    folder: Path
    writer: Any
    params: dict[str, Any] = field(default_factory=dict)
    children: int = 0


def folder_name(name: str) -> str:
    """A run's name as one folder name: letters, digits and . _ = , - kept, at most 120."""
    safe = re.sub(r"[^A-Za-z0-9._=,-]+", "_", name.replace(", ", ",")).strip("._") or "run"
    return safe[:120]


def _session_end(ok: bool) -> Any:
    """An HParams session's end, with its status (torch's `hparams` says success only)."""
    from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2

    status = api_pb2.STATUS_SUCCESS if ok else api_pb2.STATUS_FAILURE
    content = plugin_data_pb2.HParamsPluginData(
        session_end_info=plugin_data_pb2.SessionEndInfo(status=status), version=metadata.PLUGIN_DATA_VERSION
    )
    data = SummaryMetadata.PluginData(plugin_name=metadata.PLUGIN_NAME, content=content.SerializeToString())
    return Summary(
        value=[Summary.Value(tag=metadata.SESSION_END_INFO_TAG, metadata=SummaryMetadata(plugin_data=data))]
    )


@register_logger
class TensorBoardLogger(Logger):
    name = "tensorboard"
    summary = "TensorBoard event folders (tensorboard=LOGDIR; default runs/tensorboard)"
    extra = "tensorboard"

    def __init__(self, where: str | None, runs_root: Path) -> None:
        super().__init__(where, runs_root)
        import tensorboard  # noqa: F401  (torch's writer needs it: said now, not at the first run)
        from torch.utils.tensorboard import SummaryWriter

        self.writer_class = SummaryWriter
        self.folder = TrackerFolder(
            where, runs_root, FOLDER, "--log tensorboard", "TensorBoard's event files"
        )
        self.root = self.folder.path

    @property
    def place(self) -> str:
        return f"tensorboard={self.root.absolute()}"

    def opened_by(self) -> str:
        root = self.root.absolute()
        return f"TensorBoard runs in {root}: see them with `tensorboard --logdir {shlex.quote(str(root))}`"

    def _base(self, parent: _Run | None) -> Path:
        if parent is not None:
            return parent.folder
        return self.folder.make()  # LOGDIR, made at the first run (the default one never through a link)

    def start(self, name: str, parent: Any | None) -> _Run:
        base = self._base(parent)
        stem, n = folder_name(name), 1
        while True:  # a run logged again gets a folder of its own, made here and nowhere else
            folder = base / (stem if n == 1 else f"{stem}-{n}")
            try:
                os.mkdir(folder)
                break
            except FileExistsError:
                n += 1
        if parent is not None:
            parent.children += 1
        return _Run(folder, self.writer_class(log_dir=str(folder)))

    def params(self, run: Any, params: dict[str, str | int | float | bool]) -> None:
        run.params.update(params)
        rows = "\n".join(f"| {k} | {v} |" for k, v in params.items())
        run.writer.add_text("params", f"| parameter | value |\n|---|---|\n{rows}", 0)

    def metrics(self, run: Any, metrics: Sequence[Metric]) -> None:
        for m in metrics:
            run.writer.add_scalar(m.key, m.value, m.step)

    def artifacts(self, run: Any, files: Sequence[Path]) -> None:
        import numpy as np
        from PIL import Image

        run.writer.add_text("files", "\n".join(f"- {Path(f).name}" for f in files), 0)
        for path in files:
            if path.suffix == ".png":
                with Image.open(path) as image:
                    pixels = np.asarray(image.convert("RGB"))
                run.writer.add_image(f"files/{path.name}", pixels, 0, dataformats="HWC")
            elif path.suffix == ".md" and path.stat().st_size <= TEXT_LIMIT:
                run.writer.add_text(
                    f"files/{path.name}", path.read_text(encoding="utf-8", errors="replace"), 0
                )

    def end(self, run: Any, ok: bool) -> None:
        from torch.utils.tensorboard.summary import hparams

        if run.params and not run.children:  # an HParams session: one row of the HParams tab
            run.writer.file_writer.add_summary(hparams(run.params, {})[1])  # its settings (no experiment)
            run.writer.file_writer.add_summary(_session_end(ok))
        run.writer.add_text("status", "finished" if ok else "failed", 0)
        run.writer.close()

    # ------------------------------------------------------------------ resumed sweeps and suites

    def handle_id(self, run: Any) -> str | None:
        return run.folder.relative_to(self.root).as_posix()

    def reopen(self, ident: str) -> Any | None:
        folder = self.root / ident
        if not folder.is_dir() or folder.is_symlink() or ".." in Path(ident).parts:
            return None
        atomic.make_folders(folder, self.root)  # none of it through a link
        children = sum(1 for p in folder.iterdir() if p.is_dir() and not p.is_symlink())
        return _Run(folder, self.writer_class(log_dir=str(folder)), children=children)

    def discard(self, run: Any) -> None:
        """A child whose logging a kill cut short: its event files (regular files tosca's writer
        made; nothing else is touched) and its folder when that leaves it empty."""
        run.writer.close()
        for entry in run.folder.iterdir():
            if stat.S_ISREG(entry.lstat().st_mode):
                entry.unlink()
        if not any(run.folder.iterdir()):
            run.folder.rmdir()
