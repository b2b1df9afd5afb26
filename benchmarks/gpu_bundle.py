"""What a borrowed GPU machine needs beyond its image, in one folder of at most 48 MiB.

    python benchmarks/gpu_bundle.py [--out gpu-bundle] [--python 3.12] [--limit-mib 48]

The machine lent for checks has torch, timm, numpy and pytest, no network, and takes 64 MiB of
files beside the work tree. Which wheels it needs is found by an import check, not a list:

1. `import torch, timm, numpy, pytest` in a fresh process: the distributions that imports
   load are the image's own;
2. `benchmarks/gpu_check.py --tiny` runs whole with every module it imports recorded, and with
   the heavy optional packages below made unimportable: a step that needs one fails, and so
   does the bundle, with one line naming the package. `make test-heavy` (CI) runs this same
   check, `import_check()` (tests/test_benchmarks.py), so a new import on a GPU path fails there
   first;
3. the wheels are the distributions of step 2 less those of step 1, downloaded for the image's
   Python (cp312 manylinux x86_64) at the versions installed here, without their dependencies
   (step 2 already holds every one that is imported).

Beside them: a subset of the real EuroSAT archive (the first images of each class, in the
archive's own layout) and `manifest.json` (each file with its size and sha256, what the import
check found, what was left out and why). dask-cuda is added when its wheels fit the limit.
Exit code 1, with the sizes, when the bundle does not fit.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zlib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("TOSCA_DATA", ROOT.parent / "shared" / "data"))
IMAGE_HAS = ("torch", "timm", "numpy", "pytest")
# optional packages too big for the bundle, and why the check does without them
LEFT_OUT = {
    "pyarrow": "parquet output only (55 MB); the check writes no parquet",
    "pandas": "tables of finished sweeps only; the check trains and scores without them",
    "matplotlib": "plots of finished runs only; the check writes no run folders",
}
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64")
SUBSET_PER_CLASS = 60
MiB = 1 << 20
IMPORT_CHECK_SECONDS = 1200  # gpu_check.py --tiny: about 2 min on 2 busy cores

RECORDER = """
import atexit, os, sys
from importlib.machinery import PathFinder
_blocked = set(filter(None, os.environ.get("TOSCA_BUNDLE_BLOCK", "").split(",")))
class _Hiding(PathFinder):
    # the path finder, blind to the blocked packages: to find_spec and import they are absent
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.split(".")[0] in _blocked:
            return None
        return PathFinder.find_spec(name, path, target)
sys.meta_path[:] = [_Hiding if finder is PathFinder else finder for finder in sys.meta_path]
def _record():
    names = sorted({n.split(".")[0] for n in list(sys.modules) if not n.startswith("_")})
    with open(os.path.join(os.environ["TOSCA_BUNDLE_LOG"], f"{os.getpid()}.txt"), "w") as fh:
        fh.write("\\n".join(names))
atexit.register(_record)
_exit = os._exit
def _record_then_exit(code):
    # a forked child (a data loader's worker) leaves through os._exit, which skips atexit
    try:
        _record()
    finally:
        _exit(code)
