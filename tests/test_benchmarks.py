"""The stage-2 benchmarks still run and print their figures (on tiny shapes): a renamed key or a
moved function must not wait for the next person who measures to be found."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from support import ROOT

from tosca_heads.engine import native


def _run(script: str, *args: str) -> str:
    # the benchmarks folder too: a script imports its neighbours (eager_fit, fit_speed), and an
    # earlier test may have left PYTHONSAFEPATH=1 here (the command line sets it for its children)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "benchmarks")])}
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.slow
@pytest.mark.heavy  # a benchmark run whole (2-5 s)
def test_fit_speed_prints_its_timing_and_accuracies() -> None:
    out = _run("fit_speed.py", "--train", "1200", "--test", "300", "--dim", "32", "--classes", "10")
    assert "2 tasks" in out and "ms per SGD step" in out
    assert "A_last oracle" in out and "entropy" in out
    assert "eager re-implementation" in out and "of its time (goal <= 0.25)" in out


@pytest.mark.slow
@pytest.mark.heavy  # a benchmark run whole (2-5 s)
def test_step_speed_prints_one_row_per_step_kind() -> None:
    out = _run(
        "step_speed.py",
        "--groups",
        "1,2",
        "--dim",
        "32",
        "--r",
        "4",
        "--classes",
        "6",
        "--steps",
        "5",
        "--repeats",
        "1",
    )
    kinds = ("autograd", "torch-step", "compiled-step", "compiled-2-threads")
    rows = [line.split() for line in out.splitlines() if line.strip().startswith(kinds)]
    expected = [("autograd", "1"), ("torch-step", "1"), ("torch-step", "2")]
    if native.load()[0] is not None:
        expected += [("compiled-step", "1"), ("compiled-step", "2")]
        expected += [("compiled-2-threads", "1"), ("compiled-2-threads", "2")]
    assert [(r[0], r[1]) for r in rows] == expected
    assert all(float(r[-1].replace(",", "")) > 0 for r in rows)  # configuration-steps per second


def _benchmark_module(name: str) -> types.ModuleType:
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_routing_ceiling_reads_a_run_and_bounds_its_routers(tmp_path: Path) -> None:
    """On a tiny synthetic run: the routers it shares with the run give the run's own figures, the
    oracle routes everything right, and the table carries one row per store."""
    from support.stores import synthetic_store

    from tosca_heads.method.protocol import StreamConfig
    from tosca_heads.method.recipe import TrainConfig
    from tosca_heads.running.group import fit_run

    ceiling = _benchmark_module("routing_ceiling")
    store = synthetic_store(
        tmp_path / "s.zarr", classes=6, per_class=20, test_per_class=10, dim=16, spread=1.5
    )
    stream = StreamConfig(2, 2)
    config = TrainConfig(r=4, s=4, epochs=2, batch_size=8)
    modes = fit_run(store, stream, config, None, tmp_path / "run", device="cpu").metrics()["routers"]
    result = ceiling.measure("tiny", store, stream, tmp_path / "run", ranpac_projection_dim=64)
    for name in ("entropy", "oracle", "lda"):  # the same figures as the run's own last evaluation
        assert getattr(result, name).a_last == pytest.approx(modes[name]["A_last"], abs=1e-6)
        assert getattr(result, name).routing == pytest.approx(modes[name]["routing_accuracy"], abs=1e-6)
    assert result.oracle.routing == 1.0 and result.oracle.misrouted_right == 0.0
    for routed in (result.entropy, result.lda, result.ranpac_router, result.fitted_on_test):
        assert 0.0 <= routed.a_last <= 1.0 and 0.0 <= routed.routing <= 1.0
        # a right answer needs the right module or a lucky wrong one
        assert routed.a_last <= routed.routing + (1 - routed.routing) * routed.misrouted_right + 1e-9
    assert result.goal >= result.ranpac and result.weights.shape == (len(ceiling.SIGNALS),)
    lines = ceiling.table([result])
    assert sum(line.startswith("| tiny |") for line in lines) == 1


def test_routing_ceiling_fit_finds_an_informative_signal() -> None:
    """The test-label fit routes perfectly when one signal is the task indicator and the others noise."""
    ceiling = _benchmark_module("routing_ceiling")
    gen = torch.Generator().manual_seed(0)
    n, tasks = 400, 4
    true_task = torch.randint(0, tasks, (n,), generator=gen)
    signals = torch.randn(n, tasks, 3, generator=gen, dtype=torch.float64)
    signals[:, :, 1] = 5.0 * torch.nn.functional.one_hot(true_task, tasks)
    chosen, weights = ceiling.fitted_on_test(signals, true_task.numpy())
    assert (chosen == true_task.numpy()).all()
    assert abs(weights[1]) > 5 * max(abs(weights[0]), abs(weights[2]))


@pytest.mark.slow
@pytest.mark.heavy
def test_the_gpu_check_rehearses_every_step_as_the_bundle_sees_the_image(tmp_path: Path) -> None:
    """`make gpu-check` cannot rot between GPU loans: CI runs the bundle's own import check (its
    --tiny mode on a CPU, the packages the bundle leaves out unimportable, as on the GPU image), so
    a new import on a GPU path fails here; every step runs, says which parts need CUDA, writes its
    table where asked; the wheels it needs fit the bundle's 48 MiB."""
    bundle = _benchmark_module("gpu_bundle")
    found = bundle.import_check(out=tmp_path / "out")
    report = json.loads((tmp_path / "out" / "gpu-check.json").read_text())
    rows = report["rows"]
    failed = [
        f"{r['step']}: {r['what']}: {r['value']} {r['verdict']}"
        for r in rows
        if r["verdict"].startswith("FAIL")
    ]
    assert report["tiny"] and report["failed"] == 0, "\n".join(failed)
    steps = {r["step"] for r in rows}
    assert {"machine", "install", "tests", "extract", "fit", "sweep", "local-cuda", "all"} <= steps
    figures = {r["what"]: r for r in rows}
    for alias in ("effnet_lite0", "vit_b16"):
        for mode in ("fp32", "tf32", "bf16"):
            assert figures[f"{alias} bare forward {mode}"]["value"].endswith("img/s")
        assert figures[f"{alias} cosine torch vs pil"]["verdict"] == "ok"
    if not torch.cuda.is_available():
        assert figures["CUDA fit"]["verdict"] == "skipped: no CUDA"
        assert figures["extraction on local-cuda"]["verdict"] == "skipped: no CUDA"
    assert figures["points finished"]["value"] == "8 / 8"
    assert re.match(r"\d+ passed", figures["pytest (gpu + CPU references)"]["value"])
    assert (tmp_path / "out" / "gpu-check.log").exists()
    # nothing left out was loaded, and the image's own packages are not bundled
    assert not {d.lower() for d in found.loaded} & set(bundle.LEFT_OUT)
    assert {"torch", "numpy"} <= found.image and not {"torch", "numpy", "timm"} & set(found.needed)
    assert {"zarr", "dask"} <= set(found.needed)  # what the image lacks and the check imports
    wheels = bundle.estimated_bytes(found.needed)
    data = 0
    if (bundle.DATA / "eurosat" / "EuroSAT-RGB.tar.gz").exists():
        bundle.subset(
            bundle.DATA / "eurosat" / "EuroSAT-RGB.tar.gz", tmp_path / "s.tar.gz", bundle.SUBSET_PER_CLASS
        )
        data = (tmp_path / "s.tar.gz").stat().st_size
    assert wheels + data <= 0.95 * 48 * bundle.MiB, (
        f"the bundle would be about {(wheels + data) / bundle.MiB:.1f} MiB of 48: {found.needed}"
    )


