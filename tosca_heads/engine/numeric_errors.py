"""The engine's one error of its own: numbers that went bad (a user-facing stop, not a bug)."""

from __future__ import annotations

from tosca_foundation.errors import UserError
from tosca_heads.method.scale import cosine_reach


class NumericalError(UserError):
    """NaN or inf in features or in a training loss: stopped, with the task and epoch named."""


def scale_refusal(what: str, peak: float, dim: int) -> NumericalError:
    """One line for features whose scale TOSCA's float32 cosine cannot hold (`scale.cosine_reach`)."""
    low, high = cosine_reach(dim)
    return NumericalError(
        f"{what} reach {peak:.3g} (a row's largest entry), outside [{low:.0e}, {high:.2g}] where TOSCA's "
        "float32 modules and cosine classifier can hold their squared norm: every answer would tie. Rescale "
        "the features (the scale-free baselines, simplecil, fecam, randumb and the routers' statistics, run "
        "at any scale)"
    )
