"""Names are data, never terminal commands: a class, file or folder named with control characters
is shown escaped in tables, progress lines and errors, whatever command shows it."""

from __future__ import annotations

from pathlib import Path

from support.images import FAST_CNN, make_image_tree
from typer.testing import CliRunner

from cli import app
from tosca_foundation.text import printable

runner = CliRunner()
EVIL = "b\x1b]0;PWNED\x07\x1b[31m\u202e"


def _run(*args: object) -> str:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.output


def test_printable_escapes_controls_and_bidi_only() -> None:
    assert printable("plain name é ü") == "plain name é ü"
    assert printable(EVIL) == "b\\x1b]0;PWNED\\x07\\x1b[31m\\u202e"
    assert printable("two\nlines\tand a tab") == "two\\x0alines\\x09and a tab"


def test_no_command_lets_a_control_byte_through(tmp_path: Path) -> None:
    tree = make_image_tree(tmp_path / f"imgs{EVIL}", classes=2, train=2, test=1)
    evil_class = tree / "train" / f"class{EVIL}"
    (tree / "train" / "class_1").rename(evil_class)
    (tree / "test" / "class_1").rename(tree / "test" / f"class{EVIL}")
    store = tmp_path / f"s{EVIL}.zarr"
    common = ["--random-init", "--workers", "0", "--device", "cpu"]
    extract = ["extract", "--model", FAST_CNN, "--dataset", "imagefolder", "--data-root", tree, *common]
    run = tmp_path / f"run{EVIL}"
    outputs = [
        _run(*extract, "--store", store),
        _run("cache", "info", store),
        _run("cache", "ls", "--cache-dir", tmp_path),
        _run("cache", "verify", store),
        _run(
            "fit",
            "--store",
            store,
            "--run",
            run,
            "--device",
            "cpu",
            "--epochs",
            "1",
            "--init-cls",
            "1",
            "--increment",
            "1",
        ),
        _run("routers", run),
        _run("predict", run, tree / "test" / f"class{EVIL}", "--device", "cpu"),
    ]
    (evil_class / f"broken{EVIL}.png").write_bytes(b"not a png")
    outputs.append(_run(*extract, "--store", tmp_path / "second.zarr"))
    outputs.append(_run("eval", tmp_path / f"missing{EVIL}"))
    for output in outputs:
        assert "\x1b" not in output and "\x07" not in output and "\u202e" not in output, output
    assert "class" + printable(EVIL) in outputs[6]  # predict names the class, escaped
    assert "broken" + printable(EVIL) in outputs[7]  # the error names the file, escaped
