"""Fixtures every test folder shares: tiny generated inputs, the real archives' stores, and torch's
global settings restored after each test."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from support.images import make_image_tree, make_jpeg_tree
from support.real_data import demo_store_cache, real_store

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never wait on hub retries in tests
# Tables are read at their natural width, whatever the shell exported (pytest-xdist's workers get
# COLUMNS=80); a test of a terminal's width sets COLUMNS itself.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)


@pytest.fixture
def image_tree(tmp_path: Path) -> Path:
    return make_image_tree(tmp_path / "images")


@pytest.fixture
def jpeg_tree(tmp_path: Path) -> Path:
    return make_jpeg_tree(tmp_path / "jpegs")


@pytest.fixture(scope="session")
def eurosat_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return real_store(tmp_path_factory, "eurosat")


@pytest.fixture(scope="session")
def cifar10_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return real_store(tmp_path_factory, "cifar10")


@pytest.fixture(scope="session")
def demo_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache folder holding `tosca demo`'s store (support.real_data.demo_store_cache)."""
    return demo_store_cache(tmp_path_factory)


@pytest.fixture
def kernel_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A compiled-step kernel cache of this test's own, the library forgotten before and after."""
    from tosca_heads.engine import native

    folder = tmp_path / "cache" / "kernels"
    monkeypatch.setenv("TOSCA_KERNEL_CACHE", str(folder))
    native.forget()
    yield folder
    native.forget()


@pytest.fixture(autouse=True)
def working_folder_of_its_own(tmp_path: Path) -> Iterator[None]:
    """Each test runs in its own folder: what a command writes where it is called (`runs/`, a
    preset's run, a default baselines folder) never lands in the checkout, where the next run of
    the suite would find it (a suite's dry run then counted those cells as done). A patch of its
    own, so that a test's `monkeypatch.undo()` does not take it back."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        yield


@pytest.fixture(autouse=True)
def user_errors_seen(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every UserError message made while a test runs (a test may read and clear the list); one
    that holds a Python repr (support.messages) fails the test that made it."""
    from support.messages import python_repr

    from tosca_foundation.errors import UserError

    seen: list[str] = []
    made = UserError.__init__

    def init(self: UserError, *args: object) -> None:
        made(self, *args)
        seen.append(str(self))

    monkeypatch.setattr(UserError, "__init__", init)
    yield seen
    found = [(message, python_repr(message)) for message in seen]
    shown = [f"{why} in: {message}" for message, why in found if why]
    if shown:
        pytest.fail("a user-facing error shows a Python repr; say it in words:\n" + "\n".join(shown), False)


@pytest.fixture(autouse=True)
def torch_globals_restored() -> Iterator[None]:
    """A test may change torch's process-wide settings (TF32, threads, denormals, determinism);
    the next test starts from the settings the session started with."""
    saved = _torch_globals()
    yield
    if _torch_globals() == saved:
        return
    torch.set_float32_matmul_precision(saved[2])
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[0], saved[1]
    torch.set_num_threads(saved[3])
    torch.use_deterministic_algorithms(saved[4])
    torch.set_flush_denormal(False)


def _torch_globals() -> tuple:
    return (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.get_float32_matmul_precision(),
        torch.get_num_threads(),
        torch.are_deterministic_algorithms_enabled(),
    )


PLANTED = '''\
"""Planted in a working folder by a test: records that it was imported, then hands over to the
real module (so that a process that imports it still works, and the test can say where it ran)."""
import importlib
import os
import sys

with open({marker!r}, "a") as fh:
    fh.write(f"{{__name__}} imported in process {{os.getpid()}}\\n")
here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
del sys.modules[__name__]
sys.modules[__name__] = importlib.import_module(__name__)
'''


@pytest.fixture
def planted_working_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working folder becomes one holding a planted `multiprocessing.py` (what a spawned or
    forkserver child imports first, from its working folder unless protected); returns the file in
    which it records every process that imported it (it must not exist after the test), and leaves
    PYTHONSAFEPATH unset in this process meanwhile (tosca must set it for what it starts)."""
    folder, marker = tmp_path / "planted", tmp_path / "planted-module-imported.txt"
    folder.mkdir()
    (folder / "multiprocessing.py").write_text(PLANTED.format(marker=str(marker)))
    monkeypatch.chdir(folder)
    monkeypatch.setenv("PYTHONSAFEPATH", "")  # restored (or removed again) after the test
    monkeypatch.delenv("PYTHONSAFEPATH")
    return marker
