"""Where a padded parameter layout (tosca_heads.engine.layout) holds padding, for tests that check
padding stays zero."""

from __future__ import annotations

import torch

from tosca_heads.engine.layout import ParamLayout


def padding_mask(layout: ParamLayout, r: int, s: int) -> torch.Tensor:
    """True at the flat positions that pad a configuration with bottlenecks (r, s)."""
    mask = torch.ones(layout.size, dtype=torch.bool)
    for slot in layout.slots.values():
        mask[slot.offset : slot.offset + slot.size].view(slot.shape)[layout.live(slot, r, s)] = False
    return mask
