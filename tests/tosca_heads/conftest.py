"""The figures a test draws, kept open for it to read (tosca_heads.records.plots)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from tosca_heads.records import plots


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The figures drawn, kept open for the test to read."""
    kept: list[Any] = []
    original = plots.drawing

    @contextlib.contextmanager
    def drawing(path: Path, dpi: int, **subplots: Any) -> Any:
        with original(path, dpi, **subplots) as (fig, axes):
            kept.append(fig)
            yield fig, axes
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(fig).draw()  # closed by `drawing`: a canvas again, to measure what it drew

    monkeypatch.setattr(plots, "drawing", drawing)
    return kept
