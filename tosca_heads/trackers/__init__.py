"""Experiment trackers: `--log mlflow`, `--log tensorboard` and any a plug-in registers
(`register_logger`), fed by `tracking.Tracking` with the same events whichever they are
(`events`), a sweep's or suite's parent continued across reruns (`ledger`).

Importing the package registers the built-in loggers and loads no torch or zarr (a tracker
plug-in and `tosca list` start light); `Tracking` and what feeds it load on first use."""

from __future__ import annotations

from tosca_foundation.lazy import lazy_names
from tosca_heads.trackers import mlflow_logger, tensorboard_logger  # noqa: F401 (registers)
from tosca_heads.trackers.logger_registry import (
    LOGGERS,
    Logger,
    LogTarget,
    Metric,
    parse_targets,
    register_logger,
)

__getattr__, _later = lazy_names(
    __name__,
    {"tracking": ("TrackedGroup", "TrackedRun", "Tracking", "end_failed", "method_result", "open_tracking")},
)
__all__ = ["LOGGERS", "LogTarget", "Logger", "Metric", "parse_targets", "register_logger", *_later]
