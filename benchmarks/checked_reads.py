"""What checking every chunk against its checksum costs stage 2, on a real store.

    python benchmarks/checked_reads.py STORE [--repeats 3]

Times reading the store's arrays as stage 2 does (`featcache.store.read_split`: every chunk file
present, every chunk's sha256 compared with the one recorded when it was written) against reading
them plainly, and puts the difference beside one paper-preset fit on the same store (its default
task split, the compiled step, evaluation of every router). The goal: under 5% of the fit.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from datetime import date
from pathlib import Path

import numpy as np

from featcache.store import FeatureStore, check_readable, read_split
from tosca_foundation.limits import usable_cores
from tosca_heads.method.features import CachedFeatures
from tosca_heads.method.protocol import default_stream
from tosca_heads.method.recipe import PRESETS
from tosca_heads.running.group import fit_run


def _plain(store: FeatureStore) -> None:
    store = FeatureStore.open(store.path)
    for split in ("train", "test"):
        np.asarray(store.group[f"{split}/features"][:])
        if split == "train" and store.views:
            np.asarray(store.group["train/views"][:])


def _checked(store: FeatureStore) -> None:
    store = FeatureStore.open(store.path)  # the attrs are checked once per opened store: open afresh
    check_readable(store)
    for split in ("train", "test"):
        read_split(store, split)


def _best(fn: object, store: FeatureStore, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(store)  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    store = FeatureStore.open(args.store)
    plain = _best(_plain, store, args.repeats)
    checked = _best(_checked, store, args.repeats)
    ident = store.identity["dataset"]
    stream = default_stream(ident["name"], int(ident["num_classes"]))
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        fit_run(store, stream, PRESETS["paper"], None, Path(tmp) / "run", source=CachedFeatures(store))
        fit = time.perf_counter() - start
    cost = checked - plain
    print(
        f"store {args.store}: train {store.layout('train').n:,} x {store.dim}, test {store.layout('test').n:,}, "
        f"views {store.views}"
    )
    print(f"machine: {platform.machine()}, {usable_cores()} usable cores, {date.today()}")
    print(f"plain read     {plain:7.3f} s (best of {args.repeats})")
    print(f"checked read   {checked:7.3f} s (best of {args.repeats})")
    print(f"checking costs {cost:7.3f} s = {100 * cost / fit:.1f}% of one paper-preset fit ({fit:.2f} s)")


if __name__ == "__main__":
    main()
