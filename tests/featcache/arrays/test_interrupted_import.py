"""An import killed with SIGKILL at any of its writes never leaves a store marked done that is not
whole: `tosca cache verify` names its unfinished chunks (or there is no store yet), stage 2 refuses
it, and the same `tosca import` then finishes it to exactly the arrays of an uninterrupted import.
Children are real processes killed with SIGKILL at chosen writes (support.crash_harness)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr
from support.arrays import class_names, made_up_columns, write_as
from support.crash_harness import PauseAt, run, start
from typer.testing import CliRunner

from cli import app

KILLS = {
    "creating": PauseAt(r"\.zarr\.creating/", 5),
    "before-first-chunk": PauseAt(r"\.zarr/train/features/c/", 1),
    "mid-chunk-file": PauseAt(r"\.zarr/train/views/c/", 2, half_written=True),
    "values-not-checksum": PauseAt(r"\.zarr/test/checksums/c/", 1),
    "before-done-flag": PauseAt(r"\.zarr/train/done/c/", 3),
    "final-attrs": PauseAt(r"\.zarr/zarr\.json$", 1, half_written=True),
}
ARRAYS = ("features", "views", "labels", "ids", "done", "checksums")


def _args(source: Path, store: Path) -> list[str]:
    return [
        "import",
        str(source),
        "--store",
        str(store),
        "--encoder",
        "e5",
        "--modality",
        "text",
        "--chunk-size",
        "4",
    ]


def _arrays(path: Path) -> dict[str, np.ndarray]:
    group = zarr.open_group(str(path), mode="r")
    return {
        f"{split}/{name}": np.asarray(group[f"{split}/{name}"][:])
        for split in ("train", "test")
        for name in ARRAYS
        if name in group[split]
    }


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    base = tmp_path_factory.mktemp("import-crash")
    (source,) = write_as("npz", made_up_columns(3, 6, 4, views=2), class_names(3), base / "in")
    code, _, stderr = run(_args(source, base / "clean.zarr"), base / "clean-run")
    assert code == 0, stderr
    return source, _arrays(base / "clean.zarr")


IN_THE_FAST_SUITE = ("creating", "mid-chunk-file", "before-done-flag")


@pytest.mark.parametrize(
    "name", [pytest.param(k, marks=() if k in IN_THE_FAST_SUITE else pytest.mark.heavy) for k in KILLS]
)
def test_a_killed_import_is_never_done_and_the_rerun_finishes_it(
    name: str, tmp_path: Path, uninterrupted: tuple[Path, dict[str, np.ndarray]]
) -> None:
    source, reference = uninterrupted
    store = tmp_path / "killed.zarr"
    child = start(_args(source, store), tmp_path / "killed-run", KILLS[name])
    child.wait_paused()
    child.kill()
    assert child.process.exitcode == -9, name
    verified = CliRunner().invoke(app, ["cache", "verify", str(store)])
    fitted = CliRunner().invoke(app, ["fit", "--store", str(store), "--device", "cpu", "--epochs", "1"])
    if (store / "zarr.json").exists() and name == "final-attrs":
        assert verified.exit_code == 0, verified.output  # every chunk was done before the last touch
    else:
        assert verified.exit_code in (1, 2) and "OK" not in verified.output, (name, verified.output)
        assert fitted.exit_code == 2, (name, fitted.output)
        assert "not fully imported" in fitted.output or "not a feature store" in fitted.output, fitted.output
    code, stdout, stderr = run(_args(source, store), tmp_path / "rerun")
    assert code == 0, (name, stderr)
    assert "already done" in stdout or "nothing to do" in stdout, (name, stdout)
    resumed = _arrays(store)
    assert resumed.keys() == reference.keys()
    for key, value in reference.items():
        np.testing.assert_array_equal(resumed[key], value, err_msg=f"{key} after a kill at {name}")
    leftovers = [p for p in tmp_path.rglob("*") if p.name.endswith((".partial", ".creating", ".lock"))]
    assert leftovers == [], leftovers
