"""Everything the CUDA paths promise, checked in one command on a borrowed GPU machine.

    python benchmarks/gpu_check.py [--bundle gpu-bundle] [--tiny] [--out DIR] [--budget 480]

Made for a machine lent for minutes, with torch but without the rest of the project's
dependencies and without a network: `make gpu-bundle` prepares the wheels and a subset of the
real EuroSAT archive here, `make gpu-check` runs this there. Steps, each in its own process,
timed and bounded so that the whole ends within `--budget` seconds:

- install: the bundle's wheels that the image lacks, unpacked into the bundle's `site/` (never
  over the image's torch); every later step imports from there;
- tests: the GPU tests (`-m gpu`) and the CPU references of the engine and the method
  (`-m cpu_reference`, the compiled C step built for this machine's CPU among them);
- extract (EfficientNet-Lite0 with its packaged weights; ViT-B/16 at its explicit random init):
  bare forward img/s at fp32, TF32 and bf16, the whole pipeline with the `torch` decoder (nvjpeg
  on CUDA) and `pil`, pipeline / bare, per-image feature cosines of torch vs pil, TF32 vs fp32
  and bf16 vs fp32;
- fit: the paper preset on a CIFAR-100-shaped store of random class-structured features
  (50,000 x 768, B0 Inc5: 20 tasks) on CUDA against the CPU, and the wall times;
- sweep: 256 points (r x l1 x seeds) of that shape, grouped as `tosca sweep` groups them:
  wall time, configuration-steps per second, peak GPU memory, the group size chosen;
- local-cuda: an extraction on `--scheduler local-cuda` where dask-cuda is installed.

`--tiny` runs every step it can on a CPU at tiny shapes and says "skipped: no CUDA" for the rest;
`make test-heavy` runs it through the bundle's import check (the packages the bundle leaves out
hidden), so this command cannot rot between the rare GPU loans. One table at the
end, goals beside the figures; `gpu-check.json` and the log go to `--out` (default: $OUT when
set). Exit code 1 when a check fails or a step breaks, 0 otherwise (a goal missed is reported,
not an error).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("TOSCA_DATA", ROOT.parent / "shared" / "data"))
EUROSAT_ARCHIVE = DATA / "eurosat" / "EuroSAT-RGB.tar.gz"
SUBSET = "eurosat-subset.tar.gz"  # inside a bundle: 2750/<Class>/<file>.jpg, as the real archive
MODELS = {"effnet_lite0": False, "vit_b16": True}  # alias -> random init (no ViT-B/16 weights offline)
NO_CUDA = "skipped: no CUDA"


@dataclass
class Row:
    """One line of the table: a figure, the goal it is held to (if any) and what came of it."""

    step: str
    what: str
    value: str
    goal: str = ""
    verdict: str = ""  # ok, MISSED (a goal, not an error), FAIL, skipped: ..., absent


@dataclass(frozen=True)
class Shape:
    """How big each step runs: the real thing on a GPU, tiny on a CPU."""

    train_per_class: int
    test_per_class: int
    bare_images: int
    train_rows: int
    test_rows: int
    dim: int
    classes: int
    increment: int
    epochs: int
    sweep: dict[str, list[Any]]


FULL = Shape(  # 10,000 images: the pipeline's start-up is a small part of its time
    train_per_class=800,
    test_per_class=200,
    bare_images=512,
    train_rows=50_000,
    test_rows=10_000,
    dim=768,
    classes=100,
    increment=5,
    epochs=20,
    sweep={"r": [8, 16, 32, 48], "l1": [0.0, 1e-4, 5e-4, 1e-3], "seed": list(range(16))},
)
TINY = Shape(
    train_per_class=2,
    test_per_class=1,
    bare_images=8,
    train_rows=1_000,
    test_rows=400,
    dim=64,
    classes=20,
    increment=5,
    epochs=2,
    sweep={"r": [4, 8], "l1": [0.0, 5e-4], "seed": [0, 1]},
)


# ------------------------------------------------------------------------------------------ the parent


# seconds each step may take on the GPU machine; a --tiny rehearsal on a (busy) CPU is bounded by
# --budget alone: it checks that every step runs, not how fast
STEPS: dict[str, int] = {"tests": 150, "extract": 170, "fit": 100, "sweep": 120, "local-cuda": 60}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--bundle", type=Path, default=ROOT / "gpu-bundle", help="what `make gpu-bundle` made"
    )
    parser.add_argument("--tiny", action="store_true", help="tiny shapes on a CPU (what CI runs)")
    parser.add_argument(
        "--out", type=Path, default=Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    )
    parser.add_argument("--budget", type=float, default=480.0, help="seconds for everything (default 8 min)")
    parser.add_argument("--only", default=",".join(STEPS), help="comma-separated steps to run")
    parser.add_argument("--step", help=argparse.SUPPRESS)  # a child: run one step
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step:
        return run_step(args.step, args.work, args.tiny)
    return run_all(args)


def run_all(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    deadline = start + args.budget
    work = Path(tempfile.mkdtemp(prefix="tosca-gpu-check-"))
    log = work / "log.txt"
    rows = [*machine_rows(), *install(args.bundle, args.tiny, work)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(_import_path(args.bundle)), "TOSCA_PROGRESS": "0"}
    env.setdefault("TOSCA_DATA", str(DATA))
    if (args.bundle / SUBSET).exists():
        env["TOSCA_GPU_SUBSET"] = str(args.bundle / SUBSET)
    wanted = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(wanted) - set(STEPS))
    if unknown:
        print(f"error: unknown step(s) {', '.join(unknown)}: use any of {', '.join(STEPS)}", file=sys.stderr)
        return 2
    for step in wanted:
        left = deadline - time.perf_counter()
        limit = left - 5 if args.tiny else min(STEPS[step], left - 5)
        if limit < 10:
            rows.append(Row(step, "step", "not run", "", f"FAIL: out of time ({args.budget:.0f} s budget)"))
            continue
        rows += child(step, work, args.tiny, env, limit, log)
    total = time.perf_counter() - start
    rows.append(
        Row("all", "wall time", f"{total:.0f} s", f"<= {args.budget:.0f} s", _verdict(total <= args.budget))
    )
    print_table(rows)
    failed = [r for r in rows if r.verdict.startswith("FAIL")]
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        payload = {
            "tiny": args.tiny,
            "seconds": total,
            "rows": [asdict(r) for r in rows],
            "failed": len(failed),
        }
        (args.out / "gpu-check.json").write_text(json.dumps(payload, indent=2) + "\n")
        if log.exists():
            shutil.copy(log, args.out / "gpu-check.log")
    shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


def _import_path(bundle: Path) -> list[str]:
    site = bundle / "site"
    existing = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return [*([str(site)] if site.is_dir() else []), str(ROOT), *existing]


def machine_rows() -> list[Row]:
    import torch

    cuda = torch.cuda.is_available()
    gpu = torch.cuda.get_device_name(0) if cuda else "none"
    return [
        Row("machine", "python / torch", f"{platform.python_version()} / {torch.__version__}"),
        Row("machine", "GPU", gpu, verdict="" if cuda else NO_CUDA),
        Row("machine", "CPU cores", str(len(os.sched_getaffinity(0)))),
    ]


def install(bundle: Path, tiny: bool, work: Path) -> list[Row]:
    """Unpack the bundle's wheels that this Python lacks into bundle/site (a wheel is a zip of
    the package as installed); nothing the image has is replaced."""
    from importlib import metadata

    manifest_path = bundle / "manifest.json"
    if not manifest_path.exists():
        verdict = "skipped: no bundle" if tiny else f"FAIL: no {manifest_path} (run `make gpu-bundle` first)"
        return [Row("install", "bundle", "none", verdict=verdict)]
    manifest = json.loads(manifest_path.read_text())
    site = bundle / "site"
    site.mkdir(exist_ok=True)
    unpacked, present = [], []
    for wheel in manifest["wheels"]:
        try:
            metadata.version(wheel["dist"])
            present.append(wheel["dist"])
            continue
        except metadata.PackageNotFoundError:
            pass
        if (site / f".{wheel['dist']}").exists():
            unpacked.append(wheel["dist"])
            continue
        _unpack_wheel(bundle / "wheels" / wheel["file"], site)
        (site / f".{wheel['dist']}").write_text(wheel["version"])
        unpacked.append(wheel["dist"])
    rows = [
        Row("install", "unpacked", f"{len(unpacked)} wheel(s)", verdict="ok"),
        Row("install", "already in the image", ", ".join(present) or "none"),
    ]
    for item in manifest.get("left_out", []):
        rows.append(Row("install", f"left out: {item['dist']}", item["why"]))
    return rows


def _unpack_wheel(wheel: Path, site: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.infolist():
            parts = Path(member.filename).parts
            if ".." in parts or Path(member.filename).is_absolute():
                raise SystemExit(f"error: {wheel.name} holds an unsafe path {member.filename!r}")
            if len(parts) > 2 and parts[0].endswith(".data") and parts[1] in ("purelib", "platlib"):
                target = site.joinpath(*parts[2:])  # the wheel's library files, moved to the root
            elif parts[0].endswith(".data"):
                continue  # scripts and headers: not needed to import
            else:
                target = site.joinpath(*parts)
            if member.is_dir():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.read(member))
            mode = member.external_attr >> 16
            if mode:
                target.chmod(mode & 0o755 | 0o600)


def child(step: str, work: Path, tiny: bool, env: dict[str, str], limit: float, log: Path) -> list[Row]:
    """Run one step in its own process: a crash or a hang costs that step's rows, not the table."""
    out = work / f"{step}.json"
    command = [sys.executable, str(Path(__file__).resolve()), "--step", step, "--work", str(work)]
    command += ["--tiny"] if tiny else []
    began = time.perf_counter()
    env = {**env, "GPU_CHECK_DEADLINE": str(time.time() + limit - 10)}  # a long step stops itself here
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=limit)
        code, text = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        code, text = None, _text(exc.stdout) + _text(exc.stderr)
    seconds = time.perf_counter() - began
    with open(log, "a") as fh:
        fh.write(f"===== {step} ({seconds:.1f} s, exit {code})\n{text}\n")
    rows = [Row(**r) for r in json.loads(out.read_text())] if out.exists() else []
    if code is None:
        rows.append(Row(step, "step", f"{seconds:.0f} s", f"<= {limit:.0f} s", "FAIL: timed out"))
    elif code != 0:
        last = (text.strip().splitlines() or ["no output"])[-1][:160]
        rows.append(Row(step, "step", f"exit {code}", "", f"FAIL: {last}"))
    else:
        rows.append(Row(step, "step time", f"{seconds:.0f} s", f"<= {limit:.0f} s", "ok"))
    return rows


