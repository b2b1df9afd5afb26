"""The decoders by name (`DECODERS`, `--decode NAME`), light: `tosca list`, a refused name and a
plug-in's `register_decoder` need no torch. The built-in decoders live in `featcache.images.decoding`
and are imported when one is first used; each is declared here with what it does (the meanings a
store's description shows, `featcache.store.describe`)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from featcache.store.meanings import DECODERS as MEANINGS
from tosca_foundation.registry import Registry

if TYPE_CHECKING:
    from featcache.images.transforms import Picture
    from featcache.sources.datasets import SplitSamples


@dataclass(frozen=True)
class Decoder:
    """A named decoder: how a worker opens one sample, and whether batches can decode on a GPU."""

    name: str
    description: str
    # (samples, i, the short side it will be resized to: checked from the header with the pixel limit)
    open: Callable[[SplitSamples, int, int | None], Picture]
    decodes_on_device: bool


DECODERS: Registry[Decoder] = Registry("decoder", "featcache.images.decoder_names:DECODERS", "--decode")
for _name in ("pil", "torch"):
    DECODERS.declare(_name, f"featcache.images.decoding:{_name.upper()}", MEANINGS[_name])


def register_decoder(decoder: Decoder, module: str | None = None, aliases: tuple[str, ...] = ()) -> Decoder:
    """Add a decoder under its name (and `aliases`); `module` registers it (default: the caller's).
    `decoder.open(samples, i, short_side)` gives sample i as a PIL image or a uint8 [3, H, W] tensor."""
    caller = module or sys._getframe(1).f_globals.get("__name__")
    return DECODERS.add(decoder.name, decoder, decoder.description, module=caller, aliases=aliases)
