"""Run `tosca` commands in real child processes that start in milliseconds, and stop them at chosen writes.

Children are forked from a multiprocessing fork server that imported torch, timm, zarr and the
CLI once (a fresh `python cli.py` spends ~10 s importing on this machine), so a test can kill and
rerun an extraction many times. A child can be told to pause at a chosen file write of the
store: it counts every file zarr writes (`zarr.storage._local._put`, which writes a temporary
file and renames it into place), and at the chosen one it optionally leaves half of the bytes in
that temporary file, as a kill in the middle of `write()` would, creates a flag file and sleeps;
the test then sends SIGKILL. Nothing here changes what the code under test does.
"""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.forkserver
import os
import re
import signal
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch  # noqa: F401

import cli
import featcache.extraction  # noqa: F401  (imported once, in the fork server)
from support import ROOT

_CONTEXT: Any = None
_DEFAULT_METHOD = multiprocessing.get_start_method()  # this process's, as `tosca` would have it


@dataclass(frozen=True)
class PauseAt:
    """Pause before the `occurrence`-th (1-based) write whose path matches `pattern` (a regex), or,
    with `function` ("module:name" or "module:Class.method"), before its `occurrence`-th call.
    A `resumable` pause ends when the test calls `Child.resume()`; any other waits for the test's
    SIGKILL."""

    pattern: str = ".*"
    occurrence: int = 1
    half_written: bool = False  # leave half of its bytes in zarr's temporary file first
    function: str | None = None
    resumable: bool = False


def context() -> Any:
    """The fork-server context, started once with this module (and so torch and the CLI) imported."""
    global _CONTEXT
    if _CONTEXT is None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["support.crash_harness"])
        saved = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT), str(ROOT / "tests"), *([saved] if saved else [])]
        )
        try:
            multiprocessing.forkserver.ensure_running()
        finally:
            if saved is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = saved
        _CONTEXT = ctx
    return _CONTEXT


def _hold(folder: Path, at: str, resumable: bool) -> None:
    """Say where the child paused, then wait for the test: a resume file, or a kill."""
    (folder / "paused").write_text(at)
    while resumable and not (folder / "resume").exists():
        time.sleep(0.01)
    if not resumable:
        time.sleep(3600)


