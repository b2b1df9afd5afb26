"""The house's floors hold: each package imports only the floors below it, stage 2 never imports
the backbone side, no module reaches a private name of another, and importing all of stage 2
loads no timm or torchvision."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from support import ROOT

# floor -> rank: a module may import its own floor and floors of a lower rank
FLOORS = {
    "featcache": 9,  # the package itself: its face (re-exports the API; its version is in foundation)
    "tosca_foundation": 0,
    "featcache.store": 1,
    "featcache.sources": 2,
    "featcache.images": 3,
    "featcache.backbones": 3,
    "featcache.pipeline": 4,
    "featcache.extract_request": 4,
    "featcache.distributor": 5,
    "featcache.embedding": 5,
    "featcache.outline": 5,
    "featcache.arrays": 6,  # import and export: arrays in and out of a store, through its writer
    "featcache.extraction": 6,
    "featcache.extraction_estimate": 6,
    "featcache.runner": 7,
    "featcache.stage1_api": 8,
    "tosca_heads": 10,
    "tosca_heads.method": 10,
    "tosca_heads.routers": 11,
    "tosca_heads.engine": 12,
    "tosca_heads.records": 13,  # each file's schema, version, reader and writer (plots too)
    "tosca_heads.trackers": 14,  # MLflow, TensorBoard and plug-in loggers, fed from the records
    "tosca_heads.requests": 15,  # what the commands ask for, and a fit's plan checked once
    "tosca_heads.running": 16,  # units that run: an engine run, a baseline, the executor, costs
    "tosca_heads.applied": 17,  # predict, the scikit-learn estimators, scenarios
    "tosca_heads.conformance": 17,  # the built-ins' contract run on a plug-in
    "tosca_heads.studies": 18,  # lists of units and views over them: sweeps, comparison, suites
    "tosca_heads.stage2_api": 19,
    "tosca_cli": 20,  # the command line: its typer app, views, progress and terminal
    "cli": 21,  # the checkout's entry file: a shim onto tosca_cli
}
STAGE_2_MAY_USE = {"tosca_foundation", "featcache.store"}
# a package's face hands on its API (loaded on first use): the one import allowed up its floors
FACES = {("featcache", "featcache.stage1_api"), ("tosca_heads", "tosca_heads.stage2_api")}
OURS = ("tosca_foundation", "featcache", "tosca_heads", "tosca_cli", "cli")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _floor(module: str) -> str:
    parts = module.split(".")
    for n in (2, 1):
        if ".".join(parts[:n]) in FLOORS:
            return ".".join(parts[:n])
    raise AssertionError(f"{module} is on no floor: add its package to FLOORS")


def _imports(path: Path) -> list[tuple[str, str | None, int]]:
    """(module, name or None, line) for every import in the file, at any depth (lazy ones too)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, None, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([module] if module else [])])
            found += [(module, alias.name, node.lineno) for alias in node.names]
    return [(m, n, line) for m, n, line in found if m.split(".")[0] in OURS]


def _sources() -> list[Path]:
    return [
        *sorted((ROOT / "tosca_foundation").rglob("*.py")),
        *sorted((ROOT / "featcache").rglob("*.py")),
        *sorted((ROOT / "tosca_heads").rglob("*.py")),
        *sorted((ROOT / "tosca_cli").rglob("*.py")),
        ROOT / "cli.py",
    ]


def test_every_import_goes_down_a_floor_or_stays_on_its_own() -> None:
    upward = []
    for path in _sources():
        here = _floor(_module_name(path))
        for module, _, line in _imports(path):
            there = _floor(module)
            if (_module_name(path), module) in FACES:
                continue
            if there != here and FLOORS[there] >= FLOORS[here]:
                upward.append(f"{path.relative_to(ROOT)}:{line} ({here}) imports {module} ({there})")
    assert not upward, "\n".join(upward)


def test_stage_2_imports_only_the_foundation_and_the_store_of_stage_1() -> None:
    reached = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in sorted((ROOT / "tosca_heads").rglob("*.py"))
        for module, name, line in _imports(path)
        if module.startswith("featcache")
        and _floor(module) not in STAGE_2_MAY_USE
        and (module, name) != ("featcache", "__version__")
    ]
    assert not reached, "\n".join(reached)


def test_no_module_reaches_a_private_name_of_another() -> None:
    reached = []
    for path in _sources():
        here = _module_name(path)
        tree = ast.parse(path.read_text())
        aliases = {}  # local name -> one of our modules, for `module._name` accesses
        for module, name, line in _imports(path):
            if name is not None and name.startswith("_") and not name.startswith("__") and module != here:
                reached.append(f"{path.relative_to(ROOT)}:{line} imports {module}.{name}")
            if name is not None and f"{module}.{name}".split(".")[0] in OURS:
                aliases[name] = f"{module}.{name}"
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                reached.append(
                    f"{path.relative_to(ROOT)}:{node.lineno} uses {aliases[node.value.id]}.{node.attr}"
                )
    assert not reached, "\n".join(reached)


@pytest.mark.parametrize("package", ["tosca_heads", "featcache.store", "tosca_foundation"])
def test_importing_stage_2_and_the_store_loads_no_backbone_library(package: str) -> None:
    code = (
        "import sys, pkgutil, importlib\n"
        f"root = importlib.import_module({package!r})\n"
        "for m in pkgutil.walk_packages(root.__path__, root.__name__ + '.'): importlib.import_module(m.name)\n"
        "bad = sorted(n for n in sys.modules if n.split('.')[0] in ('timm', 'torchvision'))\n"
        "print(bad); sys.exit(1 if bad else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