os._exit = _record_then_exit
"""


def distributions(modules: set[str]) -> set[str]:
    """The installed distributions that provide these top-level modules."""
    provided = metadata.packages_distributions()
    return {dist for module in modules for dist in provided.get(module, [])}


def imported_by(code: list[str], env: dict[str, str], block: set[str], timeout: float) -> set[str]:
    """Top-level modules loaded by a command and every Python process it starts, with the
    packages of `block` unimportable in each of them."""
    with tempfile.TemporaryDirectory() as tmp:
        hook, log = Path(tmp) / "hook", Path(tmp) / "log"
        hook.mkdir()
        log.mkdir()
        (hook / "sitecustomize.py").write_text(RECORDER)
        paths = [str(hook), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
        run_env = {**env, "PYTHONPATH": os.pathsep.join(paths), "TOSCA_BUNDLE_LOG": str(log)}
        run_env["TOSCA_BUNDLE_BLOCK"] = ",".join(sorted(block))
        done = subprocess.run(code, cwd=ROOT, env=run_env, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            sys.exit(
                f"error: the import check failed (exit {done.returncode}): {' '.join(code[1:])}\n"
                f"{done.stdout[-8000:]}{done.stderr[-3000:]}{needs_left_out(done.stdout + done.stderr)}"
            )
        return {line for f in log.glob("*.txt") for line in f.read_text().splitlines()}


def needs_left_out(output: str) -> str:
    """The line that says which left-out package a failed check tried to import, if one did."""
    missing = sorted({name for name in LEFT_OUT if f"No module named '{name}'" in output})
    if not missing:
        return ""
    why = "; ".join(f"{name}: {LEFT_OUT[name]}" for name in missing)
    return (
        f"\nerror: a GPU path imports {', '.join(missing)}, which the bundle leaves out ({why}): "
        "import it where the table or plot is made, not on the path the check runs (docs/gpu.md)"
    )


@dataclass(frozen=True)
class ImportCheck:
    """What the image's own imports load, and what `gpu_check.py --tiny` loads with the left-out
    packages hidden: the distributions each provides."""

    image: frozenset[str]
    loaded: frozenset[str]

    @property
    def needed(self) -> list[str]:
        """The bundle's wheels: what the check loads beyond the image (tosca is the work tree)."""
        return sorted(self.loaded - self.image - {"tosca"}, key=str.lower)


