"""Experiment trackers: `--log mlflow`, `--log tensorboard` and any a plug-in registers
(`register_logger`), fed by `events.Tracking` with the same events whichever they are."""

from __future__ import annotations

from tosca_heads.experiments.trackers import mlflow_logger, tensorboard_logger  # noqa: F401 (registers)
from tosca_heads.experiments.trackers.events import TrackedRun, Tracking, end_failed, open_tracking
from tosca_heads.experiments.trackers.registry import (
    LOGGERS,
    Logger,
    LogTarget,
    Metric,
    parse_targets,
    register_logger,
)

__all__ = [
    "LOGGERS",
    "LogTarget",
    "Logger",
    "Metric",
    "TrackedRun",
    "Tracking",
    "end_failed",
    "open_tracking",
    "parse_targets",
    "register_logger",
]