def _text(value: str | bytes | None) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else (value or "")


def print_table(rows: list[Row]) -> None:
    widths = [max(len(getattr(r, f)) for r in rows) for f in ("step", "what", "value", "goal")]
    header = ("step", "figure", "value", "goal")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + "  verdict")
    for r in rows:
        cells = (r.step, r.what, r.value, r.goal)
        print("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + f"  {r.verdict}")


def _verdict(ok: bool, missed: str = "MISSED") -> str:
    return "ok" if ok else missed


# ------------------------------------------------------------------------------------------ the steps


def run_step(step: str, work: Path, tiny: bool) -> int:
    rows: list[Row] = []
    steps: dict[str, Callable[[Path, Shape, list[Row]], None]] = {
        "tests": step_tests,
        "extract": step_extract,
        "fit": step_fit,
        "sweep": step_sweep,
        "local-cuda": step_local_cuda,
    }
    try:
        steps[step](work, TINY if tiny else FULL, rows)
    finally:
        (work / f"{step}.json").write_text(json.dumps([asdict(r) for r in rows]))
    return 0


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def step_tests(work: Path, shape: Shape, rows: list[Row]) -> None:
    """The GPU tests (skipped without CUDA) and the CPU references of the engine and the method
    (marker `cpu_reference`: the compiled step on this machine's CPU among them)."""
    files = ["tests/featcache/test_gpu.py", "tests/tosca_heads/engine"]
    files += ["tests/tosca_heads/method/test_luca.py", "tests/tosca_heads/method/test_metrics.py"]
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-rs",
        "-m",
        "gpu or cpu_reference",
    ]
    command += files
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    print(done.stdout[-6000:], done.stderr[-2000:])
    summary = next((line for line in reversed(done.stdout.splitlines()) if " in " in line), "no summary")
    rows.append(
        Row(
            "tests",
            "pytest (gpu + CPU references)",
            summary.strip("= "),
            "all pass",
            _verdict(done.returncode == 0, "FAIL"),
        )
    )


