"""One second to start: `tosca --help`, `--version`, `list` and every `tosca COMMAND --help` load
none of the heavy libraries, plug-ins included; `fit`, `sweep` (and its dry run) and `extract`
write their first line before any library they do not need. Each check runs the command in a
fresh process that records which heavy libraries are loaded when it ends, or when its first line
is written (then it stops): what is imported, never a timing (benchmarks/startup.py times them).
Registries list without their implementations: each built-in declared lightly says what its
implementation says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support import ROOT
from support.images import FAST_CNN
from support.stores import synthetic_store

HEAVY = ("torch", "torchvision", "timm", "dask", "distributed", "zarr", "matplotlib", "sklearn", "pandas")
HEAVY += ("scipy", "pyarrow")

# Runs tosca with the arguments given; at its first line of output (FIRST=1) or at its end, writes
# the heavy modules then loaded, the line and the exit code to the file REPORT.
PROBE = textwrap.dedent(
    """
    import atexit, json, os, sys
    heavy, report, first = {heavy!r}, {{}}, os.environ.get("FIRST") == "1"

    def write(code=None):
        report.setdefault("loaded", sorted(h for h in heavy if h in sys.modules))
        report.setdefault("code", code)
        with open(os.environ["REPORT"], "w") as out:
            json.dump(report, out)

    class Tap:
        def __init__(self, stream):
            self.stream = stream

        def write(self, text):
            if first and text.strip() and "line" not in report:
                report["line"] = text.strip().splitlines()[0]
                write()
                os._exit(0)
            return self.stream.write(text)

        def __getattr__(self, name):
            return getattr(self.stream, name)

    sys.stdout, sys.stderr = Tap(sys.stdout), Tap(sys.stderr)
    atexit.register(write)
    sys.argv = ["tosca", *sys.argv[1:]]
    from tosca_cli.app import app
    try:
        app()
    except SystemExit as exc:
        write(exc.code)
        raise
    """
).format(heavy=HEAVY)

# a plug-in that registers one of each kind, importing only the registries
PLUGIN = textwrap.dedent(
    """
    from featcache.backbones import BackboneSpec, register_backbone
    from tosca_foundation.dataset_names import register_dataset
    from tosca_heads.trackers.logger_registry import Logger, register_logger
    from tosca_heads.method.baseline_registry import register_baseline
    from tosca_heads.routers import Router, register_router

    register_backbone(BackboneSpec("plug_net", "test_efficientnet", note="a plug-in's"))


    @register_dataset("plug_data", 2, "a plug-in's folders")
    def plug_data(data_root, cache_dir):
        raise NotImplementedError


    @register_router
    class PlugRouter(Router):
        name = "plug_router"
        summary = "a plug-in's"


    @register_baseline("plug_baseline")
    class PlugBaseline:
        '''A plug-in's baseline.'''

        incremental = True
        partial_fit = predict = num_parameters = print


    @register_logger
    class PlugLogger(Logger):
        name = "plug_tracker"
        start = params = metrics = artifacts = end = print
    """
)


def _tosca(args: list[str], folder: Path, first: bool = False, **env: str) -> dict:
    report = folder / "report.json"
    report.unlink(missing_ok=True)
    environ = {**os.environ, "REPORT": str(report), "FIRST": "1" if first else "0", **env}
    environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *env.get("PYTHONPATH", "").split(os.pathsep)])
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        cwd=folder,
        env=environ,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert report.is_file(), f"{args}: {done.stderr[-2000:]}"
    found = json.loads(report.read_text())
    assert found["code"] in (0, None) or first, f"{args} exited {found['code']}: {done.stderr[-2000:]}"
    return {**found, "output": done.stdout + done.stderr}


# Runs every light command in turn in one fresh process (the arguments, as JSON); prints, after
# each, its exit code, the start of its output and the heavy modules loaded so far.
LIGHT = textwrap.dedent(
    """
    import json, sys
    import typer.main
    from typer.testing import CliRunner
    from tosca_cli.app import app

    heavy = {heavy!r}
    root = typer.main.get_command(app)
    commands = [["--help"], ["--version"], ["list"], ["list", "--json"]]
    for name, command in root.commands.items():
        commands += [[name, *([sub] if sub else []), "--help"] for sub in getattr(command, "commands", [None])]
    said = []
    for args in commands:
        done = CliRunner().invoke(app, args)
        loaded = sorted(h for h in heavy if h in sys.modules)
        said.append({{"args": args, "code": done.exit_code, "output": " ".join(done.output.split())[:80], "loaded": loaded}})
    print(json.dumps(said))
    """
).format(heavy=HEAVY)


def test_help_version_list_and_every_command_s_help_load_no_heavy_library() -> None:
    """One process runs them all, one after another: a heavy library loaded by any of them would
    still be loaded after the last (the first command after which it is loaded is named)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", LIGHT], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    said = json.loads(done.stdout)
    assert len(said) > 15 and {"sweep", "fit", "extract", "cache", "suite"} <= {s["args"][0] for s in said}
    for command in said:
        shown = "tosca " + " ".join(command["args"])
        assert command["code"] == 0 and command["output"].strip(), f"{shown}: {command}"
        assert command["loaded"] == [], f"{shown} loaded {command['loaded']}"