def _install_function_pause(folder: Path, pause: PauseAt) -> None:
    import importlib

    assert pause.function is not None
    module_name, dotted = pause.function.split(":")
    owner: Any = importlib.import_module(module_name)
    *path, name = dotted.split(".")  # "module:Class.method" pauses a method
    for attribute in path:
        owner = getattr(owner, attribute)
    original = getattr(owner, name)
    calls = [0]

    def paused(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == pause.occurrence:
            _hold(folder, pause.function or "", pause.resumable)
        return original(*args, **kwargs)

    setattr(owner, name, paused)


def _install_write_hook(folder: Path, pause: PauseAt | None) -> list[str]:
    import zarr.storage._local as local

    original = local._put
    written: list[str] = []
    lock = threading.Lock()
    pattern = re.compile(pause.pattern) if pause and pause.function is None else None
    matched = [0]

    def put(path: Path, value: Any, exclusive: bool = False) -> int:
        with lock:
            written.append(str(path))
            hit = False
            if pattern is not None and pattern.search(str(path)):
                matched[0] += 1
                hit = matched[0] == pause.occurrence  # type: ignore[union-attr]
        if hit:
            assert pause is not None
            if pause.half_written:
                data = bytes(value.as_buffer_like())
                path.parent.mkdir(parents=True, exist_ok=True)
                path.with_suffix(f".{uuid.uuid4().hex}.partial").write_bytes(data[: len(data) // 2])
            _hold(folder, str(path), pause.resumable)
        return original(path, value, exclusive=exclusive)

    local._put = put
    return written


def _live_semaphores() -> int:
    """Named semaphores this process made (multiprocessing queues and locks) and never released:
    each would be left to the resource tracker, which warns of it as leaked. Observed, not changed."""
    import gc
    from multiprocessing import util

    gc.collect()
    return sum(
        "SemLock._cleanup" in getattr(getattr(f, "_callback", None), "__qualname__", "")
        for f in list(util._finalizer_registry.values())  # type: ignore[attr-defined]
    )


def _child(
    args: list[str],
    folder: str,
    pause: dict[str, Any] | None,
    start_method: str | None = None,
    env: dict[str, str] | None = None,
) -> None:
    """The child: run `tosca ARGS` with stdout/stderr in files; exit with its exit code. A fork
    server's child inherits its start method: `start_method` gives back the one `tosca` has; and
    the fork server's environment: `env` adds to it (an object store's endpoint and key)."""
    os.environ.update(env or {})
    if start_method is not None:
        multiprocessing.set_start_method(start_method, force=True)
    where = Path(folder)
    out = os.open(where / "stdout", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    err = os.open(where / "stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(out, 1)
    os.dup2(err, 2)
    at = PauseAt(**pause) if pause else None
    written = _install_write_hook(where, at)
    if at is not None and at.function is not None:
        _install_function_pause(where, at)
    code = 0
    try:
        cli.app(args=args, prog_name="tosca")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 3
    (where / "writes.json").write_text(json.dumps(written))
    (where / "semaphores.json").write_text(json.dumps(_live_semaphores()))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@dataclass
class Child:
    process: Any
    folder: Path

    def text(self, name: str) -> str:
        path = self.folder / name
        return path.read_text() if path.exists() else ""

    def writes(self) -> list[str]:
        return json.loads(self.text("writes.json") or "[]")

    def wait_paused(self, timeout: float = 300) -> str:
        """Block until the child pauses at its chosen write; returns that write's path."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if (self.folder / "paused").exists():
                return (self.folder / "paused").read_text()
            if not self.process.is_alive():
                raise AssertionError(
                    f"child ended (exit {self.process.exitcode}) before its pause: {self.text('stderr')[-800:]}"
                )
            time.sleep(0.02)
        raise AssertionError("child never reached its pause")

    def wait_for(self, name: str, text: str, timeout: float = 300) -> str:
        """Block until the child's `name` (stdout, stderr) holds `text`; returns that file's text."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if text in self.text(name):
                return self.text(name)
            if not self.process.is_alive():
                raise AssertionError(f"child ended (exit {self.process.exitcode}) before saying {text!r}")
            time.sleep(0.02)
        raise AssertionError(f"child never said {text!r}: {self.text(name)[-400:]}")

    def resume(self) -> None:
        """End a resumable pause."""
        (self.folder / "resume").write_text("go")

    def kill(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.join(30)

    def finish(self, timeout: float = 300) -> int:
        self.process.join(timeout)
        if self.process.exitcode is None:
            self.kill()
            raise AssertionError(f"child still running after {timeout} s")
        return int(self.process.exitcode)


def start(
    args: list[str],
    folder: Path,
    pause: PauseAt | None = None,
    daemon: bool = True,
    env: dict[str, str] | None = None,
) -> Child:
    """Start `tosca ARGS` in a child process; its stdout, stderr and list of writes go to `folder`.
    A child that starts processes of its own (loader workers) must not be a daemon (`daemon=False`),
    and starts them as `tosca` does here (forked, Python's default on Linux)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("paused", "resume", "stdout", "stderr", "writes.json", "semaphores.json"):
        (folder / name).unlink(missing_ok=True)
    process = context().Process(
        target=_child,
        args=(
            list(args),
            str(folder),
            asdict(pause) if pause else None,
            None if daemon else _DEFAULT_METHOD,
            env,
        ),
        daemon=daemon,
    )
    process.start()
    return Child(process, folder)


def run(
    args: list[str],
    folder: Path,
    timeout: float = 300,
    daemon: bool = True,
    env: dict[str, str] | None = None,
) -> tuple[int, str, str]:
    """Run `tosca ARGS` to its end in a child; (exit code, stdout, stderr)."""
    child = start(args, folder, daemon=daemon, env=env)
    code = child.finish(timeout)
    return code, child.text("stdout"), child.text("stderr")
