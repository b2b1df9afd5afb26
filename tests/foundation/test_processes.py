"""The processes tosca starts import installed code only (a module planted in the working folder
never runs in them) and die with the process that started them (tosca_foundation.processes).

Each kind of worker is tested with a planted module that records its import: spawned and
forkserver children here; the Dask workers of `local:N` extractions, sweeps and suites, and the
loader workers, in the tests that start them (`planted_working_folder` in tests/conftest.py)."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from cli import app
from tosca_foundation import processes

ROOT = Path(__file__).resolve().parents[2]

CHILDREN = textwrap.dedent(
    """
    import multiprocessing, os, sys, time
    sys.path.insert(0, {root!r})
    from tosca_foundation.processes import installed_code_only
    if __name__ == "__main__":
        if sys.argv[2] == "protected":
            installed_code_only()
        os.chdir(sys.argv[3])  # where the planted module is, as a shared folder the user works in
        process = multiprocessing.get_context(sys.argv[1]).Process(target=time.sleep, args=(0,))
        process.start()
        process.join(60)
        sys.exit(process.exitcode)
    """
)


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_spawned_and_forkserver_children_never_import_the_working_folder(
    method: str, tmp_path: Path, planted_working_folder: Path
) -> None:
    """Python puts the working folder first on a spawned child's path: the planted module runs in
    it unless the child starts with PYTHONSAFEPATH, which tosca sets for everything it starts."""
    script = tmp_path / "children.py"
    script.write_text(CHILDREN.format(root=str(ROOT)))
    env = {k: v for k, v in os.environ.items() if k != processes.SAFE_PATH}
    folder = Path.cwd()
    for mode, imported in (("unprotected", True), ("protected", False)):
        planted_working_folder.unlink(missing_ok=True)
        done = subprocess.run(
            [sys.executable, str(script), method, mode, str(folder)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-800:]
        assert planted_working_folder.exists() == imported, (mode, done.stderr[-400:])


def test_the_command_line_protects_everything_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(processes.SAFE_PATH, "")  # so that the test's environment is restored after
    monkeypatch.delenv(processes.SAFE_PATH)
    assert CliRunner().invoke(app, ["cache", "ls", "--cache-dir", str(tmp_path)]).exit_code == 0
    assert os.environ[processes.SAFE_PATH] == "1"


def test_local_clusters_start_their_workers_protected_and_tied_to_this_process() -> None:
    import dask

    with dask.config.set({"distributed.nanny.pre-spawn-environ": {"MALLOC_TRIM_THRESHOLD_": "1"}}):
        config = processes.local_cluster_config(dask.config)
    assert config["distributed.nanny.pre-spawn-environ"] == {
        "MALLOC_TRIM_THRESHOLD_": "1",
        "PYTHONSAFEPATH": "1",
    }
    assert config["distributed.worker.preload"] == ["tosca_foundation.processes"]


def _pdeathsig() -> int:
    value = ctypes.c_int(0)
    ctypes.CDLL(None).prctl(2, ctypes.byref(value), 0, 0, 0)  # PR_GET_PDEATHSIG
    return value.value


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_a_worker_preload_in_this_process_changes_nothing() -> None:
    """Dask runs the preload in the main process for workers that are threads: tosca itself must
    not die with its shell's process."""
    before = _pdeathsig()
    processes.dask_setup()
    assert _pdeathsig() == before


HELPER = textwrap.dedent(
    """
    import multiprocessing, os, sys, time
    sys.path.insert(0, {root!r})
    from tosca_foundation.processes import loader_worker_start

    def helper(parent):
        loader_worker_start(parent)  # what a loader worker does first
        time.sleep(600)

    if __name__ == "__main__":
        child = multiprocessing.get_context("fork").Process(target=helper, args=(os.getpid(),))
        child.start()
        print(child.pid, flush=True)
        time.sleep(600)
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_a_helper_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    script = tmp_path / "helper.py"
    script.write_text(HELPER.format(root=str(ROOT)))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    helper = psutil.Process(int(parent.stdout.readline()))  # type: ignore[union-attr]
    parent.send_signal(signal.SIGKILL)
    parent.wait(30)
    helper.wait(timeout=5)  # raises psutil.TimeoutExpired if it outlives its parent


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="no pidfd here")
def test_a_helper_started_on_another_process_s_behalf_dies_with_that_one(tmp_path: Path) -> None:
    """A forkserver's or spawn helper's child is not its loader's child: it watches the loader."""
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    code = (
        f"import sys, time; sys.path.insert(0, {str(ROOT)!r})\n"
        "from tosca_foundation.processes import die_with_parent\n"
        f"die_with_parent({owner.pid}); print('watching', flush=True); time.sleep(600)\n"
    )
    helper = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert helper.stdout.readline().strip() == "watching"  # type: ignore[union-attr]
    owner.kill()
    owner.wait(30)
    assert helper.wait(5) == -signal.SIGKILL
