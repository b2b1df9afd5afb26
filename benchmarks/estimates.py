"""Time estimates against the real time: `--dry-run`'s plan, for a sweep, a small suite and an extraction, each run as a user runs it (the `tosca` command in a
subprocess, its progress as plain lines on stderr).

    python benchmarks/estimates.py                       # all three (about 3 minutes on 2 quiet cores)
    python benchmarks/estimates.py --only sweep,suite    # without the extraction
    python benchmarks/estimates.py --data ../shared/data/eurosat/EuroSAT-RGB.tar.gz --per-class 20

- sweep: 12 points (r 8, 16, 32 x l1 0, 5e-4 x seeds 0, 1) on a EuroSAT-shaped store of random
  features (10 classes, `--train` and `--test` images, dimension 1280), B0 Inc2, 2 workers;
- suite: one seed of TOSCA, SimpleCIL, RanPAC (M = `--ranpac-projection-dim`) and the joint probe on that store,
  2 workers;
- extraction: `tosca extract` of EfficientNet-Lite0 on `--per-class` images per class of the
  EuroSAT archive; its estimate is the one a suite's dry run prints for a store not extracted yet
  (featcache.extraction_estimate, asked through `tosca suite --dry-run --json`).

For each: the dry run's estimate, the real wall time and their ratio (within [0.5, 2] holds; the
mid-run "time left" lines this also weighed did not and are gone: docs/benchmarks.md "What earns
its lines"). Under the table, where the real time of the sweep and the suite went, beside the plan's parts (the
fixed costs measured, not assumed): `command` (the launch to the plan's first progress line),
`start-up` (to the first unit's end: the workers' start and their first work), `units` (the first
unit's end to the last's), `finish` (the tables, figures and the cluster's close, to the exit).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
DONE = re.compile(r"^(?P<label>[\w ]+): .*done in (?P<done>[\d:]+)")
EVERY = "0.5"  # seconds between progress lines: each unit's end is seen within half a second


def seconds(text: str) -> float:
    """'1:02:03' -> 3723."""
    total = 0.0
    for part in text.split(":"):
        total = 60 * total + float(part)
    return total


@dataclass
class Measured:
    what: str
    estimate: float
    real: float
    planned: dict[str, float] = field(default_factory=dict)  # the dry run's parts (seconds)
    spent: dict[str, float] = field(default_factory=dict)  # where the real time went (`timeline`)

    def row(self) -> str:
        return (
            f"| {self.what} | {self.estimate:.0f} s | {self.real:.0f} s | {self.estimate / self.real:.2f} |"
        )

    def pieces(self) -> str:
        """The real time by piece beside the plan's: what a fixed cost really is."""
        said = [f"{name} {seconds:.1f} s" for name, seconds in self.spent.items()]
        plan = ", ".join(f"{name} {seconds:.1f}" for name, seconds in self.planned.items() if seconds)
        return f"  {self.what}: real {', '.join(said)}; planned (s) {plan}"


