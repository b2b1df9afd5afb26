"""Plug-ins are held to the command's rules (tosca_foundation.plugins.foreign_code,
tosca_cli.terminal.answers_only): an exit or an interrupt a plug-in raises, at import or in the
middle of a command, is one line and a failed exit code, never a silent exit 0 or a traceback; what
it prints goes to stderr, so `--json` stays JSON, in the command and in its helper processes."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from support.stores import synthetic_store
from typer.testing import CliRunner

from cli import app
from tosca_foundation import processes
from tosca_heads.running import runs
from tosca_heads.trackers.logger_registry import LOGGERS, Logger

runner = CliRunner()
FIT = ["--init-cls", "2", "--increment", "2", "--device", "cpu", "--epochs", "1", "--r", "4", "--s", "4"]


def _plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, body: str) -> None:
    (tmp_path / f"{name}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("TOSCA_PLUGINS", name)
    monkeypatch.delitem(sys.modules, name, raising=False)  # and again when the test ends


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("raise SystemExit(0)\n", "failed to import (it raised SystemExit 0, which would end the command)"),
        (
            "raise GeneratorExit('bye')\n",
            "failed to import (it raised GeneratorExit bye, which would end the command)",
        ),
        (
            "raise KeyboardInterrupt\n",
            "was interrupted while it was imported (KeyboardInterrupt); nothing ran",
        ),
    ],
    ids=["SystemExit(0)", "GeneratorExit", "KeyboardInterrupt"],
)
def test_an_exit_or_interrupt_at_import_is_one_line(
    body: str, said: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _plugin(tmp_path, monkeypatch, "leaving_plugin", body)
    result = runner.invoke(app, ["list", "--json"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0] == f"error: plug-in 'leaving_plugin' {said}"


def test_a_plugin_that_prints_never_breaks_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _plugin(tmp_path, monkeypatch, "chatty_plugin", "print('hello from a plug-in')\n")
    result = runner.invoke(app, ["list", "--json"])
    assert result.exit_code == 0, result.output
    assert isinstance(json.loads(result.stdout), dict)
    assert "hello from a plug-in" in result.stderr


class _Chatty(Logger):
    name = "chatty"

    def start(self, name: str, parent: Any) -> str:
        print("started", name)
        return name

    def params(self, run: Any, params: dict[str, Any]) -> None:
        print("params", len(params))

    def metrics(self, run: Any, metrics: Sequence[Any]) -> None:
        print("metrics", len(metrics))

    def artifacts(self, run: Any, files: Sequence[Path]) -> None:
        print("files", len(files))

    def end(self, run: Any, ok: bool) -> None:
        print("end", ok)


class _Quitter(_Chatty):
    name = "quitter"

    def metrics(self, run: Any, metrics: Sequence[Any]) -> None:
        raise SystemExit(0)


def test_a_logger_that_prints_or_exits_mid_fit(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=4).path
    for logger in (_Chatty, _Quitter):
        LOGGERS.add(logger.name, logger, module=__name__)
        request.addfinalizer(lambda name=logger.name: LOGGERS.__delitem__(name))
    result = runner.invoke(
        app, ["fit", "--store", str(store), "--run", str(tmp_path / "a"), *FIT, "--log", "chatty", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["run"] == str(tmp_path / "a")  # stdout: the answer alone
    assert "started" in result.stderr and "end True" in result.stderr
    result = runner.invoke(
        app, ["fit", "--store", str(store), "--run", str(tmp_path / "b"), *FIT, "--log", "quitter"]
    )
    # was: exit 0, no word, no metrics.json; a failing tracker costs the run nothing and is said
    warnings = [line for line in result.stderr.splitlines() if "--log quitter" in line]
    assert result.exit_code == 0 and len(warnings) == 1, result.output
    assert warnings[0].startswith("warning: --log quitter stopped (") and "raised SystemExit 0" in warnings[0]
    assert (tmp_path / "b" / "metrics.json").is_file()


def test_an_exit_from_foreign_code_inside_a_command_is_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any code outside tosca that a command calls (a router or a baseline of a plug-in, a library)
    and that raises SystemExit: tosca's commands end with typer.Exit, so that exit is foreign."""
    store = synthetic_store(tmp_path / "s.zarr", classes=4).path

    def leaves(*args: Any, **kwargs: Any) -> None:
        raise SystemExit(0)

    monkeypatch.setattr(runs, "fit", leaves)
    result = runner.invoke(app, ["fit", "--store", str(store), "--run", str(tmp_path / "r"), *FIT])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith(
        "error: the command was ended by code outside tosca (SystemExit 0: a plug-in?)"
    )


def test_helper_processes_print_to_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loader and Dask workers share the command's stdout: whatever runs in them prints to stderr."""
    monkeypatch.setattr(processes, "die_with_parent", lambda parent=None: True)
    monkeypatch.setattr(sys, "stdout", sys.stdout)
    processes.loader_worker_start(0)
    assert sys.stdout is sys.stderr
