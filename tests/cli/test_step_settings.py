"""The settings a user can set (TOSCA_STEP, TOSCA_STEP_THREADS, TOSCA_OVERLAP_EVAL, the kernel cache
and every other one tosca_foundation.settings knows) are checked like flags, in one place,
before a command writes anything, and a refusal is one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.messages import after_the_plan
from support.stores import synthetic_store
from typer.testing import CliRunner

from cli import app
from tosca_heads.engine import native

needs_native = pytest.mark.skipif(native.compiler() is None, reason="no C compiler here")


BAD_STEP_SETTINGS = [  # (environment, the one line it must give)
    ({"TOSCA_STEP": "fastest"}, "unknown TOSCA_STEP='fastest': use one of auto, native, torch"),
    ({"TOSCA_STEP_THREADS": "8"}, "TOSCA_STEP_THREADS='8': use 1 or 2"),
    ({"TOSCA_STEP_THREADS": "0"}, "TOSCA_STEP_THREADS='0': use 1 or 2"),
    (
        {"TOSCA_OVERLAP_EVAL": "2"},
        "TOSCA_OVERLAP_EVAL='2': use 1 (evaluate on a second thread) or 0 (after each task)",
    ),
    (
        {"TOSCA_OVERLAP_EVAL": "yes"},
        "TOSCA_OVERLAP_EVAL='yes': use 1 (evaluate on a second thread) or 0 (after each task)",
    ),
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
    lines = after_the_plan(result.output)  # found when the engine starts, after fit's plan
    assert len(lines) == 1 and "writable by others" in lines[0]


BAD_SETTINGS = {  # a value no setting may take, for each one tosca reads that has a form
    "TOSCA_STEP": "fastest",
    "TOSCA_STEP_THREADS": "3",
    "TOSCA_LINALG_THREADS": "0",
    "TOSCA_OVERLAP_EVAL": "yes",
    "TOSCA_PROGRESS": "on",
    "TOSCA_PROGRESS_EVERY": "soon",
    "TOSCA_MEMORY_LIMIT": "8G",
    "TOSCA_SCHEDULER_TIMEOUT": "0",
    "TOSCA_MEMORY_BUDGET": "lots",
    "TOSCA_PLUGINS": "my-plugin.py",
}
PLACES = ("TOSCA_KERNEL_CACHE", "TOSCA_DATA", "TOSCA_PAPER_DATA")  # any path: checked where it is used


def test_every_setting_is_checked_like_a_flag_before_any_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tosca_foundation.errors import UserError
    from tosca_foundation.settings import SETTINGS, check_settings

    assert set(BAD_SETTINGS) | set(PLACES) == set(SETTINGS)
    for name, value in BAD_SETTINGS.items():
        monkeypatch.setenv(name, value)
        with pytest.raises(UserError, match=name) as refused:
            check_settings()
        assert "\n" not in str(refused.value)
        monkeypatch.undo()
    monkeypatch.setenv("TOSCA_OVERLAP_EVAL", "yes")
    result = CliRunner().invoke(app, ["cache", "ls", "--cache-dir", str(tmp_path)])  # any command
    assert result.exit_code == 2 and result.output.strip().startswith("error: TOSCA_OVERLAP_EVAL='yes'")
    monkeypatch.setenv("TOSCA_OVERLAP_EVAL", "")  # empty: unset, as for any variable
    check_settings()


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "-inf", "1e400", "3601", "30s", "0x10", "１０"])
def test_the_scheduler_bound_takes_only_a_finite_number_of_seconds(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 57, point 6: TOSCA_SCHEDULER_TIMEOUT now also bounds a silent scheduler and a cluster
    without a worker mid-run; a bound that is none (not finite, not positive, over an hour) is one
    line before any command runs, never a wait without end."""
    from tosca_foundation.errors import UserError
    from tosca_foundation.settings import check_settings

    monkeypatch.setenv("TOSCA_SCHEDULER_TIMEOUT", value)
    with pytest.raises(
        UserError,
        match=r"TOSCA_SCHEDULER_TIMEOUT=.* is not a number of seconds \(more than 0, at most 3600\)",
    ):
        check_settings()
    monkeypatch.setenv("TOSCA_SCHEDULER_TIMEOUT", "2.5")
    check_settings()
