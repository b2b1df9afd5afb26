"""The same fit as a plain eager PyTorch re-implementation would run it: the yardstick
`fit_speed.py` times beside the engine.

Autograd through the reference `LuCA` modules and the cosine classifier, `torch.optim.SGD` with
the recipe's momentum, weight decay and cosine schedule, L1 as a penalty in the loss, and after
each task every module re-evaluated on every seen test row (logits, entropy routing). On `threads`
PyTorch threads (fit_speed.py: one by default; PyTorch's default of one per core made these small
operations slower on the 2-core machine, docs/benchmarks.md). Timing only: its seeds are not the
engine's, so its accuracies are close to the engine's, not equal.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from featcache.store import FeatureStore
from tosca_heads.method.classifier import cosine_logits, new_rows
from tosca_heads.method.luca import LuCA, new_module
from tosca_heads.method.protocol import StreamConfig
from tosca_heads.method.recipe import TrainConfig


def _train_task(
    module: LuCA,
    weight: torch.Tensor,
    sigma: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    config: TrainConfig,
) -> None:
    params = list(module.parameters())
    optimizer = torch.optim.SGD(
        [*params, weight, sigma], lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay
    )
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, config.epochs, eta_min=config.eta_min)
    for _ in range(config.epochs):
        order = torch.randperm(len(x))
        for begin in range(0, len(x), config.batch_size):
            batch = order[begin : begin + config.batch_size]
            loss = F.cross_entropy(cosine_logits(module(x[batch]), weight, sigma), y[batch])
            loss = loss + config.l1 * sum(p.abs().sum() for p in params)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        schedule.step()


@torch.no_grad()
def _accuracy(
    modules: list[LuCA], weight: torch.Tensor, sigma: torch.Tensor, x: torch.Tensor, y: torch.Tensor
) -> float:
    """Entropy routing: every module on every row, the module of least entropy answers."""
    logits = torch.stack([cosine_logits(module(x), weight, sigma) for module in modules])  # [M, n, C]
    p = torch.softmax(logits, -1)
    entropy = -(p * torch.log(p + 1e-9)).sum(-1)
    chosen = entropy.argmin(0)
    predictions = logits.argmax(-1).gather(0, chosen.unsqueeze(0)).squeeze(0)
    return float((predictions == y).float().mean())


def eager_fit(
    store: FeatureStore, stream_cfg: StreamConfig, config: TrainConfig, threads: int = 1
) -> tuple[float, float]:
    """(seconds, A_last under entropy routing) of the whole fit, reading the store included."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _eager_fit(store, stream_cfg, config)
    finally:
        torch.set_num_threads(before)


def _eager_fit(store: FeatureStore, stream_cfg: StreamConfig, config: TrainConfig) -> tuple[float, float]:
    start = time.perf_counter()
    torch.manual_seed(config.seed)
    stream = stream_cfg.task_stream(store.shape.classes)
    config = config.resolved(store.dim)
    x_train = torch.from_numpy(store.features("train")).float()
    x_test = torch.from_numpy(store.features("test")).float()
    y_train = torch.from_numpy(stream.remap(store.labels("train")))
    y_test = torch.from_numpy(stream.remap(store.labels("test")))
    weight, sigma = torch.zeros(0, store.dim), torch.ones(1, requires_grad=True)
    modules: list[LuCA] = []
    accuracy = 0.0
    for task in range(stream.num_tasks):
        classes = stream.task_classes(task)
        rows = torch.from_numpy(stream.rows_of_task(y_train.numpy(), task))
        x, y = x_train[rows], y_train[rows]
        module = new_module(store.dim, config.r, config.s, config.flow, task)
        weight = torch.cat([weight.detach(), new_rows(len(classes), store.dim, task == 0)]).requires_grad_()
        _train_task(module, weight, sigma, x, y, config)
        with torch.no_grad():
            outputs = module(x)
            for c in classes:
                weight[c] = outputs[y == c].mean(0)
        modules.append(module)
        seen = y_test < stream.seen_classes(task)
        accuracy = _accuracy(modules, weight.detach(), sigma.detach(), x_test[seen], y_test[seen])
    return time.perf_counter() - start, accuracy