def test_a_left_out_package_a_gpu_path_imports_is_named(tmp_path: Path) -> None:
    """The rehearsal's hook hides the left-out packages from a process and every process it starts
    (the pandas break of issue 34: the sweep step imported pandas); a failed check names the one
    imported, with why it is left out; what a forked child imports (it leaves through os._exit,
    without atexit) is recorded too."""
    bundle = _benchmark_module("gpu_bundle")
    code = "import subprocess, sys; sys.exit(subprocess.call([sys.executable, '-c', 'import pandas']))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with pytest.raises(SystemExit) as stopped:
        bundle.imported_by([sys.executable, "-c", code], env, set(bundle.LEFT_OUT), 120)
    said = str(stopped.value)
    assert "No module named 'pandas'" in said
    assert "a GPU path imports pandas, which the bundle leaves out (pandas: tables of finished" in said
    forked = "import os\npid = os.fork()\nif pid == 0:\n    import wave\n    os._exit(0)\nos.waitpid(pid, 0)\nimport csv"
    loaded = bundle.imported_by([sys.executable, "-c", forked], env, set(bundle.LEFT_OUT), 120)
    assert {"csv", "wave"} <= loaded and not loaded & set(bundle.LEFT_OUT)  # a forked child's imports too
    assert bundle.needs_left_out("ModuleNotFoundError: No module named 'zarr'") == ""


