"""The named choices of `tosca extract` that a store records, and what each means.

Import-light (no torch, no torchvision) so that `tosca cache info` can describe a store without
loading the backbone side; `featcache.mapper` and `featcache.decoding` implement them.
"""

from __future__ import annotations

# name -> meaning; the first is the default on every device
PRECISIONS: dict[str, str] = {
    "fp32": "float32, TF32 matmuls and convolutions off (the default on every device)",
    "bf16": "bfloat16 autocast: matmuls and convolutions in bf16 with fp32 accumulation",
}
DEFAULT_PRECISION = "fp32"

# name -> meaning; `auto` picks one (featcache.decoding.resolve_decoder)
DECODERS: dict[str, str] = {
    "pil": "PIL decodes, converts to RGB, resizes and crops, in the loader workers (the reference)",
    "torch": "torchvision.io decodes JPEG/PNG, tensor ops resize and crop; on CUDA batched on the GPU (nvjpeg)",
}
