"""Called from anywhere: every Python block of the README and the docs runs to its printed results
as a plain `python file.py` (no `if __name__ == "__main__":` guard), in a Jupyter kernel (executed
by nbclient) and under `python -c`, on tiny stand-in stores at the paths it names, and prints the
same in all three. A sweep's workers never run the caller's script (tosca_foundation.cluster),
yet what the script registered reaches them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
from support import ROOT
from support.stores import synthetic_store

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
ROUTERS = ("entropy", "batch", "batch_shuffled", "oracle", "energy", "ncm", "lda", "fusion")
NUMBER = r"-?\d+\.\d+(?:e-?\d+)?"

# What each block prints: a regular expression per line, a frame's rows without their index (a
# sweep's frame lists its points in the order they finished: any order).
PRINTED = {
    "README.md#1": [
        r"\{" + ", ".join(f"'{name}': {NUMBER}" for name in ROUTERS) + r"\}",
        r"\['\d+'(, '\d+'){7}\] \[\d( \d){7}\] \[\d( \d){7}\]",
        r"r\s+split\s+A_last",
        *[rf"{r}\s+{split}\s+{NUMBER}" for r in (8, 16) for split in ("test", "validation")],
    ],
    "python-api.md#1": [
        r"\{" + ", ".join(f"'{name}': {NUMBER}" for name in ROUTERS) + r"\}",
        r"\['\d+'(, '\d+'){4}\] \[\d( \d){4}\]",
        NUMBER,
        r"r\s+l1\s+A_last",
        *[
            rf"{r}\s+{l1}\s+{NUMBER}"
            for r in (8, 16)
            for l1 in ("0.0000", "0.0005")
            for _ in ("test", "validation")
        ],
    ],
    "python-api.md#2": [NUMBER],
    "contributing.md#1": [r"worst task: 0\.7"],
    "contributing.md#2": [rf"shrunk means: {NUMBER}"],
    "contributing.md#3": ["honest", rf"least energy: {NUMBER}"],
    "contributing.md#4": ["--log printed: True"],
    "python-api.md#3": [
        r"baseline Means conforms: declarations, partial_fit per task, state size, parameter count, "
        r"order-free; one-line "
        r"refusals skipped \(no check_fits\)",
        r"router peeking: read view\.true_task, which only reference routers see .*; register it with "
        r"`reference = True` to report it as a reference",
    ],
    "python-api.md#4": [
        rf"TOSCA, lda: {NUMBER}",
        rf"best on validation \(the figure alone\): \{{'lr': 0\.0[15], 'r': [24]\}} {NUMBER}",
        rf"RanPAC: {NUMBER}",
    ],
}


def python_blocks() -> list[tuple[str, str]]:
    return [
        (f"{path.name}#{i + 1}", block)
        for path in DOCS
        for i, block in enumerate(re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S))
    ]


BLOCKS = python_blocks()


def test_every_python_block_of_the_docs_says_what_it_prints() -> None:
    assert {where for where, _ in BLOCKS} == set(PRINTED)


def _stand_ins(code: str, folder: Path) -> None:
    """A small store at every store path the block names (10 classes, 12 training images each)."""
    for store in set(re.findall(r"[\"']([\w/.-]+\.zarr)[\"']", code)):
        synthetic_store(folder / store, classes=10, per_class=12, test_per_class=6)


def _as_file(code: str, folder: Path) -> str:
    (folder / "block.py").write_text(code)
    return _run([sys.executable, "block.py"], folder)


def _as_c(code: str, folder: Path) -> str:
    return _run([sys.executable, "-c", code], folder)


def _run(command: list[str], folder: Path) -> str:
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _in_a_kernel(code: str, folder: Path) -> str:
    import nbclient
    import nbformat

    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    client = nbclient.NotebookClient(
        notebook, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(folder)}}
    )
    client.execute()  # a cell that raises fails here, with its traceback
    outputs = notebook.cells[0].outputs
    return "".join(o["text"] for o in outputs if o["output_type"] == "stream" and o["name"] == "stdout")


RUNS = {"file": _as_file, "kernel": _in_a_kernel, "c": _as_c}


@pytest.mark.heavy
@pytest.mark.parametrize(("where", "code"), BLOCKS, ids=[w for w, _ in BLOCKS])
def test_every_python_block_prints_its_results_from_a_file_a_kernel_and_c(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, code: str
) -> None:
    """The same block, as written, three ways, each in a folder of its own: what it prints matches
    what the docs show (`PRINTED`), and is the same three times (a sweep's workers, 2 here by
    default, give the same numbers as any other count)."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    printed = {}
    for how, run in RUNS.items():
        folder = tmp_path / how
        folder.mkdir()
        _stand_ins(code, folder)
        output = run(code, folder)
        # a frame's row without its index (the row's place in results.csv: any order)
        lines = sorted(
            re.sub(r"^\d+\s+(?=\d)", "", line.strip()) for line in output.splitlines() if line.strip()
        )
        expected = list(PRINTED[where])
        for line in lines:
            pattern = next((p for p in expected if re.fullmatch(p, line)), None)
            assert pattern is not None, f"{where} ({how}): {line!r} is none of {expected}\n{output}"
            expected.remove(pattern)
        assert not expected, f"{where} ({how}) did not print {expected}:\n{output}"
        printed[how] = lines
    assert printed["file"] == printed["kernel"] == printed["c"], printed


