"""The engine's one error of its own: numbers that went bad (a user-facing stop, not a bug)."""

from __future__ import annotations

from tosca_foundation.errors import UserError


class NumericalError(UserError):
    """NaN or inf in features or in a training loss: stopped, with the task and epoch named."""