def _gpu_check() -> types.ModuleType:
    return _benchmark_module("gpu_check")


def _bundle(root: Path, wheels: dict[str, dict[str, str]]) -> Path:
    """A bundle folder with these wheels (dist -> {path inside: text}) and its manifest."""
    import zipfile

    (root / "wheels").mkdir(parents=True)
    entries = []
    for dist, files in wheels.items():
        name = f"{dist}-1.0-py3-none-any.whl"
        with zipfile.ZipFile(root / "wheels" / name, "w") as archive:
            for inner, text in files.items():
                archive.writestr(inner, text)
        entries.append({"file": name, "dist": dist, "version": "1.0"})
    (root / "manifest.json").write_text(json.dumps({"wheels": entries, "left_out": []}))
    return root


def test_the_gpu_check_unpacks_only_what_the_image_lacks(tmp_path: Path) -> None:
    check = _gpu_check()
    bundle = _bundle(
        tmp_path / "bundle",
        {
            "tosca-test-absent": {
                "absent_pkg/__init__.py": "X = 1\n",
                "tosca_test_absent-1.0.data/purelib/extra.py": "",
            },
            "pytest": {"pytest_shadow/__init__.py": ""},  # the image has pytest: never unpacked over it
        },
    )
    rows = check.install(bundle, tiny=False, work=tmp_path)
    site = bundle / "site"
    assert (site / "absent_pkg" / "__init__.py").read_text() == "X = 1\n"
    assert (site / "extra.py").exists()  # a wheel's .data/purelib lands at the root
    assert not (site / "pytest_shadow").exists()
    assert {r.what: r.value for r in rows}["already in the image"] == "pytest"


def test_a_wheel_that_reaches_outside_the_site_is_refused(tmp_path: Path) -> None:
    check = _gpu_check()
    bundle = _bundle(tmp_path / "bundle", {"tosca-test-evil": {"../evil.py": ""}})
    with pytest.raises(SystemExit, match="unsafe path"):
        check.install(bundle, tiny=False, work=tmp_path)
    assert not (tmp_path / "evil.py").exists()


def test_without_a_bundle_the_full_check_stops_and_the_tiny_one_goes_on(tmp_path: Path) -> None:
    check = _gpu_check()
    (full,) = check.install(tmp_path / "none", tiny=False, work=tmp_path)
    (tiny,) = check.install(tmp_path / "none", tiny=True, work=tmp_path)
    assert full.verdict.startswith("FAIL") and "make gpu-bundle" in full.verdict
    assert tiny.verdict == "skipped: no bundle"


