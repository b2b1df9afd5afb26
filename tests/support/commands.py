"""What tests of the command line share: running a command in-process, the lines a user reads
(warnings left out), the one-line refusal every user mistake ends in, and a small extraction
request on a tiny image tree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from cli import app
from featcache.extract_request import ExtractRequest
from support.images import TINY_VIT

runner = CliRunner()


PLAN = "extract: "  # `tosca extract`'s first line, said before the backbone loads


def said(output: str, drop: str = "warning") -> list[str]:
    """The non-empty lines of a command's output, without the lines that start with `drop` and an
    extraction's plan line (a mistake found in the images or the weights is refused after it; one
    in the flags alone before it: tests/cli/test_bad_input.py)."""
    return [
        line for line in output.strip().splitlines() if line.strip() and not line.startswith((drop, PLAN))
    ]


def invoke(*args: Any, drop: str = "warning") -> tuple[int, list[str]]:
    """(exit code, lines said) of `tosca ARGS` run in-process; a traceback fails the test."""
    result = runner.invoke(app, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"tosca {' '.join(map(str, args))} raised {result.exception!r}")
    return result.exit_code, said(result.output, drop)


def one_line(lines: list[str], *expected: str) -> str:
    """The one line a mistake ends in: it starts with `error: ` and holds each of `expected`."""
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    for part in expected:
        assert part in lines[0], (part, lines[0])
    return lines[0]


def refusal(code: int, lines: list[str], *expected: str) -> str:
    """A refusal: exit code 2 and `one_line`."""
    assert code == 2, (code, lines)
    return one_line(lines, *expected)


def error_line(args: list[str]) -> str:
    """The one error line of a refused command (exit code 2) that may have said its outline first
    (`tosca import`'s, `tosca extract`'s)."""
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.strip().splitlines() if line.startswith("error")]
    assert len(lines) == 1, result.output
    return lines[0]


def extract_request(tmp_path: Path, tree: Path, name: str, **kw: Any) -> ExtractRequest:
    """A tiny random-init ViT extraction of `tree` into tmp_path/NAME.zarr, on the CPU, no workers."""
    args: dict[str, Any] = dict(
        model=TINY_VIT,
        dataset="imagefolder",
        data_root=tree,
        cache_dir=tmp_path / "cache",
        store=tmp_path / f"{name}.zarr",
        random_init=True,
        batch_size=4,
        workers=0,
        chunk_size=8,
        device="cpu",
    )
    args.update(kw)
    return ExtractRequest(**args)
