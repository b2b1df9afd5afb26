"""Experiment trackers: `--log mlflow`, `--log tensorboard` and any a plug-in registers
(`register_logger`), fed by `tracking.Tracking` with the same events whichever they are
(`events`), a sweep's or suite's parent continued across reruns (`ledger`)."""

from __future__ import annotations

from tosca_heads.experiments.trackers import mlflow_logger, tensorboard_logger  # noqa: F401 (registers)
from tosca_heads.experiments.trackers.registry import (
    LOGGERS,
    Logger,
    LogTarget,
    Metric,
    parse_targets,
    register_logger,
)
from tosca_heads.experiments.trackers.tracking import (
    TrackedGroup,
    TrackedRun,
    Tracking,
    end_failed,
    method_result,
    open_tracking,
)

__all__ = [
    "LOGGERS",
    "LogTarget",
    "Logger",
    "Metric",
    "TrackedGroup",
    "TrackedRun",
    "Tracking",
    "end_failed",
    "method_result",
    "open_tracking",
    "parse_targets",
    "register_logger",
]