def test_estimates_reads_the_progress_lines_as_a_user_would() -> None:
    """benchmarks/estimates.py's reading of progress lines: where the real time went, from the
    moment each line came."""
    module = _benchmark_module("estimates")
    stderr = "\n".join(
        [
            "sweep: 0/4 (0%) points, 0:00 elapsed",
            "sweep: 1/4 (25%) points, 20.0 s each, 0:20 elapsed",
            "sweep: 2/4 (50%) points, 15.0 s each, 0:30 elapsed",
            "sweep: 3/4 (75%) points, 15.0 s each, 0:55 elapsed",
            "extract train: 10/20 (50%) img, 1.0 img/s, 0:10 elapsed",  # another job
            "sweep: 4/4 (100%) points, 15.0 s each, done in 1:00",
        ]
    )
    assert module.seconds("1:02:03") == 3723
    # the plan's line at 4 s, the first point's end at 20 s, the last at 60 s, the exit at 65 s
    timed = list(zip((4.0, 20.0, 30.0, 55.0, 56.0, 60.0), stderr.splitlines(), strict=True))
    spent = module.timeline(timed, "sweep", 65.0)
    assert spent == {"command": 4.0, "start-up": 16.0, "units": 40.0, "finish": 5.0}
    assert not hasattr(module, "worst_ratios")  # the "time left" lines are gone (issue 54, point 5)


@pytest.mark.slow
@pytest.mark.heavy  # a benchmark run whole (2-5 s)
def test_startup_prints_min_median_max_per_command() -> None:
    out = _run("startup.py", "--repeats", "1", "--commands=--version,list,fit --help")
    rows = {line[:22].strip(): line[22:].split() for line in out.splitlines()[1:]}
    assert list(rows) == ["--version", "list", "fit --help"]
    for cells in rows.values():
        runs, low, median, high, cpu = int(cells[0]), *map(float, cells[1:5])
        assert runs == 1 and 0 < low == median == high and cpu > 0
        assert " ".join(cells[5:]) == "<= 1.0 to the exit"


@pytest.mark.heavy  # every baseline on a small synthetic store (5-10 s)
def test_baselines_speed_splits_every_method_s_seconds_and_bounds_them_by_ranpac(tmp_path: Path) -> None:
    from support.stores import synthetic_store

    from tosca_heads.method.baseline_registry import BASELINES

    store = synthetic_store(tmp_path / "s.zarr", classes=6, per_class=30, dim=24)
    out = _run(
        "baselines_speed.py",
        "--store",
        str(store.path),
        "--set",
        "ranpac_projection_dim=600",
        "--json",
    )
    found = json.loads(out.strip().splitlines()[-1])
    rows = {row["method"]: row for row in found["rows"]}
    assert list(rows) == list(BASELINES)  # `all`: every registered baseline, in the registry's order
    for row in rows.values():
        assert sum(row["parts"].values()) == pytest.approx(row["seconds"], rel=1e-6, abs=1e-9)
        assert 0.5 < row["A_last"] <= 1.0  # separable clusters: each run is its method's, not a no-op
    assert rows["ranpac"]["parts"]["solves"] > 0 and rows["ranpac"]["parts"]["Gram sums"] > 0


@pytest.mark.slow
@pytest.mark.heavy  # a benchmark run whole (a few seconds)
def test_scenario_cost_prints_each_table_beside_cils(tmp_path: Path) -> None:
    from support.stores import synthetic_store

    store = synthetic_store(tmp_path / "s.zarr", classes=6, per_class=20, test_per_class=10)
    out = _run(
        "scenario_cost.py",
        "--store",
        str(store.path),
        "--scenarios",
        "cil,til,blurry",
        "--methods",
        "tosca,slda,gacl",
        "--set",
        "gacl_buffer_size=64",
        "--set",
        "tosca_epochs=2",
        "--routers",
        "lda,ncm",
    )
    assert all(f"## {name}:" in out for name in ("cil", "til", "blurry"))
    blurry = out.split("## blurry:")[1]
    assert "tosca (lda) " in blurry and "tosca (ncm) " in blurry  # one training, a row per router
    assert blurry.count("{vs gacl: ") == 2  # each TOSCA row against the one baseline blurry ran
    assert "slda       refused: slda cannot run blurry" in out
    ratios = [line.split() for line in out.splitlines() if line.startswith(("cil ", "til ", "blurry "))]
    assert [r[0] for r in ratios] == ["cil", "til", "blurry"] and float(ratios[0][2]) == 1.0
