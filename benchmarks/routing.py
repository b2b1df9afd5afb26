"""Every router against the baselines, on real stores: EuroSAT and CIFAR-10 B0 Inc2, CIFAR-100 B0 Inc5.

    python benchmarks/routing.py [--data ../shared/data] [--cache cache] [--stores eurosat,cifar10,cifar100]

Stores are EfficientNet-Lite0 features (the packaged ImageNet weights) of per-class subsets of the
real archives, extracted on the CPU if missing (EuroSAT: 300 images per class and split, the
demo's store; CIFAR-10: 300; CIFAR-100: 100). TOSCA runs the paper preset; every router is read
from the same run. Baselines: SimpleCIL, RanPAC (M = 10,000), joint probe. Printed: A_last,
A_bar and routing accuracy per router, the share of the entropy-to-oracle gap each router
closes, and the seconds to route every test image after the last task, next to the seconds of
today's entropy routing (module outputs, logits, entropies).
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from datetime import date
from pathlib import Path

import numpy as np
import torch

from featcache.store import FeatureStore
from tosca_heads.applied.predict import RunPredictor
from tosca_heads.engine.kernels import normalize_rows
from tosca_heads.engine.outputs import module_outputs
from tosca_heads.method.protocol import StreamConfig
from tosca_heads.method.recipe import PRESETS
from tosca_heads.requests.plan import FitPlan
from tosca_heads.routers import ROUTERS, task_log_posterior
from tosca_heads.routers.scores import module_scores
from tosca_heads.running.baseline_runs import run_baseline
from tosca_heads.running.group import fit_run

STORES = {  # name: (archive under --data, images per class and split, init_cls, increment)
    "eurosat": ("eurosat/EuroSAT-RGB.tar.gz", 300, 2, 2),
    "cifar10": ("cifar10/cifar10-jpeg.tar.gz", 300, 2, 2),
    "cifar100": ("cifar100/cifar100-jpeg.tar.gz", 100, 5, 5),
}


def store_for(name: str, data: Path, cache: Path) -> FeatureStore:
    archive, per_class, _, _ = STORES[name]
    path = cache / name / f"effnet_lite0-{per_class}.zarr"
    if name == "eurosat":
        path = cache / name / f"effnet_lite0-demo{per_class}.zarr"  # the demo's store
    if not (path / "zarr.json").exists():
        from featcache.extraction import ExtractRequest, plan_extraction, run_extraction

        request = ExtractRequest(
            model="effnet_lite0",
            dataset=name,
            data_root=data / archive,
            cache_dir=cache,
            store=path,
            limit_per_class=per_class,
            chunk_size=256,
            device="cpu",
        )
        print(f"extracting {path} ...", flush=True)
        run_extraction(plan_extraction(request))
    return FeatureStore.open(path)


def routing_seconds(store: FeatureStore, stream_cfg: StreamConfig, run_dir: Path) -> dict[str, float]:
    """Seconds to route every test image after the last task: entropy (module outputs, logits,
    entropies, argmin) and, for each frozen-feature router, its own work on top (statistics to
    classifier, posteriors, and for fusion the entropies as well)."""
    run = RunPredictor(run_dir, int(store.identity["dataset"]["num_classes"])).load()  # loads, times nothing
    stream = run.stream_
    x = torch.from_numpy(np.asarray(store.features("test"), dtype=np.float32))
    w = normalize_rows(run.weight_[0]).T
    start = time.perf_counter()
    entropies = []
    for flat in run.modules_:
        unit = module_outputs(run.layout_, flat, x, normalize=True)[0]
        entropies.append(module_scores(run.sigma_ * unit @ w)[0])
    torch.stack(entropies).argmin(0)
    entropy_s = time.perf_counter() - start
    statistics = run.statistics_
    seconds = {"entropy": entropy_s}
    class_task = torch.from_numpy(stream.task_of(np.arange(stream.num_classes)))
    for name in ("ncm", "lda", "fusion"):
        start = time.perf_counter()
        model = statistics.model()
        if name == "ncm":
            class_task[model.ncm_scores(x).argmax(-1)]
        else:
            task_log_posterior(model.lda_log_posterior(x), class_task, stream.num_tasks).argmax(-1)
        seconds[name] = time.perf_counter() - start + (entropy_s if name == "fusion" else 0.0)
    seconds["energy"] = entropy_s  # the same module outputs, logsumexp instead of entropy
    return seconds


def store_names(text: str) -> list[str]:
    """--stores: names of STORES, comma-separated."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in STORES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown store {','.join(unknown) or text!r}: use any of {','.join(STORES)}"
        )
    return names


def argument_parser(description: str) -> argparse.ArgumentParser:
    """The options of this benchmark and of `routing_ceiling.py`, which reads the same stores and runs."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=Path(os.environ.get("TOSCA_DATA", "../shared/data")))
    parser.add_argument("--cache", type=Path, default=Path("cache"))
    parser.add_argument("--runs", type=Path, default=Path("runs") / "routing-benchmark")
    parser.add_argument(
        "--stores", type=store_names, default=list(STORES), help=f"comma-separated: {','.join(STORES)}"
    )
    parser.add_argument("--ranpac-projection-dim", type=int, default=10_000)
    return parser


def main() -> None:
    args = argument_parser(__doc__).parse_args()
    lines = [
        f"Measured {date.today()} on {platform.machine()} with {os.cpu_count()} cores, torch "
        f"{torch.__version__}; EfficientNet-Lite0 features, paper preset. Accuracies in %.",
        "",
        "| store | router | A_last | A_bar | routing acc | gap closed | route s (x entropy) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in args.stores:
        _, per_class, init_cls, increment = STORES[name]
        store = store_for(name, args.data, args.cache)
        stream = StreamConfig(init_cls, increment)
        run_dir = args.runs / f"{name}-{per_class}"
        start = time.perf_counter()
        result = fit_run(store, stream, PRESETS["paper"], None, run_dir, device="cpu")
        fit_s = time.perf_counter() - start
        routers = result.metrics()["routers"]
        seconds = routing_seconds(store, stream, run_dir)
        entropy, oracle = routers["entropy"]["A_last"], routers["oracle"]["A_last"]
        label = f"{name} ({per_class}/class, B0 Inc{increment}, {len(result.stages)} tasks)"
        for router in ROUTERS:
            m = routers[router]
            gap = (m["A_last"] - entropy) / (oracle - entropy) if oracle > entropy else float("nan")
            cost = seconds.get(router)
            cost_text = "–" if cost is None else f"{cost:.3f} ({cost / seconds['entropy']:.2f}x)"
            tag = "" if ROUTERS[router].honest else " (reference)"
            lines.append(
                f"| {label} | {router}{tag} | {100 * m['A_last']:.2f} | {100 * m['A_bar']:.2f} | "
                f"{100 * m['routing_accuracy']:.2f} | {100 * gap:.0f}% | {cost_text} |"
            )
        for baseline, params in (
            ("simplecil", {}),
            ("ranpac", {"projection_dim": args.ranpac_projection_dim}),
            ("joint_probe", {}),
        ):
            b = run_baseline(baseline, FitPlan.build(store, stream), **params)
            lines.append(
                f"| {label} | baseline {baseline} | {100 * b.metrics['A_last']:.2f} | {100 * b.metrics['A_bar']:.2f} "
                f"| – | – | fit {b.seconds:.1f} s |"
            )
        print(f"{name}: fit + evaluation of every router {fit_s:.1f} s", flush=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