def _subset_archive(work: Path) -> Path | None:
    given = os.environ.get("TOSCA_GPU_SUBSET")
    if given:
        return Path(given)
    return EUROSAT_ARCHIVE if EUROSAT_ARCHIVE.exists() else None


def stage_images(work: Path, shape: Shape) -> tuple[Path, str]:
    """An image folder train/<class>/ and test/<class>/ of real EuroSAT JPEGs, each source image
    used as often as needed (the decoders' cost is per file); generated JPEGs where no archive is."""
    root = work / "staged"
    if root.exists():
        return root, (root / "SOURCE").read_text()
    archive = _subset_archive(work)
    per_class = shape.train_per_class + shape.test_per_class
    sources: dict[str, list[bytes]] = {}
    if archive is not None:
        with tarfile.open(archive) as tar:
            for member in tar:
                parts = Path(member.name).parts
                if member.isfile() and len(parts) == 3 and parts[0] == "2750" and parts[2].endswith(".jpg"):
                    files = sources.setdefault(parts[1], [])
                    if len(files) < min(per_class, 60):
                        files.append(tar.extractfile(member).read())  # type: ignore[union-attr]
        origin = f"{sum(map(len, sources.values()))} real EuroSAT JPEGs from {archive.name}"
    else:
        import numpy as np
        from PIL import Image

        rng = np.random.default_rng(0)
        for c in range(10):
            buffers = []
            for _ in range(4):
                path = work / "tmp.jpg"
                Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(path, quality=90)
                buffers.append(path.read_bytes())
            sources[f"class_{c}"] = buffers
        origin = "generated JPEGs (no EuroSAT archive here)"
    for name, files in sorted(sources.items()):
        for i in range(per_class):
            split = "train" if i < shape.train_per_class else "test"
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{i:05d}.jpg").write_bytes(files[i % len(files)])
    (root / "SOURCE").write_text(origin)
    return root, origin


