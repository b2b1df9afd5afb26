"""The docs cannot drift from the tests: every test that docs/guarantees.md names exists."""

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
