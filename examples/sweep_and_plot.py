"""A sweep over the bottleneck r and the L1 weight from Python, and a plot of A_last.

    python examples/sweep_and_plot.py --store cache/eurosat/effnet_lite0-demo300.zarr [--out runs/example-sweep]

Each point of the grid is a full multi-task run on the cached features (seconds each on a CPU);
the sweep resumes in --out when run again. The figure is test A_last under the paper's entropy
router and the best honest one, `lda`, against r, one line per L1 weight; the configuration printed
is the one the sweep chose on its validation split (sweep.json), never the best test figure.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

import tosca_heads


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=Path("runs/example-sweep"))
    parser.add_argument("--r", default="8,16,32,48")
    parser.add_argument("--l1", default="0,5e-4")
    parser.add_argument("--epochs", type=int, default=20)
    args = parser.parse_args()
    grid = {"r": [int(v) for v in args.r.split(",")], "l1": [float(v) for v in args.l1.split(",")]}
    frame = tosca_heads.sweep(args.store, grid, args.out, epochs=args.epochs)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5), sharey=True)
    for ax, router in zip(axes, ("entropy", "lda"), strict=True):
        mine = frame[(frame["router"] == router) & (frame["split"] == "test")]
        for l1, points in mine.groupby("l1"):
            points = points.sort_values("r")
            ax.plot(points["r"], 100 * points["A_last"], marker="o", label=f"L1 = {l1:g}")
        ax.set_title(f"router {router}")
        ax.set_xlabel("bottleneck r")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test A_last (%)")
    axes[1].legend()
    fig.tight_layout()
    figure = args.out / "a_last_by_r.png"
    fig.savefig(figure, dpi=110)
    chosen = json.loads((args.out / "sweep.json").read_text())["chosen"]
    flags = ", ".join(f"{k}={v}" for k, v in chosen["chosen"]["flags"].items())
    print(
        f"{frame['key'].nunique()} points; chosen on {chosen['split']} under {chosen['router']}: {flags}, "
        f"test A_last {100 * chosen['chosen']['A_last']:.2f}"
    )
    print(f"figure: {figure}")


if __name__ == "__main__":
    main()
