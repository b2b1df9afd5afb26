"""The docs cannot drift: every test that docs/guarantees.md names exists, and every `tosca` command and
flag the README and docs name exists. (Every Python example in them runs, as a file, in a kernel and
under `python -c`: tests/test_called_from_anywhere.py.)"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from support import ROOT


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
    # each baseline's own options, --METHOD-NAME, come from its class's declaration (baseline_registry)
    from tosca_heads.method.baseline_registry import BASELINES, as_flag, key_of, params_of

    commands["baselines"] |= {as_flag(key_of(m, p)) for m in BASELINES for p in params_of(m)}
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


def test_the_readme_stays_a_five_minute_read() -> None:
    """Issue 57, point 17: the README is what a newcomer reads first, at most 250 lines; the
    detail goes to docs/ (the demo's steps and times: docs/demo.md), which it links."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    linked = set(re.findall(r"\]\((docs/[\w-]+\.md)(?:#[\w-]+)?\)", text))
    assert "docs/demo.md" in linked
    assert all((ROOT / page).is_file() for page in linked), linked
