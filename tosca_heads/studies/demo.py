"""The main job on the embedded default, end to end: `tosca demo`.

1. extract: the packaged ImageNet EfficientNet-Lite0 on a per-class subset of the real EuroSAT
   archive (no cached views);
2. fit: TOSCA with the paper preset on EuroSAT with the split its registration declares (B0 Inc2,
   5 tasks);
3. sweep: r in {16, 48} x l1 in {0, 5e-4}, every point all 5 tasks, ranked on a validation split
   (10% of each class's training images, as `tosca sweep` holds out by default);
4. baselines: those that run by default (`default_baselines()`: SimpleCIL, RanPAC with M = 10,000
   and a joint linear probe) on the same store;
5. the comparison table, and the paths of the plots and tables.

Extraction is stage 1, which stage 2 never imports: the caller hands in the function that makes
the store (`ExtractStore`), and a `DemoDisplay` that shows each step as it ends.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from tosca_foundation.dataset_names import DATASETS
from tosca_foundation.devices import resolve_device
from tosca_foundation.errors import UserError
from tosca_foundation.limits import max_processes, require_at_most
from tosca_heads.method.baseline_registry import default_baselines, described
from tosca_heads.method.protocol import StreamConfig, split_name
from tosca_heads.records import claim
from tosca_heads.records.baselines_folder import BASELINES_FOLDER
from tosca_heads.records.run_folder import RunResult, StageResult
from tosca_heads.requests.command_requests import BaselinesRequest, DemoRequest, FitRequest, SweepRequest
from tosca_heads.routers import HEADLINE
from tosca_heads.running.baseline_runs import TaskCallback
from tosca_heads.running.runs import fit
from tosca_heads.studies.comparison import Comparison, compare
from tosca_heads.studies.sweeps import PointCallback, SweepOutcome, SweepPlan, sweep

SWEEP = {"r": [16, 48], "l1": [0.0, 5e-4]}
ROUTERS = ("entropy", "lda", "ncm", "batch", "batch_shuffled", "oracle")
SWEEP_ROUTERS = HEADLINE  # the sweep's table shows the headline routers, as `tosca sweep` does
EUROSAT_DOWNLOAD = "https://madm.dfki.de/files/sentinel/EuroSAT.zip"
ARCHIVES = (".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")

# (model, dataset, data root, cache dir, store path, images per class, chunk size) -> the store's path
ExtractStore = Callable[[str, str, Path, Path, Path, int, int], Path]
# (model, dataset, data root, store path, images per class) -> one line: what extracting it will take
# here, or that the store is extracted already (stage 1's `extraction_ahead`, handed in)
ForeseeExtraction = Callable[[str, str, Path, Path, int], str]


class DemoDisplay(Protocol):
    """What the demo shows as it goes (the command line renders it)."""

    def ahead(self, line: str) -> None: ...
    def section(self, title: str) -> None: ...
    def stage(self, stage: StageResult, trained: bool) -> None: ...
    def fitted(self, result: RunResult) -> None: ...
    def point(self) -> PointCallback | None: ...
    def sweep_started(self, plan: SweepPlan) -> None: ...
    def swept(self, outcome: SweepOutcome) -> None: ...
    def baseline_task(self) -> TaskCallback | None: ...
    def compared(self, comparison: Comparison, plots: list[Path], tables: list[Path]) -> None: ...


def data_root(request: DemoRequest) -> Path:
    """The EuroSAT archive or folder to read, or one line saying where to get it."""
    hint = (
        f"download EuroSAT RGB ({EUROSAT_DOWNLOAD}) and pass --data-root with the zip or its unpacked "
        "2750/ folder, or set TOSCA_DATA to a folder holding eurosat/EuroSAT-RGB.tar.gz"
    )
    root = request.data_root
    if root is None:
        data = os.environ.get("TOSCA_DATA")
        if not data:
            raise UserError(f"no local data for the demo: {hint}")
        root = Path(data) / "eurosat" / "EuroSAT-RGB.tar.gz"
    if not root.exists():
        raise UserError(f"no EuroSAT data at {root}: {hint}")
    if not root.is_dir() and not root.name.lower().endswith(ARCHIVES):
        raise UserError(f"--data-root {root} is neither a folder nor an archive (.zip, .tar, .tar.gz, .tgz)")
    return root


def check_request(request: DemoRequest) -> None:
    for flag, value in (("--per-class", request.per_class), ("--jobs", request.jobs)):
        if value is not None and value < 1:
            raise UserError(f"{flag} must be at least 1, got {value}")
    if request.jobs is not None:
        require_at_most(
            "--jobs", request.jobs, max_processes(), "processes", "at most 4 per usable core, and 64 anywhere"
        )


def run_demo(
    request: DemoRequest, extract: ExtractStore, show: DemoDisplay, foresee: ForeseeExtraction | None = None
) -> None:
    """Extract, fit, sweep, baselines and the comparison, each step the command's own request (the
    same checks, defaults and files as `tosca fit`, `tosca sweep` and `tosca baselines`), each
    reusing what a rerun finds. The first line said (`foresee`) is what the extraction will take
    on this machine, or that the store is extracted already: before the work, not after it."""
    check_request(request)
    device = str(resolve_device(request.device))
    data = data_root(request)
    path = request.cache_dir / "eurosat" / f"effnet_lite0-demo{request.per_class}.zarr"
    if foresee is not None:
        show.ahead(foresee("effnet_lite0", "eurosat", data, path, request.per_class))
    show.section("1/5 extract: effnet_lite0 (packaged ImageNet weights) on a EuroSAT subset")
    store = extract("effnet_lite0", "eurosat", data, request.cache_dir, path, request.per_class, 256)
    name = f"demo-eurosat-effnet_lite0-{request.per_class}"
    declared = DATASETS["eurosat"]  # its registration's split (B0 Inc2: tosca's, not in the paper)
    split = {"init_cls": declared.split.init_cls, "increment": declared.split.increment}
    named = split_name(**split)
    tasks = StreamConfig(**split).task_stream(declared.num_classes).num_tasks
    folder = request.runs_dir / f"{name}-baselines"
    claim.check(folder, BASELINES_FOLDER)

    show.section(f"2/5 fit: TOSCA, paper preset, EuroSAT {named} ({tasks} tasks)")
    fitted = fit(FitRequest(store=store, run=request.runs_dir / name, device=device, **split), show.stage)
    show.fitted(fitted)

    show.section(
        f"3/5 sweep: r in {{16, 48}} x l1 in {{0, 5e-4}}, every point all {tasks} tasks, ranked on a validation split"
    )
    grid = {**{k: ",".join(map(str, v)) for k, v in SWEEP.items()}, **{k: str(v) for k, v in split.items()}}
    swept = sweep(
        SweepRequest(
            store=store,
            out=request.runs_dir / f"{name}-sweep",
            jobs=request.jobs,
            device=device,
            shown=SWEEP_ROUTERS,
            grid=grid,
        ),
        on_point=show.point(),
        on_start=show.sweep_started,
    )
    show.swept(swept)

    methods = default_baselines()
    show.section(f"4/5 baselines: {', '.join(described(method) for method in methods)}")
    title = f"eurosat / effnet_lite0, {request.per_class} images/class, {named}"
    comparison = compare(
        BaselinesRequest(
            store=store,
            run=fitted.run_dir,
            out=folder,
            methods=methods,
            device=device,
            title=title,
            **split,
        ),
        show.baseline_task(),
    )
    show.section("5/5 comparison (accuracies in %, test images of all classes seen so far)")
    plots = [
        fitted.run_dir / "accuracy.png",
        comparison.files["comparison.png"],
        *(p for n, p in swept.files.items() if n.endswith(".png")),
    ]
    tables = [comparison.files["comparison.md"], swept.files.get("summary.md", swept.out / "summary.md")]
    show.compared(comparison, plots, tables)
