"""What tests share besides fixtures: builders of tiny inputs (image trees, synthetic stores), the
real archives, the crash harness and the Dask worker preload. Importable as `support` (pyproject's
pytest `pythonpath`); fixtures built on them live in tests/conftest.py."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
