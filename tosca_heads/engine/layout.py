"""Where each LuCA parameter lives in a configuration's flat parameter vector.

A group stores all its LuCA parameters of one task in one `[G, size]` tensor, so the optimiser
updates them in a handful of whole-tensor operations. Weights are kept in the orientation the
step multiplies fastest (the transposes of `nn.Linear`'s `[out, in]`), and the bottleneck axes r
and s are padded with zeros to the group's largest. `pack`/`unpack` translate to and from the
state dict of the reference `LuCA` module, which is also what run files store.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tosca_heads.method.luca import FLOWS


@dataclass(frozen=True)
class Slot:
    """One parameter: its `LuCA` state-dict name, engine shape, offset in the flat vector, and
    which engine axis (if any) is a bottleneck padded to the group's largest r or s."""

    name: str
    shape: tuple[int, ...]
    offset: int
    transposed: bool  # the engine keeps nn.Linear's weight transposed
    pad_axis: int | None
    bottleneck: str | None  # "r" or "s"

    @property
    def size(self) -> int:
        n = 1
        for extent in self.shape:
            n *= extent
        return n


def _specs(
    dim: int, r: int, s: int, flow: str
) -> list[tuple[str, tuple[int, ...], bool, int | None, str | None]]:
    adapter = [
        ("down.weight", (dim, r), True, 1, "r"),  # W1ᵀ: x @ W1ᵀ
        ("down.bias", (r,), False, 0, "r"),
        ("up.weight", (r, dim), True, 0, "r"),  # W2ᵀ: a @ W2ᵀ
        ("up.bias", (dim,), False, None, None),
        ("norm.weight", (dim,), False, None, None),
        ("norm.bias", (dim,), False, None, None),
    ]
    calibrator = [
        ("cal_down.weight", (dim, s), True, 1, "s"),
        ("cal_up.weight", (s, dim), True, 0, "s"),
    ]
    if flow == "adapter":
        return adapter
    if flow == "calibrator":
        return calibrator
    return adapter + calibrator


class ParamLayout:
    """The flat layout of one flow's parameters at padded bottlenecks (r, s)."""

    def __init__(self, dim: int, r: int, s: int, flow: str):
        if flow not in FLOWS:
            raise ValueError(f"unknown flow {flow!r}: use one of {', '.join(FLOWS)}")
        self.dim, self.r, self.s, self.flow = dim, r, s, flow
        self.slots: dict[str, Slot] = {}
        offset = 0
        for name, shape, transposed, pad_axis, bottleneck in _specs(dim, r, s, flow):
            slot = Slot(name, shape, offset, transposed, pad_axis, bottleneck)
            self.slots[name] = slot
            offset += slot.size
        self.size = offset

    def views(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """`[G, size]` -> one `[G, *shape]` view per parameter (writes go through to `flat`)."""
        groups = flat.shape[0]
        return {
            name: flat[:, slot.offset : slot.offset + slot.size].view(groups, *slot.shape)
            for name, slot in self.slots.items()
        }

    def live(self, slot: Slot, r: int, s: int) -> tuple[slice, ...]:
        """The index of the unpadded part of a slot for a configuration with bottlenecks (r, s)."""
        index = [slice(None)] * len(slot.shape)
        if slot.pad_axis is not None:
            index[slot.pad_axis] = slice(0, r if slot.bottleneck == "r" else s)
        return tuple(index)

    def pack(self, state: dict[str, torch.Tensor], r: int, s: int) -> torch.Tensor:
        """A reference `LuCA` state dict (bottlenecks r, s <= the layout's) -> one flat row, zero-padded."""
        if r > self.r or s > self.s:
            raise ValueError(f"bottlenecks r={r}, s={s} exceed the layout's r={self.r}, s={self.s}")
        dtype = next(iter(state.values())).dtype
        flat = torch.zeros(self.size, dtype=dtype)
        for name, slot in self.slots.items():
            value = state[name].detach().to(dtype)
            value = value.T if slot.transposed else value
            target = flat[slot.offset : slot.offset + slot.size].view(slot.shape)
            target[self.live(slot, r, s)] = value
        return flat

    def state_shapes(self) -> dict[str, tuple[int, ...]]:
        """The reference `LuCA` state dict's shapes at this layout's bottlenecks (what run files hold)."""
        return {
            name: tuple(reversed(slot.shape)) if slot.transposed else slot.shape
            for name, slot in self.slots.items()
        }

    def unpack(self, flat: torch.Tensor, r: int, s: int) -> dict[str, torch.Tensor]:
        """One flat row -> the reference `LuCA` state dict at bottlenecks (r, s), padding dropped."""
        state = {}
        for name, slot in self.slots.items():
            value = flat[slot.offset : slot.offset + slot.size].view(slot.shape)[self.live(slot, r, s)]
            state[name] = (value.T if slot.transposed else value).contiguous().clone()
        return state
