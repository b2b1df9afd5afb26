"""docs/python-api.md shows the functions as they are (issue 49, point 2): every signature in the
first column of its tables is read (`name(a, b=1, *, c=None, **rest)`, `...` standing for
parameters left out) and compared with `inspect.signature` of the function: each parameter shown
exists, in the same order, of the same kind (before or after `*`, `**`), with the same default or
none; without `...` none is left out. Every public function of both packages is shown there, and
every call of one in the Python blocks of the README and the docs binds to its signature."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Any

import pytest
from support import ROOT

from featcache import stage1_api as stage1
from tosca_heads import stage2_api as stage2

PAGE = ROOT / "docs" / "python-api.md"
MODULES = {"featcache": stage1, "tosca_heads": stage2}
FUNCTIONS = {
    name: getattr(module, name)
    for module in MODULES.values()
    for name in module.__all__
    if inspect.isfunction(getattr(module, name))
}
SIGNATURE = re.compile(r"`(\w+)\(([^`]*)\)`")
MORE = "..."  # parameters left out
P = inspect.Parameter


def shown_signatures(text: str) -> list[tuple[str, str]]:
    """(name, parameter text) of each `name(...)` in a table row's first cell naming a public function."""
    found = []
    for line in text.splitlines():
        if line.startswith("|") and line.count("|") >= 3:
            first = line.split("|")[1]
            found += [(m[1], m[2]) for m in SIGNATURE.finditer(first) if m[1] in FUNCTIONS]
    return found


def split_top_level(text: str) -> list[str]:
    """'a, b=(1, 2), c="x,y"' -> ['a', 'b=(1, 2)', 'c="x,y"']: commas inside brackets or quotes kept."""
    parts, depth, quote, current = [], 0, "", ""
    for char in text:
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
            continue
        current += char
    return [*parts, current.strip()] if current.strip() else parts


def parsed(text: str) -> list[tuple[str, Any, Any]]:
    """The parameters shown: (name, kind, default or P.empty); (MORE, None, None) for `...`."""
    found: list[tuple[str, Any, Any]] = []
    kind = P.POSITIONAL_OR_KEYWORD
    for piece in split_top_level(text):
        if piece == MORE:
            found.append((MORE, None, None))
        elif piece == "*":
            kind = P.KEYWORD_ONLY
        elif piece.startswith("**"):
            found.append((piece[2:], P.VAR_KEYWORD, P.empty))
        elif piece.startswith("*"):
            found.append((piece[1:], P.VAR_POSITIONAL, P.empty))
            kind = P.KEYWORD_ONLY
        else:
            name, eq, default = piece.partition("=")
            found.append((name.strip(), kind, ast.literal_eval(default) if eq else P.empty))
    return found


def disagreements(name: str, text: str) -> list[str]:
    """How the signature shown for `name` differs from the function's (none: it agrees)."""
    real = list(inspect.signature(FUNCTIONS[name]).parameters.values())
    index = {p.name: i for i, p in enumerate(real)}
    shown = parsed(text)
    said, last = [], -1
    for shown_name, kind, default in shown:
        if shown_name == MORE:
            continue
        if shown_name not in index:
            said.append(f"{name}: no parameter {shown_name!r} (it has {', '.join(index)})")
            continue
        p = real[index[shown_name]]
        if index[shown_name] <= last:
            said.append(f"{name}: {shown_name!r} shown out of order")
        last = index[shown_name]
        if p.kind != kind:
            said.append(f"{name}: {shown_name!r} is {p.kind.description}, shown {kind.description}")
        if (p.default is not P.empty or default is not P.empty) and p.default != default:
            said.append(
                f"{name}: {shown_name}={p.default!r}, shown {'no default' if default is P.empty else repr(default)}"
            )
    if all(s != MORE for s, _, _ in shown):
        missing = [p.name for p in real if p.name not in {s for s, _, _ in shown}]
        if missing:
            said.append(f"{name}: left out without '...': {', '.join(missing)}")
    return said


def test_the_parser_reads_what_a_signature_says() -> None:
    assert parsed('a, b=(1, 2), *, c="x,y", ..., **rest') == [
        ("a", P.POSITIONAL_OR_KEYWORD, P.empty),
        ("b", P.POSITIONAL_OR_KEYWORD, (1, 2)),
        ("c", P.KEYWORD_ONLY, "x,y"),
        (MORE, None, None),
        ("rest", P.VAR_KEYWORD, P.empty),
    ]
    # what the check finds in the signatures the page showed before issue 49
    assert disagreements("sweep", "store, grid, out, *, preset=None, jobs=1, **fixed") == [
        "sweep: out=None, shown no default",
        "sweep: preset='paper', shown None",
        "sweep: jobs=None, shown 1",
        "sweep: left out without '...': group, scheduler, init_cls, increment, val_fraction, val_seed, "
        "device, rank_by, keep_modules, log, scenario, scenario_values, read_as",
    ]
    (said,) = disagreements("register_metric", "name, fn, ...")
    assert said.startswith("register_metric: no parameter 'fn' (it has name, label, summary, ")
    assert disagreements("predict", "run, features, router=None, ...") == [
        "predict: 'router' is keyword-only, shown positional or keyword"
    ]


def test_every_signature_the_page_shows_is_the_functions() -> None:
    shown = shown_signatures(PAGE.read_text())
    assert shown, "no signature found on the page"
    said = [line for name, text in shown for line in disagreements(name, text)]
    assert not said, "docs/python-api.md disagrees with the code:\n" + "\n".join(said)


def test_every_public_function_is_shown_on_the_page() -> None:
    shown = {name for name, _ in shown_signatures(PAGE.read_text())}
    assert set(FUNCTIONS) <= shown, f"not shown in docs/python-api.md: {sorted(set(FUNCTIONS) - shown)}"


def _calls(code: str) -> list[ast.Call]:
    """The calls of `featcache.NAME(...)` and `tosca_heads.NAME(...)` in a block, and of a public
    function imported by name (`from tosca_heads import fit`)."""
    tree = ast.parse(code)
    imported = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module in MODULES
        for alias in node.names
    }
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in MODULES:
            found.append((f.attr, node))
        elif isinstance(f, ast.Name) and f.id in imported:
            found.append((f.id, node))
    return [call for name, call in found if name in FUNCTIONS]


@pytest.mark.parametrize(
    "page", [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))], ids=lambda p: p.name
)
def test_every_call_in_a_python_block_binds_to_the_signature(page: Path) -> None:
    said = []
    for block in re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S):
        for call in _calls(block):
            name = call.func.attr if isinstance(call.func, ast.Attribute) else call.func.id
            if any(isinstance(a, ast.Starred) for a in call.args) or any(
                k.arg is None for k in call.keywords
            ):
                continue
            try:
                inspect.signature(FUNCTIONS[name]).bind(*call.args, **{k.arg: k.value for k in call.keywords})
            except TypeError as error:
                said.append(f"{page.name}: {ast.unparse(call)}: {error}")
    assert not said, "\n".join(said)
