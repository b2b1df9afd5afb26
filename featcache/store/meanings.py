"""The named choices a store records (preprocessing policy, precision, decoder) and their meanings
in words: import-light, so that naming and checking them (a store's description, `tosca list`,
`tosca extract`'s flags before its plan line) never loads the backbone side or zarr."""

from __future__ import annotations

from tosca_foundation.errors import UserError

POLICIES = ("pilot", "timm")  # preprocessing: the paper's, or timm's data config for the model

# name -> meaning; the first is the default on every device
PRECISIONS: dict[str, str] = {
    "fp32": "float32, TF32 matmuls and convolutions off (the default on every device)",
    "bf16": "bfloat16 autocast: matmuls and convolutions in bf16 with fp32 accumulation",
}
# name -> meaning; `auto` picks one (featcache.images.decoding.resolve_decoder)
DECODERS: dict[str, str] = {
    "pil": "PIL decodes, converts to RGB, resizes and crops, in the loader workers (the reference)",
    "torch": "torchvision.io decodes JPEG (PIL the rest), tensor ops resize and crop; on CUDA batched on the GPU (nvjpeg)",
}


def resolve_precision(precision: str) -> str:
    """The same on every device: never a silent switch to a lower precision."""
    if precision not in PRECISIONS:
        raise UserError(
            f"unknown --precision {precision!r}: use fp32 (the default, on every device) or bf16 (autocast)"
        )
    return precision
