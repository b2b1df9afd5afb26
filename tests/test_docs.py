"""The docs cannot drift: every test that docs/guarantees.md names exists, every `tosca` command and
flag the README and docs name exists, and every Python example in them runs (on tiny data)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import ROOT
from support.stores import synthetic_store


def _tests_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test")
    }


def test_every_test_the_guarantees_name_exists() -> None:
    text = (ROOT / "docs" / "guarantees.md").read_text()
    named = re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?`", text)
    assert len(named) > 30
    for file, test in named:
        path = ROOT / file
        assert path.is_file(), file
        if test:
            assert test in _tests_in(path), f"{file}::{test}"


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _cli() -> dict[str, set[str]]:
    """Every command path of `tosca` (e.g. "cache verify") and its option spellings."""
    import typer.main

    from cli import app

    root = typer.main.get_command(app)
    commands: dict[str, set[str]] = {}
    # `tosca --version`, `tosca --progress lines CMD`: the app's own options go with any command
    shared = {o for p in root.params for o in (*p.opts, *p.secondary_opts)}

    def walk(group: object, prefix: str) -> None:
        for name, command in group.commands.items():  # type: ignore[attr-defined]
            path = f"{prefix}{name}"
            if hasattr(command, "commands"):
                walk(command, f"{path} ")
            options = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
            commands[path] = options | shared | {"--help"}

    walk(root, "")
    return commands


def test_every_command_and_flag_the_docs_name_exists() -> None:
    """A `tosca CMD ... --flag` in the README or docs: CMD is a command and --flag one of its
    options; a flag named alone in the docs is an option of some command."""
    commands = _cli()
    everything = set().union(*commands.values())
    wrong = []
    for path in DOCS:
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            for match in re.finditer(r"\btosca ((?:cache )?[a-z][a-z-]*)\b", line):
                name = match.group(1)
                if name not in commands:
                    if name.split()[0] in ("cache",) or re.match(
                        r"^(heads|extract|fit|eval|sweep|baselines|routers|predict|demo|suite)", name
                    ):
                        wrong.append(f"{path.name}:{number}: no command `tosca {name}`")
                    continue
                rest = line[match.end() :]
                rest = re.split(r"\btosca (?:cache )?[a-z]", rest)[0]  # up to the next command
                for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", rest):
                    if flag not in commands[name]:
                        wrong.append(f"{path.name}:{number}: `tosca {name}` has no {flag}")
            for flag in re.findall(r"`(--[a-z][a-z0-9-]*)", line):  # a flag on its own
                if flag not in everything:
                    wrong.append(f"{path.name}:{number}: no command has {flag}")
    assert not wrong, "\n".join(wrong)


def _python_blocks() -> list[tuple[str, str]]:
    blocks = []
    for path in DOCS:
        for i, block in enumerate(re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)):
            blocks.append((f"{path.name}#{i + 1}", block))
    return blocks


@pytest.mark.heavy
@pytest.mark.parametrize(("where", "code"), _python_blocks(), ids=[w for w, _ in _python_blocks()])
def test_every_python_example_in_the_docs_runs(tmp_path: Path, where: str, code: str) -> None:
    """Each block runs as written, in its own process, on tiny stand-in stores at the paths it names."""
    for store in set(re.findall(r"[\"']([\w/.-]+\.zarr)[\"']", code)):
        synthetic_store(tmp_path / store, classes=10, per_class=12, test_per_class=6)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"{where}:\n{done.stderr[-3000:]}"
    assert done.stdout.strip(), f"{where} printed nothing"