SCRIPT = textwrap.dedent(
    """
    import os
    import torch
    import tosca_heads
    from tosca_heads import Router, StageView, register_router


    @register_router
    class Newest(Router):
        name = "newest"
        summary = "always the last task's module"

        def route(self, view: StageView) -> torch.Tensor:
            groups, modules, n = view.entropy.shape
            return torch.full((groups, n), modules - 1, dtype=torch.long)


    frame = tosca_heads.sweep("store.zarr", {"r": [2, 4]}, "sweep", jobs=2, epochs=1, batch_size=8, device="cpu")
    mine = frame[frame.router == "newest"]
    print(len(mine), sorted(set(mine.r)), os.getpid() in set(frame.worker_pid))
    """
)


@pytest.mark.heavy
def test_a_router_registered_in_a_script_reaches_its_sweeps_workers(tmp_path: Path) -> None:
    """A script with no __main__ guard registers a router, then sweeps on 2 worker processes: the
    workers never run the script (it would sweep again), and still report the script's router for
    every point and split."""
    synthetic_store(tmp_path / "store.zarr", classes=4, per_class=12, test_per_class=6)
    (tmp_path / "script.py").write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "script.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "4 [2, 4] False", done.stdout


@pytest.mark.heavy
def test_a_registration_the_workers_cannot_import_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """A router defined in a module only this process has (made in memory) cannot be rebuilt on a
    worker: the cluster's start stops with one line naming it, never a sweep without it."""
    from tosca_foundation.errors import UserError
    from tosca_foundation.scheduler import SchedulerChoice, dask_client
    from tosca_heads.routers import ROUTERS, Router, register_router

    module = types.ModuleType("tosca_test_nowhere")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    nowhere = type("Nowhere", (Router,), {"name": "nowhere", "__module__": module.__name__})
    module.Nowhere = nowhere  # type: ignore[attr-defined]
    register_router(nowhere)
    try:
        with pytest.raises(UserError) as refused, dask_client(SchedulerChoice("local", workers=1)):
            pass
    finally:
        del ROUTERS["nowhere"]
    said = str(refused.value)
    assert "cannot reach the Dask workers: router nowhere (from tosca_test_nowhere)" in said
    assert "\n" not in said and "TOSCA_PLUGINS" in said


@pytest.mark.heavy
def test_a_notebook_sweeps_twice_on_workers(tmp_path: Path) -> None:
    """A fresh process (a notebook's kernel) runs its sweep cell twice on 2 worker processes: the
    second cluster (a second helper, the registrations sent again) starts as the first did and
    gives the same numbers."""
    synthetic_store(tmp_path / "store.zarr", classes=4, per_class=12, test_per_class=6)
    code = textwrap.dedent(
        """
        import tosca_heads
        frames = [
            tosca_heads.sweep("store.zarr", {"r": [2, 4]}, out, jobs=2, epochs=1, batch_size=8, device="cpu")
            for out in ("first", "second")
        ]
        columns = ["key", "split", "router", "A_last"]
        same = [f[columns].sort_values(columns[:3]).reset_index(drop=True) for f in frames]
        print(len(frames[1]), same[0].equals(same[1]))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == f"{2 * 2 * len(ROUTERS)} True", done.stdout
