"""What a large store costs stage 2: seconds of each part and peak memory, on a synthetic store of
any shape.

    python benchmarks/scale.py --train N --test M --dim D --classes C --increment I --views V
        --epochs E --dtype float16|float32 --dir DIR [--memory-budget BYTES] [--json]

Builds a class-structured store of that shape under DIR chunk by chunk (never whole in memory:
Gaussian class clusters, rows ordered by class as an image folder lists them, each view the clean
row plus noise), fits the paper preset's recipe with E epochs per task on an equal split of I
classes per task (the compiled step on the CPU, every router evaluated after each task), then
prints the store's size on disk and as float32, the seconds of each part and the peak resident
memory of the fit (the process's high-water mark, reset after the build). It deletes what it
built. Evaluation runs after each task, not beside the next one, so the parts add up to the fit.

The memory budget is tosca's (`--memory-budget`, TOSCA_MEMORY_BUDGET): a store over it is read
task by task. docs/benchmarks.md "Scale" holds the figures and what they say about how cost grows.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from featcache.store import FeatureStore, remove_store_tree
from featcache.store.format import made_up_identity
from tosca_foundation.limits import usable_cores
from tosca_foundation.units import human_bytes

CHUNK = 512  # rows per chunk, `tosca extract`'s default
CENTRES = 0.15  # the class centres' spread: about 80% of 1,000 classes apart by their true means at d 768
NOISE = 1.0  # a row's spread around its class centre
VIEW_NOISE = 0.1  # an augmented view's spread around its clean row


def class_labels(rows: int, classes: int) -> np.ndarray:
    """Balanced labels in class order (as an image folder's listing gives them)."""
    return (np.arange(rows, dtype=np.int64) * classes) // max(1, rows)


def build_store(
    path: Path, train: int, test: int, dim: int, classes: int, views: int, dtype: str, seed: int = 0
) -> FeatureStore:
    """A complete store of that shape, written one chunk at a time (a chunk's rows and views are
    all that is ever held)."""
    rng = np.random.default_rng(seed)
    centres = CENTRES * rng.standard_normal((classes, dim), dtype=np.float32)
    labels = {"train": class_labels(train, classes), "test": class_labels(test, classes)}
    identity = made_up_identity("synthetic", "synthetic", classes, labels, dim, views, seed)
    ids = {split: [str(i) for i in range(len(y))] for split, y in labels.items()}
    store = FeatureStore.create(path, identity, {}, ids, labels, dim, views, CHUNK, dtype)
    for split, y in labels.items():
        layout = store.layout(split)
        for chunk in range(layout.n_chunks):
            sl = layout.chunk_slice(chunk)
            rows = sl.stop - sl.start
            x = centres[y[sl]] + NOISE * rng.standard_normal((rows, dim), dtype=np.float32)
            v = None
            if split == "train" and views:
                v = x[None] + VIEW_NOISE * rng.standard_normal((views, rows, dim), dtype=np.float32)
            store.write_chunk(split, chunk, x, v)
    return store


def reset_peak_memory() -> bool:
    """Reset this process's resident high-water mark (Linux: clear_refs 5); False where it cannot."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_memory() -> int:
    """Bytes of this process's resident high-water mark (VmHWM; else ru_maxrss, since the start)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def fit_figures(store: FeatureStore, increment: int, epochs: int) -> dict[str, Any]:
    """The paper preset with `epochs` per task on every task, as `tosca fit` runs it (the room
    planned within the memory budget, the store held whole or read task by task): seconds of each
    part, peak memory, what the plan expected it to hold."""
    import torch

    from tosca_heads.engine.memory import require_room
    from tosca_heads.method.features import CachedFeatures
    from tosca_heads.method.protocol import StreamConfig
    from tosca_heads.method.recipe import recipe
    from tosca_heads.requests.plan import FitPlan
    from tosca_heads.running.group import fit_group

    warm = store.path.parent / "warm"  # a tiny fit first: every library and the compiled step loaded
    tiny = build_store(warm / "store.zarr", 96, 32, store.dim, 2, 0, "float32")
    fit_group(
        FitPlan.build(tiny, StreamConfig(1, 1), trains=[recipe("paper", {"epochs": 1})], dirs=[warm / "run"])
    )
    remove_store_tree(tiny.path)
    shutil.rmtree(warm)
    reset_peak_memory()
    floor = peak_memory()  # what the process holds before the fit (the libraries, the build's leftovers)
    start = time.perf_counter()
    train = recipe("paper", {"epochs": epochs})
    plan = FitPlan.build(
        store, StreamConfig(increment, increment), trains=[train], dirs=[store.path.parent / "run"]
    )
    stream, cpu = plan.stream, torch.device("cpu")
    task_rows = stream.largest_task_rows(plan.train_labels)
    room = require_room(store.shape, plan.trains, stream.num_tasks, cpu, task_rows, len(plan.held))
    source = CachedFeatures(store, room.features_budget).preload()
    read = time.perf_counter() - start
    (result,) = fit_group(plan, source=source, overlap=False)
    fit = time.perf_counter() - start
    routers = result.metrics()["routers"]
    evaluated = [
        (s.task + 1)
        * int(np.sum(plan.test_labels < stream.seen_classes(s.task)))
        * stream.seen_classes(s.task)
        for s in result.stages
    ]
    batches = [
        int(np.ceil(len(stream.rows_of_task(plan.train_labels, s.task)) / train.batch_size))
        for s in result.stages
    ]
    train_s = sum(s.stats["seconds"] for s in result.stages)
    return {
        "tasks": len(result.stages),
        "held": "in memory" if source.in_memory else "task by task",
        "memory_budget_bytes": room.budget,
        "one_task_bytes": room.memory.need(False),
        "whole_store_bytes": room.memory.need(True),
        "read_s": read,
        "train_s": train_s,
        "ms_per_step": 1e3 * train_s / (epochs * sum(batches)),
        "evaluate_s": sum(s.eval_seconds for s in result.stages),
        "evaluate_s_per_task": [s.eval_seconds for s in result.stages],
        # seconds per (module x test row x class) scored: flat if evaluation grows as tasks x rows seen x classes seen
        "evaluate_ns_per_unit": [
            1e9 * s.eval_seconds / max(1, u) for s, u in zip(result.stages, evaluated, strict=True)
        ],
        "fit_s": fit,
        "other_s": fit - read - train_s - sum(s.eval_seconds for s in result.stages),
        "peak_rss_bytes": peak_memory(),
        "process_peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "rss_before_fit_bytes": floor,
        "A_last_entropy": routers["entropy"]["A_last"],
        "A_last_oracle": routers["oracle"]["A_last"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--train", type=int, default=10_000, help="training rows")
    parser.add_argument("--test", type=int, default=5_000, help="test rows")
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--increment", type=int, default=100, help="classes per task (every task)")
    parser.add_argument("--views", type=int, default=0, help="augmented views per training row")
    parser.add_argument("--epochs", type=int, default=1, help="epochs per task (the paper: 20)")
    parser.add_argument("--dtype", choices=("float16", "float32"), default="float16")
    parser.add_argument(
        "--dir", type=Path, default=None, help="where the store is built (default: a temporary folder)"
    )
    parser.add_argument("--memory-budget", default=None, help="sets TOSCA_MEMORY_BUDGET for the fit")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the lines")
    args = parser.parse_args()
    if args.memory_budget is not None:
        os.environ["TOSCA_MEMORY_BUDGET"] = args.memory_budget
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="tosca-scale-", dir=args.dir))
    try:
        start = time.perf_counter()
        store = build_store(
            root / "store.zarr", args.train, args.test, args.dim, args.classes, args.views, args.dtype
        )
        built = time.perf_counter() - start
        float32 = (args.train * (1 + args.views) + args.test) * args.dim * 4
        facts = {
            "train": args.train,
            "test": args.test,
            "dim": args.dim,
            "classes": args.classes,
            "increment": args.increment,
            "views": args.views,
            "epochs": args.epochs,
            "dtype": args.dtype,
            "store_bytes_on_disk": store.size_bytes(),
            "store_bytes_float32": float32,
            "build_s": built,
            "machine": f"{platform.processor() or platform.machine()}, {usable_cores()} usable cores",
            "load_1min": os.getloadavg()[0],
            "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        }
        figures = {**facts, **fit_figures(store, args.increment, args.epochs)}
    finally:
        if (root / "store.zarr").exists():
            remove_store_tree(root / "store.zarr")
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(figures))
        return
    f = figures
    print(
        f"store {f['train']:,} train x {f['dim']} ({f['views']} views), {f['test']:,} test, "
        f"{f['classes']:,} classes, {f['dtype']}: {human_bytes(f['store_bytes_on_disk'])} on disk, "
        f"{human_bytes(f['store_bytes_float32'])} as float32"
    )
    print(
        f"fit: {f['tasks']} tasks of {f['increment']} classes, {f['epochs']} epoch(s) each, store held "
        f"{f['held']} (memory budget {human_bytes(f['memory_budget_bytes'])}; planned peak "
        f"{human_bytes(f['whole_store_bytes'])} held whole, {human_bytes(f['one_task_bytes'])} task by task)"
    )
    print(
        f"seconds: build {f['build_s']:.1f}, read {f['read_s']:.1f}, train {f['train_s']:.1f}, "
        f"evaluate {f['evaluate_s']:.1f}, the rest {f['other_s']:.1f} (prototypes, routers' statistics, "
        f"files and plots; the fit whole {f['fit_s']:.1f})"
    )
    print(
        f"peak RSS of the fit: {human_bytes(f['peak_rss_bytes'])} "
        f"({human_bytes(f['rss_before_fit_bytes'])} held before it; the process's, build included, "
        f"{human_bytes(f['process_peak_rss_bytes'])})"
    )
    print(
        f"SGD step {f['ms_per_step']:.2f} ms; evaluation per module x row x class seen (ns), by task: "
        + " ".join(f"{v:.2f}" for v in f["evaluate_ns_per_unit"])
    )
    print(f"A_last entropy {f['A_last_entropy']:.3f}, oracle {f['A_last_oracle']:.3f}")
    print(
        f"machine: {f['machine']}; started {f['started']}, load average {f['load_1min']:.1f} then, "
        f"{os.getloadavg()[0]:.1f} at the end"
    )


if __name__ == "__main__":
    main()