def import_check(out: Path | None = None, timeout: float = IMPORT_CHECK_SECONDS) -> ImportCheck:
    """Steps 1 and 2 above, as the GPU image sees the check: the bundle is made from this, and CI
    rehearses the check through it. `out`: where gpu_check.py writes its table (kept for a test)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "OUT": ""}
    print("import check: what the image provides ...", flush=True)
    image = [sys.executable, "-c", f"import {', '.join(IMAGE_HAS)}"]
    provided = distributions(imported_by(image, env, set(), 300))
    print("import check: what `gpu_check.py --tiny` loads (a few minutes) ...", flush=True)
    check = [sys.executable, "benchmarks/gpu_check.py", "--tiny", "--bundle", "/nonexistent"]
    check += ["--budget", "900", *(["--out", str(out)] if out is not None else [])]
    loaded = distributions(imported_by(check, env, set(LEFT_OUT), timeout))
    return ImportCheck(frozenset(provided), frozenset(loaded))


def estimated_bytes(dists: list[str]) -> int:
    """The wheels' size without downloading them: each installed file deflated as a wheel stores it
    (compiled code is built for this Python, not the image's: within a few % of the real wheels)."""
    total = 0
    for name in dists:
        for file in metadata.distribution(name).files or []:
            if "__pycache__" in file.parts or file.suffix == ".pyc":
                continue  # compiled at install time, not in the wheel
            path = Path(str(file.locate()))
            if path.is_file():
                total += len(zlib.compress(path.read_bytes(), 6))
    return total


def download(dists: list[tuple[str, str]], folder: Path, python: str) -> None:
    """Wheels for the image's Python at these exact versions, without their dependencies."""
    pins = [f"{name}=={version}" for name, version in dists]
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
    command += ["--python-version", python, *(f"--platform={p}" for p in PLATFORMS), "--platform=any"]
    done = subprocess.run([*command, "-d", str(folder), *pins], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"error: pip download failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")


def wheel_dist(path: Path) -> str:
    return path.name.split("-")[0].replace("_", "-").lower()


def subset(archive: Path, out: Path, per_class: int) -> int:
    """The first `per_class` images of each EuroSAT class (sorted by name), as 2750/<Class>/<file>."""
    chosen: dict[str, list[tarfile.TarInfo]] = {}
    with tarfile.open(archive) as tar:
        members = sorted((m for m in tar if m.isfile() and m.name.endswith(".jpg")), key=lambda m: m.name)
        for member in members:
            parts = Path(member.name).parts
            if len(parts) == 3 and parts[0] == "2750":
                kept = chosen.setdefault(parts[1], [])
                if len(kept) < per_class:
                    kept.append(member)
        with tarfile.open(out, "w:gz") as small:
            for kept in chosen.values():
                for member in kept:
                    data = tar.extractfile(member).read()  # type: ignore[union-attr]
                    info = tarfile.TarInfo(member.name)
                    info.size, info.mtime, info.mode = len(data), 0, 0o644
                    small.addfile(info, io.BytesIO(data))
    return sum(len(kept) for kept in chosen.values())


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=ROOT / "gpu-bundle")
    parser.add_argument("--python", default="3.12", help="the GPU image's Python (wheels are built for it)")
    parser.add_argument("--limit-mib", type=float, default=48.0)
    args = parser.parse_args()
    archive = DATA / "eurosat" / "EuroSAT-RGB.tar.gz"
    if not archive.exists():
        print(f"error: no EuroSAT archive at {archive} (set TOSCA_DATA)", file=sys.stderr)
        return 2
    found = import_check()
    needed = found.needed
    pinned = [(name, metadata.version(name)) for name in needed]
    shutil.rmtree(args.out, ignore_errors=True)
    wheels = args.out / "wheels"
    wheels.mkdir(parents=True)
    print(f"downloading {len(pinned)} wheel(s) for Python {args.python} ...", flush=True)
    download(pinned, wheels, args.python)
    images = subset(archive, args.out / "eurosat-subset.tar.gz", SUBSET_PER_CLASS)
    left_out = [{"dist": name, "why": why} for name, why in LEFT_OUT.items()]
    limit = int(args.limit_mib * MiB)
    extra = dask_cuda(args.out, args.python, limit, set(found.image | found.loaded))
    left_out += extra
    files = sorted(wheels.glob("*.whl"))
    versions = dict(pinned)
    manifest = {
        "made": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "made_on": f"{platform.node()} (Python {platform.python_version()})",
        "for_python": args.python,
        "platforms": list(PLATFORMS),
        "import_check": {
            "image_provides": sorted(found.image, key=str.lower),
            "check_loads": sorted(found.loaded, key=str.lower),
            "blocked": sorted(LEFT_OUT),
        },
        "wheels": [
            {
                "file": f.name,
                "dist": wheel_dist(f),
                "version": versions.get(wheel_dist(f), f.name.split("-")[1]),
                "bytes": f.stat().st_size,
                "sha256": sha256(f),
            }
            for f in files
        ],
        "data": {
            "file": "eurosat-subset.tar.gz",
            "images": images,
            "bytes": (args.out / "eurosat-subset.tar.gz").stat().st_size,
            "sha256": sha256(args.out / "eurosat-subset.tar.gz"),
            "from": f"{archive.name}, the first {SUBSET_PER_CLASS} images of each class",
        },
        "left_out": left_out,
        "limit_bytes": limit,
    }
    total = sum(w["bytes"] for w in manifest["wheels"]) + manifest["data"]["bytes"]
    manifest["total_bytes"] = total
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    for wheel in sorted(manifest["wheels"], key=lambda w: -w["bytes"]):
        print(f"  {wheel['bytes'] / MiB:6.2f} MiB  {wheel['file']}")
    print(f"  {manifest['data']['bytes'] / MiB:6.2f} MiB  eurosat-subset.tar.gz ({images} images)")
    print(f"bundle {args.out}: {total / MiB:.1f} MiB of at most {args.limit_mib:g} MiB")
    if total > limit:
        print(f"error: the bundle is {total / MiB:.1f} MiB, over {args.limit_mib:g} MiB", file=sys.stderr)
        return 1
    return 0


def dask_cuda(out: Path, python: str, limit: int, have: set[str]) -> list[dict[str, str]]:
    """dask-cuda and the dependencies the image and the bundle lack, when they fit; else why not."""
    with tempfile.TemporaryDirectory() as tmp:
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--only-binary=:all:",
            "--python-version",
            python,
        ]
        command += [*(f"--platform={p}" for p in PLATFORMS), "--platform=any", "-d", tmp, "dask-cuda"]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            return [{"dist": "dask-cuda", "why": "no wheel installs for this Python and platform"}]
        lowered = {h.lower().replace("_", "-") for h in have}
        new = [w for w in Path(tmp).glob("*.whl") if wheel_dist(w) not in lowered]
        size = sum(w.stat().st_size for w in new)
        used = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
        if used + size > limit:
            return [{"dist": "dask-cuda", "why": f"its wheels add {size / MiB:.0f} MiB, over the limit"}]
        for wheel in new:
            shutil.copy(wheel, out / "wheels" / wheel.name)
    return []


if __name__ == "__main__":
    sys.exit(main())