def step_extract(work: Path, shape: Shape, rows: list[Row]) -> None:
    import numpy as np
    import torch

    from featcache.extraction import ExtractRequest, plan_extraction, run_extraction
    from featcache.store import FeatureStore

    device = "cuda" if _cuda() else "cpu"
    root, origin = stage_images(work, shape)
    rows.append(Row("extract", "images", f"{len(list(root.rglob('*.jpg')))} ({origin})"))
    for alias, random_init in MODELS.items():
        stores = {}
        for decode in ("torch", "pil"):
            request = ExtractRequest(
                model=alias,
                dataset="imagefolder",
                data_root=root,
                cache_dir=work / "cache",
                store=work / "cache" / f"{alias}-{decode}.zarr",
                random_init=random_init,
                device=device,
                decode=decode,
                overwrite=True,
            )
            plan = plan_extraction(request)
            summary = run_extraction(plan)
            stores[decode] = FeatureStore.open(summary.store)
            label = "torch (nvjpeg)" if device == "cuda" and decode == "torch" else decode
            rows.append(Row("extract", f"{alias} pipeline {label}", f"{summary.images_per_second:.0f} img/s"))
            if decode == "pil":
                pipeline = summary.images_per_second
        bare, features = bare_forward(plan, shape.bare_images, device)
        for mode, speed in bare.items():
            verdict = NO_CUDA if mode == "tf32" and device == "cpu" else ""
            rows.append(Row("extract", f"{alias} bare forward {mode}", f"{speed:.0f} img/s", verdict=verdict))
        ratio = pipeline / bare["fp32"]
        held = _verdict(ratio >= 0.8) if device == "cuda" else "not held on a CPU (a goal for CUDA)"
        rows.append(Row("extract", f"{alias} pipeline pil / bare fp32", f"{ratio:.2f}x", ">= 0.8x", held))
        a = np.concatenate([stores["torch"].features(s) for s in ("train", "test")])
        b = np.concatenate([stores["pil"].features(s) for s in ("train", "test")])
        cos = _cosines(a, b)
        goal = ">= 0.999 mean"
        rows.append(
            Row(
                "extract",
                f"{alias} cosine torch vs pil",
                f"min {cos.min():.5f} mean {cos.mean():.5f}",
                goal,
                _verdict(cos.mean() >= 0.999),
            )
        )
        for mode in ("tf32", "bf16"):
            cos = _cosines(features[mode], features["fp32"])
            rows.append(
                Row("extract", f"{alias} cosine {mode} vs fp32", f"min {cos.min():.5f} mean {cos.mean():.5f}")
            )
        del stores
        torch.cuda.empty_cache() if device == "cuda" else None