def tosca(args: list[str], cwd: Path, every: str = "2") -> tuple[str, str, float, list[tuple[float, str]]]:
    """A `tosca` command as a user runs it: (stdout, stderr, wall seconds, each stderr line with the
    seconds since the command's launch at which it came)."""
    env = {**os.environ, "TOSCA_PROGRESS": "lines", "TOSCA_PROGRESS_EVERY": every, "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "cli.py"), *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    timed: list[tuple[float, str]] = []

    def read_stderr() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            timed.append((time.perf_counter() - start, line.rstrip("\n")))

    reader = threading.Thread(target=read_stderr)
    reader.start()
    stdout = process.stdout.read() if process.stdout else ""
    process.wait()
    reader.join()
    wall = time.perf_counter() - start
    stderr = "\n".join(line for _, line in timed)
    if process.returncode != 0:
        raise SystemExit(f"tosca {' '.join(args)} failed ({process.returncode}):\n{stderr[-3000:]}")
    return stdout, stderr, wall, timed


COUNT = re.compile(r"^(?P<label>[\w ]+): (?P<done>[\d,]+)/")


def timeline(timed: list[tuple[float, str]], label: str, wall: float) -> dict[str, float]:
    """Where the real time went, from the moments the progress lines of `label` came (TOSCA_PROGRESS_EVERY
    small): `command` (the launch to the plan's first line), `start-up` (to the first unit's end),
    `units` (the first unit's end to the last's), `finish` (the last unit's end to the exit)."""
    mine = [(at, m) for at, m in ((at, COUNT.match(line)) for at, line in timed) if m and m["label"] == label]
    if not mine:
        return {}
    planned = mine[0][0]
    first = next((at for at, m in mine if int(m["done"].replace(",", "")) > 0), wall)
    last = next((at for at, line in timed if DONE.match(line) and line.startswith(label + ":")), wall)
    return {"command": planned, "start-up": first - planned, "units": last - first, "finish": wall - last}


def measure_sweep(tmp: Path, store: Path) -> Measured:
    grid = ["--r", "8,16,32", "--l1", "0,5e-4", "--seeds", "0,1", "--init-cls", "2", "--increment", "2"]
    args = [
        "sweep",
        "--store",
        str(store),
        *grid,
        "--jobs",
        "2",
        "--device",
        "cpu",
        "--out",
        str(tmp / "sweep"),
    ]
    plan = json.loads(tosca([*args, "--dry-run", "--json"], tmp)[0])
    _, _, wall, timed = tosca(args, tmp, EVERY)
    what = "sweep, 12 points, 2 workers"
    found = Measured(what, plan["estimate_seconds"], wall)
    found.planned, found.spent = plan["parts_seconds"], timeline(timed, "sweep", wall)
    return found


def suite_file(tmp: Path, name: str, store: str, ranpac_projection_dim: int) -> Path:
    path = tmp / f"{name}.toml"
    path.write_text(
        f'name = "{name}"\nseeds = [0]\n[tosca]\nflags = {{}}\n[baselines]\n'
        f'methods = ["simplecil", "ranpac", "joint_probe"]\nranpac_projection_dim = {ranpac_projection_dim}\n'
        f'[[stores]]\nname = "s"\n{store}\ninit_cls = 2\nincrement = 2\n'
    )
    return path


def measure_suite(tmp: Path, store: Path, ranpac_projection_dim: int) -> Measured:
    spec = suite_file(tmp, "small", f'path = "{store}"', ranpac_projection_dim)
    args = ["suite", str(spec), "--jobs", "2", "--device", "cpu", "--out", str(tmp / "suite")]
    plan = json.loads(tosca([*args, "--dry-run", "--json"], tmp)[0])
    _, _, wall, timed = tosca(args, tmp, EVERY)
    what = f"small suite (TOSCA, SimpleCIL, RanPAC M={ranpac_projection_dim:,}, joint probe), 2 workers"
    found = Measured(what, plan["estimate_seconds"], wall)
    found.planned, found.spent = plan["parts_seconds"], timeline(timed, "suite", wall)
    return found


def measure_extraction(tmp: Path, data: Path, per_class: int) -> Measured:
    where = (
        f'model = "effnet_lite0"\ndataset = "eurosat"\ndata_root = "{data}"\nlimit_per_class = {per_class}'
    )
    spec = suite_file(tmp, "extract", where, 64)
    plan = json.loads(tosca(["suite", str(spec), "--dry-run", "--json", "--device", "cpu"], tmp)[0])
    estimate = plan["parts_seconds"]["extract"]
    args = ["extract", "--model", "effnet_lite0", "--dataset", "eurosat", "--data-root", str(data)]
    args += ["--limit-per-class", str(per_class), "--cache-dir", str(tmp / "cache"), "--device", "cpu"]
    _, _, wall, _ = tosca(args, tmp, EVERY)
    what = f"extraction, EfficientNet-Lite0, EuroSAT {per_class}/class from the archive"
    return Measured(what, estimate, wall)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default="sweep,suite,extraction")
    parser.add_argument("--train", type=int, default=2400, help="training images of the store (10 classes)")
    parser.add_argument("--test", type=int, default=600)
    parser.add_argument("--ranpac-projection-dim", type=int, default=4000)
    parser.add_argument(
        "--data", type=Path, default=ROOT.parent / "shared" / "data" / "eurosat" / "EuroSAT-RGB.tar.gz"
    )
    parser.add_argument("--per-class", type=int, default=20)
    args = parser.parse_args()
    chosen = args.only.split(",")
    print(f"load average at the start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        if {"sweep", "suite"} & set(chosen):
            from fit_speed import make_store

            store = make_store(tmp / "store.zarr", args.train, args.test, 1280, 10).path
        if "sweep" in chosen:
            rows.append(measure_sweep(tmp, store))
            print(rows[-1].row(), rows[-1].pieces(), sep="\n", flush=True)
        if "suite" in chosen:
            rows.append(measure_suite(tmp, store, args.ranpac_projection_dim))
            print(rows[-1].row(), rows[-1].pieces(), sep="\n", flush=True)
        if "extraction" in chosen:
            rows.append(measure_extraction(tmp, args.data.resolve(), args.per_class))
            print(rows[-1].row(), rows[-1].pieces(), sep="\n", flush=True)
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    print("| plan | dry-run estimate | real | ratio |")
    print("|---|---|---|---|")
    for row in rows:
        print(row.row())
    for row in rows:
        if row.spent:
            print(row.pieces())


if __name__ == "__main__":
    main()
