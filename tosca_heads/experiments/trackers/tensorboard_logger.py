"""`--log tensorboard[=LOGDIR]`: every run an event folder under LOGDIR (default runs/tensorboard),
a sweep's or suite's a folder with a sub-folder per point or cell, so `tensorboard --logdir LOGDIR`
shows them side by side and no two runs share an event file. Params go in as a text summary and
as TensorBoard's hparams; files as a text summary listing them, each .png as an image and each .md
as text. Installed by `pip install 'tosca[tensorboard]'`."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from featcache.foundation.folders import check_output
from tosca_heads.experiments.trackers.registry import Logger, Metric, register_logger

FINAL = ("A_last/", "A_bar/", "forgetting/", "routing/")  # the metrics the hparams view shows
TEXT_LIMIT = 100_000  # a markdown file larger than this is listed, not copied in


@dataclass
class _Run:
    folder: Path
    writer: Any
    params: dict[str, Any] = field(default_factory=dict)
    last: dict[str, float] = field(default_factory=dict)


def folder_name(name: str) -> str:
    """A run's name as one folder name: letters, digits and . _ = , - kept, at most 120."""
    safe = re.sub(r"[^A-Za-z0-9._=,-]+", "_", name.replace(", ", ",")).strip("._") or "run"
    return safe[:120]


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
        self.root = Path(where) if where else Path(runs_root) / "tensorboard"
        check_output(self.root, "--log tensorboard=")  # as every output folder: featcache.foundation.folders

    def start(self, name: str, parent: Any | None) -> _Run:
        base = self.root if parent is None else parent.folder
        folder, n = base / folder_name(name), 1
        while folder.exists():  # a run logged again gets a folder of its own
            n += 1
            folder = base / f"{folder_name(name)}-{n}"
        folder.mkdir(parents=True)
        return _Run(folder, self.writer_class(log_dir=str(folder)))

    def params(self, run: Any, params: dict[str, str | int | float | bool]) -> None:
        run.params.update(params)
        rows = "\n".join(f"| {k} | {v} |" for k, v in params.items())
        run.writer.add_text("params", f"| parameter | value |\n|---|---|\n{rows}", 0)

    def metrics(self, run: Any, metrics: Sequence[Metric]) -> None:
        for m in metrics:
            run.writer.add_scalar(m.key, m.value, m.step)
            run.last[m.key] = m.value

    def artifacts(self, run: Any, files: Sequence[Path]) -> None:
        import numpy as np
        from PIL import Image

        run.writer.add_text("files", "\n".join(f"- {Path(f).resolve()}" for f in files), 0)
        for path in files:
            if path.suffix == ".png":
                with Image.open(path) as image:
                    pixels = np.asarray(image.convert("RGB"))
                run.writer.add_image(f"files/{path.name}", pixels, 0, dataformats="HWC")
            elif path.suffix == ".md" and path.stat().st_size <= TEXT_LIMIT:
                run.writer.add_text(f"files/{path.name}", path.read_text(errors="replace"), 0)

    def end(self, run: Any, ok: bool) -> None:
        from torch.utils.tensorboard.summary import hparams

        if run.params:
            final = {k: v for k, v in run.last.items() if k.startswith(FINAL)}
            for summary in hparams(run.params, final):
                run.writer.file_writer.add_summary(summary)
        run.writer.add_text("status", "finished" if ok else "failed", 0)
        run.writer.close()
