"""Module outputs on many rows (evaluation, prototypes, predictions), by the compiled library on a
CPU where training uses it too, else by `kernels.luca_forward`; the two agree to float rounding."""

from __future__ import annotations

import torch

from tosca_heads.engine import native
from tosca_heads.engine.kernels import luca_forward, normalize_rows
from tosca_heads.engine.layout import ParamLayout


def module_outputs(
    layout: ParamLayout,
    modules: torch.Tensor,
    x: torch.Tensor,
    normalize: bool,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """modules [G, size] (flat, padded) on rows x [n, d] shared by all -> [G, n, d]; unit rows
    (F.normalize) when `normalize`; written into `out` when given (rows of a cache)."""
    shape = (modules.shape[0], x.shape[0], layout.dim)
    if out is not None and tuple(out.shape) != shape:
        raise ValueError(f"out must be {list(shape)} (configurations, rows, dim), not {list(out.shape)}")
    if modules.device.type == "cpu" and x.device.type == "cpu" and native.use_native(modules.device):
        return native.forward(layout, modules, x, normalize, torch.empty(shape) if out is None else out)
    result = luca_forward(layout.views(modules), x, layout.flow)
    result = normalize_rows(result) if normalize else result
    if out is None:
        return result
    out.copy_(result)
    return out
