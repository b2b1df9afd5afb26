"""How many configurations one engine run can hold: 1 on the CPU, as many as fit a GPU's memory.

On a CPU, stacking configurations gains nothing (a step's matmuls already fill the core); sweeps
spread points over processes instead. On a GPU one step of G configurations costs about as much
as one of a single configuration until G is in the hundreds, so a sweep groups as many points
as the device memory holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from featcache.store import FeatureStore
from tosca_heads.engine.layout import ParamLayout

FLOAT = 4
ACTIVATIONS_PER_SAMPLE = 40  # [b, d]-sized tensors alive during one step (forward, backward, temporaries)
GPU_SHARE = 0.6  # of the free memory, for the group (the rest: the store, evaluation cache, allocator slack)


def bytes_per_configuration(
    store: FeatureStore, tasks: int, classes: int, r: int, s: int, flow: str, batch: int
) -> int:
    """An upper estimate of one configuration's device memory through a whole run."""
    dim = store.dim
    size = ParamLayout(dim, r, s, flow).size
    modules = size * (tasks + 6)  # frozen modules + the current one, its gradient, momentum, temporaries
    head = classes * dim * 8  # rows, gradient, momentum, normalised rows, temporaries
    step = batch * dim * ACTIVATIONS_PER_SAMPLE
    n_test = store.layout("test").n
    # per module and test row: entropy and energy (float) and the prediction (long) = 4 floats;
    # plus the [n_test, d] outputs of the module being evaluated
    evaluation = tasks * n_test * 4 + n_test * dim
    return FLOAT * (modules + head + step + evaluation)


def default_group_size(
    store: FeatureStore, points: Sequence[Any], device: torch.device, sharing: int = 1
) -> int:
    """1 on the CPU; on CUDA, as many of these points as fit in GPU_SHARE of the free memory,
    divided among the `sharing` processes that will train on this GPU at once (each also holds
    its own copy of the features)."""
    if device.type != "cuda" or not points:
        return 1
    num_classes = int(store.identity["dataset"]["num_classes"])

    def need(point: Any) -> int:
        stream = point.stream.task_stream(num_classes)  # each point's own split: more tasks, more modules
        train = point.train.resolved(store.dim)
        return bytes_per_configuration(
            store, stream.num_tasks, num_classes, train.r, train.s, train.flow, train.batch_size
        )

    per_point = max(need(p) for p in points)
    free, _ = torch.cuda.mem_get_info(device)
    train, test = store.layout("train").n, store.layout("test").n
    features = (train * (1 + store.views) + test) * store.dim * FLOAT  # held on the device too
    each = (free - sharing * features) * GPU_SHARE / max(1, sharing)
    return max(1, min(len(points), int(each) // per_point))
