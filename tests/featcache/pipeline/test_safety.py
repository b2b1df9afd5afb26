"""Safety: checkpoints never unpickle objects, names cannot reach outside the cache root, and
`--overwrite` replaces only tosca stores."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
import torch
from support import ROOT
from support.commands import said
from support.images import FAST_CNN, TINY_VIT
from typer.testing import CliRunner

from cli import app
from featcache.backbones import read_state_dict
from featcache.store import check_name
from tosca_foundation.errors import UserError

runner = CliRunner()


class _Payload:
    """Unpickling this runs `os.system` (what a hostile checkpoint does)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.marker}",))


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def test_a_checkpoint_with_objects_is_refused_and_never_run(tmp_path: Path, image_tree: Path) -> None:
    marker = tmp_path / "PWNED"
    weights = tmp_path / "evil.pt"
    torch.save({"state_dict": {"w": torch.zeros(2)}, "extra": _Payload(marker)}, weights)
    with pytest.raises(UserError, match="cannot read weights"):
        read_state_dict(weights)
    result = runner.invoke(
        app,
        [
            *("extract", "--model", FAST_CNN, "--dataset", "imagefolder", "--data-root", str(image_tree)),
            *("--weights", str(weights), "--store", str(tmp_path / "s.zarr")),
        ],
    )
    lines = said(result.output)  # the plan, then the weights read and refused
    assert result.exit_code == 2 and len(lines) == 1 and "cannot read weights" in lines[0], lines
    assert "weights_only" in lines[0] or "Unsupported global" in lines[0], lines
    assert not marker.exists() and not (tmp_path / "s.zarr").exists()


def _calls(path: Path) -> list[ast.Call]:
    return [node for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Call)]


def _name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        base = func.value.id if isinstance(func.value, ast.Name) else "?"
        return f"{base}.{func.attr}"
    return func.id if isinstance(func, ast.Name) else "?"


def test_no_code_loads_pickles_or_evaluates_text() -> None:
    """Every torch.load passes weights_only=True; nothing calls pickle, eval, exec or yaml.load."""
    sources = [
        ROOT / "cli.py",
        *(ROOT / "tosca_cli").rglob("*.py"),
        *(ROOT / "featcache").rglob("*.py"),
        *(ROOT / "tosca_foundation").rglob("*.py"),
        *(ROOT / "tosca_heads").rglob("*.py"),
    ]
    unsafe = []
    for path in sources:
        for call in _calls(path):
            name = _name(call)
            if name == "torch.load":
                safe = any(
                    k.arg == "weights_only" and isinstance(k.value, ast.Constant) and k.value.value is True
                    for k in call.keywords
                )
                if not safe:
                    unsafe.append(f"{path.name}:{call.lineno} torch.load without weights_only=True")
            elif name in ("pickle.load", "pickle.loads", "eval", "exec", "yaml.load", "marshal.loads"):
                unsafe.append(f"{path.name}:{call.lineno} {name}")
    assert unsafe == []
    assert len(sources) > 20  # the walk found the packages


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--model", f"{TINY_VIT}./../../escaped"], "unsafe model name"),
        (["--model", "../../escaped"], "unknown model '../../escaped'"),
        (["--model", "/tmp/escaped"], "unknown model '/tmp/escaped'"),
        (["--dataset", "../escaped"], "unsafe dataset name '../escaped'"),
        (["--dataset", "/tmp/escaped"], "unsafe dataset name '/tmp/escaped'"),
        (["--policy", "../escaped"], "unknown --policy '../escaped'"),
    ],
)
def test_names_cannot_write_outside_the_cache_root(
    tmp_path: Path, image_tree: Path, flags: list[str], message: str
) -> None:
    work = tmp_path / "work"
    cache = work / "cache"
    cache.mkdir(parents=True)
    base = {"--model": TINY_VIT, "--dataset": "imagefolder"}
    base.update(dict(zip(flags[::2], flags[1::2], strict=True)))
    args = ["extract", *(x for kv in base.items() for x in kv), "--data-root", str(image_tree)]
    before = _snapshot(tmp_path)
    result = runner.invoke(app, [*args, "--cache-dir", str(cache), "--random-init"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and message in lines[0], lines
    assert _snapshot(tmp_path) == before
    assert not Path("/tmp/escaped").exists() and not Path("/tmp/escaped.zarr").exists()


def test_check_name() -> None:
    for ok in ("vit_b16", "vit_base_patch16_224.augreg_in21k", "effnet_lite0-pilot", "cifar100"):
        assert check_name("model name", ok) == ok
    for bad in ("..", "../x", "a/b", "/abs", "a\\b", "", ".hidden", "a..b", "x" * 300, "a b"):
        with pytest.raises(UserError, match="unsafe model name"):
            check_name("model name", bad)


def test_overwrite_replaces_only_stores(tmp_path: Path, image_tree: Path) -> None:
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    a_file = tmp_path / "notes.txt"
    a_file.write_text("keep me")
    before = _snapshot(tmp_path)
    for target in (precious, a_file):
        result = runner.invoke(
            app,
            [
                *("extract", "--model", TINY_VIT, "--dataset", "imagefolder", "--data-root", str(image_tree)),
                *("--random-init", "--store", str(target), "--overwrite"),
            ],
        )
        lines = [line for line in result.output.splitlines() if line.strip() and "warning" not in line]
        said = (  # a file is no folder at all: refused where every output flag is checked
            f"error: --store {target} is a file, not a folder"
            if target == a_file
            else f"error: refusing to replace {target}: it is not a tosca store (--overwrite only replaces "
            "stores); pass a new --store path"
        )
        assert result.exit_code == 2 and lines == [said], lines
    assert _snapshot(tmp_path) == before
