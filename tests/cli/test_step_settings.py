"""The compute settings a user can set (TOSCA_STEP, TOSCA_STEP_THREADS, the kernel cache) are
checked before a command writes anything, and a refusal is one line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.stores import synthetic_store
from typer.testing import CliRunner

from cli import app
from tosca_heads.engine import native

needs_native = pytest.mark.skipif(native.compiler() is None, reason="no C compiler here")


@pytest.fixture
def kernel_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    folder = tmp_path / "cache" / "kernels"
    monkeypatch.setenv("TOSCA_KERNEL_CACHE", str(folder))
    native.forget()
    yield folder
    native.forget()


BAD_STEP_SETTINGS = [  # (environment, the one line it must give)
    ({"TOSCA_STEP": "fastest"}, "unknown TOSCA_STEP='fastest': use one of auto, native, torch"),
    ({"TOSCA_STEP_THREADS": "8"}, "TOSCA_STEP_THREADS='8': use 1 or 2"),
    ({"TOSCA_STEP_THREADS": "0"}, "TOSCA_STEP_THREADS='0': use 1 or 2"),
]


@pytest.mark.parametrize(("env", "message"), BAD_STEP_SETTINGS)
def test_a_bad_step_setting_stops_fit_with_one_line_and_no_run(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=4)
    args = [
        "fit",
        "--store",
        str(store.path),
        "--run",
        str(tmp_path / "run"),
        "--init-cls",
        "2",
        "--increment",
        "2",
    ]
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 2
    assert result.output.strip() == f"error: {message}"
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("env", "message"), BAD_STEP_SETTINGS)
def test_a_bad_step_setting_stops_sweep_before_its_folder(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=4)
    out = tmp_path / "sweep"
    args = ["sweep", "--store", str(store.path), "--r", "2", "--l1", "0", "--jobs", "1", "--out", str(out)]
    args += ["--init-cls", "2", "--increment", "2"]
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == f"error: {message}"
    assert not out.exists()


@needs_native
def test_the_cache_refusal_is_one_line_from_the_command_line(
    kernel_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kernel_cache.mkdir(parents=True)
    kernel_cache.chmod(0o777)
    monkeypatch.setenv("TOSCA_STEP", "auto")
    store = synthetic_store(tmp_path / "s.zarr", classes=4)
    args = ["fit", "--store", str(store.path), "--run", str(tmp_path / "run"), "--device", "cpu"]
    result = CliRunner().invoke(app, [*args, "--epochs", "1", "--init-cls", "2", "--increment", "2"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "writable by others" in lines[0]