def test_plugins_register_and_are_listed_without_a_heavy_library(tmp_path: Path) -> None:
    (tmp_path / "plugmod.py").write_text(PLUGIN)
    found = _tosca(["list", "--json"], tmp_path, TOSCA_PLUGINS="plugmod", PYTHONPATH=str(tmp_path))
    assert found["loaded"] == []
    listed = json.loads(found["output"])
    kinds = {
        "backbones": "plug_net",
        "datasets": "plug_data",
        "routers": "plug_router",
        "baselines": "plug_baseline",
    }
    for kind, name in kinds.items():
        (row,) = [r for r in listed[kind] if r["name"] == name]
        assert row["from"] == "plug-in plugmod", row
    (router,) = [r for r in listed["routers"] if r["name"] == "plug_router"]
    assert router["what"] == "honest: a plug-in's"


NOT_FOR_STAGE_2 = {"timm", "torchvision", "dask", "distributed", "matplotlib", "sklearn", "pandas", "scipy"}
# a fit's plan (store, split, validation rows, recipe, protocol) is built and said with numpy and the
# store alone: torch, the engine and the routers load after its first line
NOT_BEFORE_THE_PLAN = NOT_FOR_STAGE_2 | {"torch"}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "said", "unloaded"),
    [
        (["fit", "--epochs", "1", "--run", "run"], "protocol: synthetic", NOT_BEFORE_THE_PLAN),
        (
            ["fit", "--epochs", "1", "--val-fraction", "0.25", "--run", "run"],
            "protocol: synthetic",
            NOT_BEFORE_THE_PLAN,
        ),
        (
            ["sweep", "--r", "2,4", "--epochs", "1", "--jobs", "1", "--out", "sweep"],
            "sweep: 2 runs (2 r)",
            NOT_FOR_STAGE_2,
        ),
        (
            ["sweep", "--r", "2,4", "--epochs", "1", "--dry-run", "--out", "sweep"],
            "sweep 2 r on",
            NOT_FOR_STAGE_2,
        ),
    ],
    ids=["fit", "fit --val-fraction", "sweep", "sweep --dry-run"],
)
def test_fit_and_sweep_say_their_first_line_before_what_they_do_not_need(
    args: list[str], said: str, unloaded: set[str], tmp_path: Path
) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=4)
    found = _tosca([*args, "--store", str(store.path), "--device", "cpu"], tmp_path, first=True)
    assert found["line"].startswith(said), found
    assert not unloaded & set(found["loaded"]), found["loaded"]


@pytest.mark.slow
def test_fit_on_auto_says_its_plan_before_torch(tmp_path: Path) -> None:
    """`--device auto` (the default) is resolved where the engine starts: the plan is said first."""
    store = synthetic_store(tmp_path / "s.zarr", classes=4)
    found = _tosca(["fit", "--store", str(store.path), "--epochs", "1", "--run", "run"], tmp_path, first=True)
    assert found["line"].startswith("protocol: synthetic"), found
    assert "torch" not in found["loaded"], found["loaded"]


@pytest.mark.slow
def test_extract_says_its_plan_before_torch_and_timm_load(tmp_path: Path, image_tree: Path) -> None:
    """The first line is the plan (model, dataset, rows, chunks, store), said before torch, timm or
    any other library the listing does not need is imported."""
    args = ["extract", "--model", "effnet_lite0", "--dataset", "imagefolder", "--data-root", str(image_tree)]
    found = _tosca([*args, "--workers", "0", "--chunk-size", "4", "--store", "s.zarr"], tmp_path, first=True)
    rows = {
        split: sum(1 for f in (image_tree / split).rglob("*") if f.is_file()) for split in ("train", "test")
    }
    chunks = " + ".join(str(-(-n // 4)) for n in rows.values())
    classes = len([d for d in (image_tree / "train").iterdir() if d.is_dir()])
    assert found["line"] == (
        f"extract: effnet_lite0 on imagefolder ({classes} classes): train {rows['train']}, test {rows['test']} "
        f"rows in {chunks} chunks of 4 -> s.zarr"
    ), found
    assert not {"torch", "torchvision", "timm", *NOT_FOR_STAGE_2} & set(found["loaded"]), found["loaded"]


@pytest.mark.heavy  # a ViT-B/16 built at random: 5 s
def test_extract_of_a_random_init_model_warns_after_its_plan(tmp_path: Path, image_tree: Path) -> None:
    args = ["extract", "--model", FAST_CNN, "--dataset", "imagefolder", "--data-root", str(image_tree)]
    done = _tosca([*args, "--random-init", "--workers", "0", "--device", "cpu"], tmp_path)
    lines = done["output"].splitlines()
    plan = next(i for i, line in enumerate(lines) if line.startswith(f"extract: {FAST_CNN} on imagefolder"))
    warning = next(i for i, line in enumerate(lines) if line.startswith("warning: random-init weights"))
    assert plan < warning, lines


def test_declared_built_ins_say_what_their_implementations_say() -> None:
    """A built-in declared by name (listed without loading it) has its class's docstring line and
    reference declaration. The baselines' declarations are generated from their classes
    (tests/tosca_heads/method/test_baseline_index.py keeps them current); the others are checked here."""
    from tosca_cli.views import catalogue
    from tosca_foundation.registry import REGISTRIES, reference_words

    catalogue()  # every registry the command line lists, imported
    declared = [(r, e) for r in REGISTRIES for e in r.entries() if e.target and r.kind != "baseline"]
    assert {e.name for _, e in declared} >= {"pil", "torch"}
    for registry, entry in declared:
        cls = registry[entry.name]
        said = getattr(cls, "description", None) or (cls.__doc__ or "").strip().partition("\n")[0]
        assert entry.description == said, entry.name
        assert entry.reference == reference_words(getattr(cls, "reference", False)), entry.name
