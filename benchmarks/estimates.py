"""Time estimates against the real time: `--dry-run`'s plan and the mid-run "about M:SS left" lines,
for a sweep, a small suite and an extraction, each run as a user runs it (the `tosca` command in a
subprocess, its progress as plain lines on stderr).

    python benchmarks/estimates.py                       # all three (about 10 minutes on 2 quiet cores)
    python benchmarks/estimates.py --only sweep,suite    # without the extraction
    python benchmarks/estimates.py --data ../shared/data/eurosat/EuroSAT-RGB.tar.gz --per-class 20

- sweep: 12 points (r 8, 16, 32 x l1 0, 5e-4 x seeds 0, 1) on a EuroSAT-shaped store of random
  features (10 classes, `--train` and `--test` images, dimension 1280), B0 Inc2, 2 workers;
- suite: one seed of TOSCA, SimpleCIL, RanPAC (M = `--ranpac-m`) and the joint probe on that store,
  2 workers;
- extraction: `tosca extract` of EfficientNet-Lite0 on `--per-class` images per class of the
  EuroSAT archive; its estimate is the one a suite's dry run prints for a store not extracted yet
  (featcache.estimate, asked through `tosca suite --dry-run --json`).

For each: the dry run's estimate, the real wall time and their ratio; and over the progress lines
printed while it ran, the worst ratio of "time left" to the time really left, for the lines from
the plan ("(planned)") and for those from the measured rate (left out: lines with less than 10 s
really left, where a second of rounding is a large ratio). A ratio within [0.5, 2] holds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
LINE = re.compile(
    r"^(?P<label>[\w ]+): .*?(?P<elapsed>[\d:]+) elapsed, about (?P<left>[\d:]+) left(?P<plan> \(planned\))?"
)
DONE = re.compile(r"^(?P<label>[\w ]+): .*done in (?P<done>[\d:]+)")
MIN_LEFT = 10.0


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
    planned_worst: float | None  # worst ratio of a "(planned)" line's time left to the time really left
    rate_worst: float | None  # the same for the lines from the measured rate
    lines: int

    def row(self) -> str:
        def worst(value: float | None) -> str:
            return "–" if value is None else f"{value:.2f}"

        return (
            f"| {self.what} | {self.estimate:.0f} s | {self.real:.0f} s | {self.estimate / self.real:.2f} | "
            f"{worst(self.planned_worst)} | {worst(self.rate_worst)} | {self.lines} |"
        )


def tosca(args: list[str], cwd: Path) -> tuple[str, str, float]:
    """A `tosca` command as a user runs it: (stdout, stderr, wall seconds)."""
    env = {**os.environ, "TOSCA_PROGRESS": "lines", "TOSCA_PROGRESS_EVERY": "2", "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(ROOT / "cli.py"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"tosca {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout, done.stderr, wall


def worst_ratios(stderr: str, labels: tuple[str, ...]) -> tuple[float | None, float | None, int]:
    """The worst (farthest from 1, as a factor) ratio of time left to time really left, over the
    progress lines of the pieces of work named `labels`: (planned lines, rate lines, lines read)."""
    ends = {m["label"]: seconds(m["done"]) for m in map(DONE.match, stderr.splitlines()) if m}
    worst: dict[bool, float] = {}
    read = 0
    for match in map(LINE.match, stderr.splitlines()):
        if not match or match["label"] not in labels or match["label"] not in ends:
            continue
        really = ends[match["label"]] - seconds(match["elapsed"])
        if really < MIN_LEFT:
            continue
        read += 1
        ratio = max(seconds(match["left"]), 1.0) / really
        planned = bool(match["plan"])
        if abs(_log(ratio)) > abs(_log(worst.get(planned, 1.0))):
            worst[planned] = ratio
    return worst.get(True), worst.get(False), read


def _log(x: float) -> float:
    import math

    return math.log(max(x, 1e-9))


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
    _, err, wall = tosca(args, tmp)
    return Measured(
        "sweep, 12 points, 2 workers", plan["estimate_seconds"], wall, *worst_ratios(err, ("sweep",))
    )


def suite_file(tmp: Path, name: str, store: str, ranpac_m: int) -> Path:
    path = tmp / f"{name}.toml"
    path.write_text(
        f'name = "{name}"\nseeds = [0]\n[tosca]\nflags = {{}}\n[baselines]\n'
        f'methods = ["simplecil", "ranpac", "joint_probe"]\nranpac_m = {ranpac_m}\n'
        f'[[stores]]\nname = "s"\n{store}\ninit_cls = 2\nincrement = 2\n'
    )
    return path


def measure_suite(tmp: Path, store: Path, ranpac_m: int) -> Measured:
    spec = suite_file(tmp, "small", f'path = "{store}"', ranpac_m)
    args = ["suite", str(spec), "--jobs", "2", "--device", "cpu", "--out", str(tmp / "suite")]
    plan = json.loads(tosca([*args, "--dry-run", "--json"], tmp)[0])
    _, err, wall = tosca(args, tmp)
    what = f"small suite (TOSCA, SimpleCIL, RanPAC M={ranpac_m:,}, joint probe), 2 workers"
    return Measured(what, plan["estimate_seconds"], wall, *worst_ratios(err, ("suite",)))


def measure_extraction(tmp: Path, data: Path, per_class: int) -> Measured:
    where = (
        f'model = "effnet_lite0"\ndataset = "eurosat"\ndata_root = "{data}"\nlimit_per_class = {per_class}'
    )
    spec = suite_file(tmp, "extract", where, 64)
    plan = json.loads(tosca(["suite", str(spec), "--dry-run", "--json", "--device", "cpu"], tmp)[0])
    estimate = plan["parts_seconds"]["extract"]
    args = ["extract", "--model", "effnet_lite0", "--dataset", "eurosat", "--data-root", str(data)]
    args += ["--limit-per-class", str(per_class), "--cache-dir", str(tmp / "cache"), "--device", "cpu"]
    _, err, wall = tosca(args, tmp)
    what = f"extraction, EfficientNet-Lite0, EuroSAT {per_class}/class from the archive"
    return Measured(what, estimate, wall, *worst_ratios(err, ("extract train", "extract test")))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default="sweep,suite,extraction")
    parser.add_argument("--train", type=int, default=2400, help="training images of the store (10 classes)")
    parser.add_argument("--test", type=int, default=600)
    parser.add_argument("--ranpac-m", type=int, default=4000)
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
            print(rows[-1].row(), flush=True)
        if "suite" in chosen:
            rows.append(measure_suite(tmp, store, args.ranpac_m))
            print(rows[-1].row(), flush=True)
        if "extraction" in chosen:
            rows.append(measure_extraction(tmp, args.data.resolve(), args.per_class))
            print(rows[-1].row(), flush=True)
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    print(
        "| plan | dry-run estimate | real | ratio | worst planned 'left' / real left | worst measured | lines |"
    )
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(row.row())


if __name__ == "__main__":
    main()
