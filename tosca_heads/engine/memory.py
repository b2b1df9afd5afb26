"""How much memory training takes: how many configurations one engine run can hold (1 on the CPU,
as many as fit a GPU), and whether a run fits at all.

On a CPU, stacking configurations gains nothing (a step's matmuls already fill the core); sweeps
spread points over processes instead. On a GPU one step of G configurations costs about as much
as one of a single configuration until G is in the hundreds, so a sweep groups as many points
as the device memory holds. Before any run trains, `require_room` refuses one that cannot fit
(a bottleneck of a million, a batch of a hundred million) in one line naming what it would need.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from featcache.foundation.errors import UserError
from featcache.foundation.limits import human_bytes, require_memory
from featcache.store import StoreShape
from tosca_heads.engine.layout import ParamLayout

FLOAT = 4
ACTIVATIONS_PER_SAMPLE = 40  # [b, d]-sized tensors alive during one step (forward, backward, temporaries)
GPU_SHARE = 0.6  # of the free memory, for the group (the rest: the store, evaluation cache, allocator slack)
EVALUATION_CACHE_CPU = 1 << 30  # module outputs kept across stages on a CPU (engine/evaluate.py)


def bytes_per_configuration(shape: StoreShape, tasks: int, r: int, s: int, flow: str, batch: int) -> int:
    """An upper estimate of one configuration's memory through a whole run."""
    dim, classes = shape.dim, shape.classes
    size = ParamLayout(dim, r, s, flow).size
    modules = size * (tasks + 6)  # frozen modules + the current one, its gradient, momentum, temporaries
    head = classes * dim * 8  # rows, gradient, momentum, normalised rows, temporaries
    step = min(batch, shape.train) * (dim + r + s + classes) * ACTIVATIONS_PER_SAMPLE
    # per module and test row: entropy and energy (float) and the prediction (long) = 4 floats;
    # plus the [n_test, d] outputs of the module being evaluated
    evaluation = tasks * shape.test * 4 + shape.test * dim
    return FLOAT * (modules + head + step + evaluation)


def features_bytes(shape: StoreShape) -> int:
    """The store's arrays held as float32 (on the device that trains)."""
    return (shape.train * (1 + shape.views) + shape.test) * shape.dim * FLOAT


def require_room(shape: StoreShape, configs: Sequence[Any], tasks: int, device: torch.device) -> None:
    """Refuse, in one line, a group of resolved recipes that cannot fit this device's memory."""
    need = sum(bytes_per_configuration(shape, tasks, c.r, c.s, c.flow, c.batch_size) for c in configs)
    what = (
        f"training {len(configs)} configuration(s) of r up to {max(c.r for c in configs)}, "
        f"s up to {max(c.s for c in configs)}, batch up to {max(c.batch_size for c in configs)}"
    )
    hint = "lower --r, --s or --batch-size"
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        if need + features_bytes(shape) > free:
            raise UserError(
                f"{what} would need {human_bytes(need + features_bytes(shape))} of GPU memory; "
                f"{human_bytes(free)} is free on {device}: {hint}"
            )
        return
    cache = min(EVALUATION_CACHE_CPU, len(configs) * tasks * shape.test * shape.dim * FLOAT)
    require_memory(what, need + features_bytes(shape) + cache, hint)


def default_group_size(
    shape: StoreShape, points: Sequence[Any], device: torch.device, sharing: int = 1
) -> int:
    """1 on the CPU; on CUDA, as many of these points as fit in GPU_SHARE of the free memory,
    divided among the `sharing` processes that will train on this GPU at once (each also holds
    its own copy of the features)."""
    if device.type != "cuda" or not points:
        return 1

    def need(point: Any) -> int:
        stream = point.stream.task_stream(shape.classes)  # each point's own split: more tasks, more modules
        train = point.train.resolved(shape.dim)
        return bytes_per_configuration(
            shape, stream.num_tasks, train.r, train.s, train.flow, train.batch_size
        )

    per_point = max(need(p) for p in points)
    free, _ = torch.cuda.mem_get_info(device)
    each = (free - sharing * features_bytes(shape)) * GPU_SHARE / max(1, sharing)
    return max(1, min(len(points), int(each) // per_point))