def _cosines(a: Any, b: Any) -> Any:
    import numpy as np

    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return (a64 * b64).sum(1) / (np.linalg.norm(a64, axis=1) * np.linalg.norm(b64, axis=1))


def bare_forward(plan: Any, images: int, device: str) -> tuple[dict[str, float], dict[str, Any]]:
    """img/s and features of the backbone alone on pre-made tensors already on the device: fp32
    (TF32 off, the product's default), TF32 on, and bf16 autocast."""
    import torch

    from featcache.pipeline.mapper import FeatureMapper, default_batch_size
    from featcache.pipeline.reader import SampleImages

    target = torch.device(device)
    samples = plan.dataset.splits["train"]
    dataset = SampleImages(samples, plan.preprocessing, "train", 0, 0)
    batch = torch.stack([dataset[i % len(dataset)].clean for i in range(images)]).to(target)
    size = default_batch_size(target)
    speeds, features = {}, {}
    for mode in ("fp32", "tf32", "bf16"):
        mapper = FeatureMapper(plan.backbone.model, target, "bf16" if mode == "bf16" else "fp32", size)
        run = functools.partial(_tf32_forward if mode == "tf32" else _mapped, mapper, batch)
        run()  # warm-up: cuDNN picks its algorithms, the CPU fills its caches
        _sync(target)
        began = time.perf_counter()
        features[mode] = run()
        _sync(target)
        speeds[mode] = images / (time.perf_counter() - began)
    return speeds, features


def _mapped(mapper: Any, batch: Any) -> Any:
    return mapper(batch)


def _tf32_forward(mapper: Any, batch: Any) -> Any:
    """The mapper's forward with TF32 on for cuBLAS and cuDNN (the mapper itself turns it off)."""
    import torch

    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        with torch.inference_mode():
            outputs = [
                mapper.model(
                    batch[i : i + mapper.micro_batch].contiguous(memory_format=mapper.memory_format)
                ).float()
                for i in range(0, batch.shape[0], mapper.micro_batch)
            ]
        return torch.cat(outputs).cpu().numpy()
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def random_store(path: Path, shape: Shape) -> Any:
    """Random class-structured features of the CIFAR-100 shape (timing and agreement, not accuracy)."""
    import numpy as np

    from featcache.store import FeatureStore

    rng = np.random.default_rng(0)
    centres = rng.normal(size=(shape.classes, shape.dim)).astype(np.float32)
    labels = {
        "train": np.arange(shape.train_rows) % shape.classes,
        "test": np.arange(shape.test_rows) % shape.classes,
    }
    identity = {
        "dataset": {
            "name": "cifar100-shaped",
            "num_classes": shape.classes,
            "samples": {s: len(v) for s, v in labels.items()},
        },
        "backbone": {"alias": "random", "feature_dim": shape.dim},
        "views": 0,
    }
    ids = {s: [str(i) for i in range(len(v))] for s, v in labels.items()}
    store = FeatureStore.create(path, identity, {}, ids, labels, shape.dim, 0, 4096, "float32")
    for split, y in labels.items():
        for chunk in range(store.layout(split).n_chunks):
            rows = store.layout(split).chunk_slice(chunk)
            noise = rng.normal(scale=2.0, size=(rows.stop - rows.start, shape.dim)).astype(np.float32)
            store.write_chunk(split, chunk, centres[y[rows]] + noise)
    return store


def step_fit(work: Path, shape: Shape, rows: list[Row]) -> None:
    import numpy as np

    from tosca_heads.method.protocol import StreamConfig
    from tosca_heads.method.recipe import TrainConfig
    from tosca_heads.running.group import fit_run

    store = random_store(work / "shaped.zarr", shape)
    stream = StreamConfig(shape.increment, shape.increment)
    train = TrainConfig(epochs=shape.epochs)
    results = {}
    for device in ("cpu", "cuda"):
        if device == "cuda" and not _cuda():
            rows.append(Row("fit", "CUDA fit", "", "", NO_CUDA))
            continue
        began = time.perf_counter()
        results[device] = fit_run(store, stream, train, None, write_outputs=False, device=device)
        seconds = time.perf_counter() - began
        tasks = len(results[device].stages)
        rows.append(
            Row(
                "fit",
                f"{device} fit, {tasks} tasks of {shape.train_rows:,} x {shape.dim}",
                f"{seconds:.2f} s",
            )
        )
    if "cuda" in results:
        worst = 0.0
        for router, block in results["cpu"].metrics()["routers"].items():
            other = np.asarray(results["cuda"].metrics()["routers"][router]["A_t"])
            worst = max(worst, float(np.abs(other - np.asarray(block["A_t"])).max()))
        seen = shape.test_rows * shape.increment / shape.classes
        tolerance = max(0.01, 2 / seen)  # the tests' rule: 1 point or two test images
        rows.append(
            Row(
                "fit",
                "CUDA vs CPU: largest A_t difference",
                f"{100 * worst:.2f} points",
                f"<= {100 * tolerance:.2f}",
                _verdict(worst <= tolerance, "FAIL"),
            )
        )


