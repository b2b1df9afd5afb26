"""Never overwrite what tosca did not write: every writer claims its folder first, and refuses one
that holds someone else's files, a folder of another kind, or a store, in one line and before
anything is written (not even a lock file beside it); folders written before the marker existed
are still taken over."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from support.messages import after_the_plan
from support.stores import synthetic_store
from typer.testing import CliRunner

from cli import app
from tosca_foundation.errors import UserError
from tosca_foundation.folders import MARKER, check_output, marked_kind
from tosca_foundation.text import printable

runner = CliRunner()
SPLIT = ["--init-cls", "2", "--increment", "2", "--device", "cpu"]
QUICK = ["--epochs", "1", "--r", "4", "--s", "4"]


def _invoke(*args: object) -> tuple[int, list[str]]:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, after_the_plan(result.output)


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return synthetic_store(tmp_path / "store.zarr", classes=4, per_class=10).path


def _writers(store: Path, target: Path) -> dict[str, list[object]]:
    return {
        "fit --run": ["fit", "--store", store, "--run", target, *QUICK, *SPLIT],
        "sweep --out": [
            "sweep",
            "--store",
            store,
            "--r",
            "4",
            "--epochs",
            "1",
            "--jobs",
            "1",
            "--out",
            target,
            *SPLIT,
        ],
        "baselines --out": [
            "baselines",
            "--store",
            store,
            "--no-tosca",
            "--methods",
            "simplecil",
            "--out",
            target,
            *SPLIT,
        ],
    }


@pytest.mark.parametrize("writer", ["fit --run", "sweep --out", "baselines --out"])
def test_a_folder_of_someone_elses_files_is_refused(writer: str, store: Path, tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "results.csv").write_text("my,precious,data\n")
    (mine / "metrics.json").write_text("{}")
    before = _snapshot(tmp_path)
    code, lines = _invoke(*_writers(store, mine)[writer])
    flag = writer.split()[1]
    assert code == 2 and lines == [
        f"error: refusing to write into {mine}: it holds files tosca did not write (metrics.json, "
        f"results.csv); pass a new or empty folder as {flag}"
    ], lines
    assert _snapshot(tmp_path) == before and not (tmp_path / "mine.lock").exists()


@pytest.mark.parametrize("writer", ["fit --run", "sweep --out", "baselines --out"])
@pytest.mark.parametrize("where", ["the store", "inside the store"])
def test_a_store_is_never_written_into(writer: str, where: str, store: Path, tmp_path: Path) -> None:
    target = store if where == "the store" else store / "train" / "results"
    before = _snapshot(tmp_path)
    code, lines = _invoke(*_writers(store, target)[writer])
    # the store is named, not the `train` group (a zarr.json of its own) the folder lies in
    described = "is a zarr store:" if where == "the store" else f"lies inside the zarr store {store}:"
    assert code == 2 and len(lines) == 1 and described in lines[0], lines
    assert _snapshot(tmp_path) == before


def test_tosca_folders_are_not_mixed_up(store: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert _invoke(*_writers(store, run)["fit --run"])[0] == 0
    assert marked_kind(run) == "run"
    code, lines = _invoke(*_writers(store, run)["sweep --out"])
    assert code == 2 and lines == [
        f"error: --out {run} is a tosca run folder, not a sweep folder: pass another --out"
    ]


@pytest.mark.heavy  # 4 s: a fit, a sweep and baselines
def test_folders_written_before_the_marker_are_taken_over(store: Path, tmp_path: Path) -> None:
    """Runs, sweeps and baselines folders that today's tosca wrote carry no marker: they resume."""
    for writer, target, kind in (
        ("fit --run", tmp_path / "run", "run"),
        ("sweep --out", tmp_path / "sweep", "sweep"),
        ("baselines --out", tmp_path / "baselines", "baselines"),
    ):
        argv = _writers(store, target)[writer]
        assert _invoke(*argv)[0] == 0
        (target / MARKER).unlink()
        code, lines = _invoke(*argv)
        assert code == 0, (writer, lines)
        assert marked_kind(target) == kind, writer


def test_an_empty_folder_is_claimed(store: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _invoke(*_writers(store, empty)["baselines --out"])[0] == 0
    assert (empty / "simplecil" / "metrics.json").is_file() and marked_kind(empty) == "baselines"
    shutil.rmtree(empty)


def test_a_users_file_named_like_tosca_output_is_not_taken_for_tosca(store: Path, tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "comparison.csv").write_text("my,own,table\n")
    code, lines = _invoke(*_writers(store, mine)["baselines --out"])
    assert code == 2 and "it holds files tosca did not write (comparison.csv)" in lines[0], lines
    assert (mine / "comparison.csv").read_text() == "my,own,table\n"


def test_an_output_folder_nothing_can_be_made_in_is_one_line_before_anything(tmp_path: Path) -> None:
    """One rule (`check_output`) for every output folder: under a file, a device, a dangling link or
    a link into /proc, or in /proc, /sys, /dev: refused naming what is in the way; /dev/shm (a disk
    in memory) and a link to a real folder are fine; a name's control characters are shown inert."""
    (tmp_path / "file").write_text("x")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "toproc").symlink_to("/proc")
    (tmp_path / "real").mkdir()
    (tmp_path / "toreal").symlink_to(tmp_path / "real")
    refused = {
        tmp_path / "file" / "a" / "b": f"lies under {tmp_path / 'file'}, which is a file, not a folder",
        tmp_path / "dangling" / "a": f"lies under {tmp_path / 'dangling'}, which is a dangling link",
        tmp_path / "toproc" / "a": "lies in /proc, the kernel's view of processes",
        Path("/proc/self/x"): "lies in /proc",
        Path("/sys/kernel/x"): "lies in /sys, the kernel's view of settings",
        Path("/dev/null/x"): "lies in /dev, the kernel's view of devices",
        tmp_path / "file": "is a file, not a folder",
        tmp_path / "file\x1b]0;pwned\x07" / "x": "nothing can be made under it",
    }
    (tmp_path / "file\x1b]0;pwned\x07").write_text("x")
    for path, said in refused.items():
        with pytest.raises(UserError, match=re.escape(said)) as caught:
            check_output(path, "--out")
        assert str(caught.value).startswith(f"--out {printable(path)} ") and "\x1b" not in str(caught.value)
    for fine in (tmp_path / "new" / "deeper", tmp_path / "toreal" / "x", Path("/dev/shm/tosca-x")):
        check_output(fine, "--out")
    assert not (tmp_path / "new").exists() and not Path("/dev/shm/tosca-x").exists()  # a check writes nothing


def test_the_python_api_checks_its_output_folders_as_the_command_line_does(
    store: Path, tmp_path: Path
) -> None:
    from tosca_heads import stage2_api

    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match=r"^run /proc/run lies in /proc"):
        stage2_api.fit(store, run="/proc/run", init_cls=2, increment=2, device="cpu")
    with pytest.raises(UserError, match=r"^keep_modules .* lies under .*file, which is a file"):
        stage2_api.sweep(
            store, {"r": [4]}, keep_modules=tmp_path / "file" / "km", init_cls=2, increment=2, device="cpu"
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "store.zarr"]
