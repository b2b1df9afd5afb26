"""The `lda` router's covariance shrinkage: today's validated choice against scikit-learn's
Ledoit-Wolf and OAS (each computed from the kept statistics alone), routing accuracy on the
validation split (what chooses) and on test, on the routing benchmark's stores.

    python benchmarks/shrinkage.py [--data ../shared/data] [--cache cache] [--stores eurosat,cifar10,cifar100]

Only the frozen-feature statistics are built (no module is trained): `lda`'s routing depends on
nothing else. The validation split is a sweep's default (10% of each class's training images,
seed 0); its rows never enter the statistics. Printed: routing accuracy after the last task and
averaged over the tasks, on validation and on test, and the last task's shrinkage.
"""

from __future__ import annotations

import numpy as np
import torch
from routing import STORES, argument_parser, store_for  # the routing benchmark's stores

from tosca_heads.method.class_statistics import SHRINKAGES, ClassStatistics
from tosca_heads.method.protocol import HELD_OUT, StreamConfig, ValidationConfig
from tosca_heads.routers import task_log_posterior

VALIDATION = ValidationConfig(0.1, 0)


def routing_curves(store, init_cls: int, increment: int, shrinkage: str) -> dict[str, list[float]]:
    """Per task, `lda`'s routing accuracy on validation and on test, and the shrinkage used."""
    stream = StreamConfig(init_cls, increment).task_stream(store.shape.classes)
    train_x = torch.from_numpy(np.asarray(store.features("train"), dtype=np.float32))
    labels = stream.remap(store.labels("train"))
    held = VALIDATION.carve(store.labels("train"))
    train_labels = labels.copy()
    train_labels[held] = HELD_OUT
    splits = {
        "validation": (train_x[held], labels[held]),
        "test": (
            torch.from_numpy(np.asarray(store.features("test"), dtype=np.float32)),
            stream.remap(store.labels("test")),
        ),
    }
    statistics = ClassStatistics(store.dim, shrinkage=shrinkage)
    curves: dict[str, list[float]] = {"validation": [], "test": [], "shrinkage": []}
    class_task = torch.from_numpy(stream.task_of(np.arange(stream.num_classes)))
    for task in range(stream.num_tasks):
        rows = stream.rows_of_task(train_labels, task)
        statistics.partial_fit(train_x[rows], train_labels[rows], stream.task_classes(task))
        model = statistics.model()
        for split, (x, y) in splits.items():
            seen = stream.rows_seen(y, task)
            posterior = model.lda_log_posterior(x[seen])
            routed = task_log_posterior(posterior, class_task[: stream.seen_classes(task)], task + 1)
            truth = torch.from_numpy(stream.task_of(y[seen]))
            curves[split].append(float((routed.argmax(-1) == truth).double().mean()))
        curves["shrinkage"].append(statistics.shrinkage_[-1])
    return curves


def main() -> None:
    args = argument_parser(__doc__).parse_args()
    torch.set_num_threads(1)
    lines = [
        "| store | shrinkage | validation: last (mean) | test: last (mean) | last task's shrinkage |",
        "|---|---|---|---|---|",
    ]
    for name in args.stores:
        _, per_class, init_cls, increment = STORES[name]
        store = store_for(name, args.data, args.cache)
        for shrinkage in SHRINKAGES:
            c = routing_curves(store, init_cls, increment, shrinkage)
            lines.append(
                f"| {name} {per_class}/class | {shrinkage} | {100 * c['validation'][-1]:.2f} "
                f"({100 * np.mean(c['validation']):.2f}) | {100 * c['test'][-1]:.2f} "
                f"({100 * np.mean(c['test']):.2f}) | {c['shrinkage'][-1]:.3f} |"
            )
            print(lines[-1], flush=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