def step_sweep(work: Path, shape: Shape, rows: list[Row]) -> None:
    import math

    import torch

    from tosca_heads.engine.memory import default_group_size
    from tosca_heads.method.protocol import StreamConfig
    from tosca_heads.method.recipe import TrainConfig
    from tosca_heads.running.executor import run_work
    from tosca_heads.studies.sweeps import grid_points, make_groups

    device = torch.device("cuda" if _cuda() else "cpu")
    store = random_store(work / "sweep.zarr", shape)
    points = grid_points(
        shape.sweep,
        TrainConfig(epochs=shape.epochs),
        StreamConfig(shape.increment, shape.increment),
        shape.dim,
        shape.classes,
    )
    size = default_group_size(store.shape, points, device, 1)
    if device.type == "cpu":
        size = len(points)  # one engine run here too, so the CPU rehearsal takes the GPU's code path
    groups = make_groups(points, size)
    per_task = shape.train_rows / shape.classes * shape.increment
    steps = (
        len(points)
        * (shape.classes // shape.increment)
        * shape.epochs
        * math.ceil(per_task / TrainConfig().batch_size)
    )
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    began = time.perf_counter()
    finished = 0
    deadline = float(os.environ.get("GPU_CHECK_DEADLINE", "inf"))
    for members in groups:
        if time.time() > deadline:
            break  # the rows below say how far it got
        finished += len(run_work(members[0].work(members, store), device.type, alone=True).runs)
    seconds = time.perf_counter() - began
    steps = steps * finished // len(points)
    where = "CUDA" if device.type == "cuda" else "CPU (rehearsal)"
    goal = "<= 60 s" if device.type == "cuda" else ""
    rows.append(
        Row(
            "sweep",
            f"{len(points)} points on {where}",
            f"{seconds:.1f} s" + ("" if finished == len(points) else f" for the first {finished}"),
            goal,
            _verdict(seconds <= 60 and finished == len(points)) if goal else "",
        )
    )
    rows.append(
        Row(
            "sweep",
            "points finished",
            f"{finished} / {len(points)}",
            "all",
            _verdict(finished == len(points), "FAIL"),
        )
    )
    rows.append(Row("sweep", "group size chosen", f"{size} ({len(groups)} engine run(s))"))
    rows.append(Row("sweep", "configuration-steps/s", f"{steps / seconds:,.0f}"))
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated() / 2**30
        rows.append(Row("sweep", "peak GPU memory", f"{peak:.1f} GiB"))
    else:
        rows.append(Row("sweep", "peak GPU memory", "", "", NO_CUDA))


def step_local_cuda(work: Path, shape: Shape, rows: list[Row]) -> None:
    import importlib.util

    if not _cuda():
        rows.append(Row("local-cuda", "extraction on local-cuda", "", "", NO_CUDA))
        return
    if importlib.util.find_spec("dask_cuda") is None:
        rows.append(
            Row("local-cuda", "extraction on local-cuda", "", "", "absent: dask-cuda is not installed")
        )
        return
    from featcache.extraction import ExtractRequest, plan_extraction, run_extraction

    root, _ = stage_images(work, shape)
    request = ExtractRequest(
        model="effnet_lite0",
        dataset="imagefolder",
        data_root=root,
        cache_dir=work / "cache",
        store=work / "cache" / "local-cuda.zarr",
        scheduler="local-cuda",
        overwrite=True,
    )
    summary = run_extraction(plan_extraction(request))
    rows.append(
        Row(
            "local-cuda",
            "effnet_lite0 pipeline on local-cuda",
            f"{summary.images_per_second:.0f} img/s",
            verdict="ok",
        )
    )


if __name__ == "__main__":
    sys.exit(main())
