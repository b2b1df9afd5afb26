"""Crash safety of the store: an extraction killed with SIGKILL at any of its writes leaves a store that
`tosca cache verify` passes or whose unfinished chunks it names, and the same command then completes it
to exactly the arrays of an uninterrupted run.

The kill points are writes of the store, chosen by the test: six named ones (while the store is
being created, before the first chunk, half-way through a chunk's file, between a chunk's values
and its checksum, before a done flag, during the final attrs update) and three drawn at random
(seeded) from every write an uninterrupted run makes. Children are real processes killed with
SIGKILL (see crash_harness).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import psutil
import pytest
import zarr
from support.crash_harness import PauseAt, run, start
from support.images import FAST_CNN, make_image_tree
from typer.testing import CliRunner

from cli import app

RANDOM_SEED = 11
NAMED = {
    "creating": PauseAt(r"\.zarr\.creating/", 5),
    "before-first-chunk": PauseAt(r"\.zarr/train/features/c/", 1),
    "mid-chunk-file": PauseAt(r"\.zarr/train/views/c/", 2, half_written=True),
    "values-not-checksum": PauseAt(r"\.zarr/test/checksums/c/", 1),
    "before-done-flag": PauseAt(r"\.zarr/train/done/c/", 3),
    "final-attrs": PauseAt(r"\.zarr/zarr\.json$", 1, half_written=True),
}
ARRAYS = ("features", "views", "labels", "ids", "done", "checksums")


def _args(tree: Path, store: Path) -> list[str]:
    return [
        *("extract", "--model", FAST_CNN, "--dataset", "imagefolder", "--data-root", str(tree)),
        *("--store", str(store), "--cache-dir", str(store.parent / "cache"), "--random-init"),
        *("--views", "2", "--chunk-size", "2", "--batch-size", "2", "--workers", "0"),
        *("--seed", "5", "--device", "cpu"),
    ]


def _arrays(path: Path) -> dict[str, np.ndarray]:
    group = zarr.open_group(str(path), mode="r")
    return {
        f"{split}/{name}": np.asarray(group[f"{split}/{name}"][:])
        for split in ("train", "test")
        for name in ARRAYS
        if name in group[split]
    }


def _verify(store: Path) -> tuple[int, list[str]]:
    result = CliRunner().invoke(app, ["cache", "verify", str(store)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, [line for line in result.output.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray], int]:
    base = tmp_path_factory.mktemp("crash")
    tree = make_image_tree(base / "imgs", classes=2, train=4, test=2)
    code, _, stderr = run(_args(tree, base / "clean.zarr"), base / "clean-run")
    assert code == 0, stderr
    writes = len(__import__("json").loads((base / "clean-run" / "writes.json").read_text()))
    return tree, _arrays(base / "clean.zarr"), writes


def _kill_points(writes: int) -> list[tuple[str, PauseAt]]:
    drawn = np.random.default_rng(RANDOM_SEED).choice(np.arange(1, writes + 1), size=3, replace=False)
    return [
        *NAMED.items(),
        *((f"random-write-{k}-of-{writes}", PauseAt(".*", int(k))) for k in sorted(drawn)),
    ]


def test_kill_points_cover_the_extraction(uninterrupted: tuple[Path, dict[str, np.ndarray], int]) -> None:
    """At least 5 points, one in the middle of a chunk's write, spread over the whole run."""
    _, reference, writes = uninterrupted
    points = _kill_points(writes)
    assert len(points) >= 5 and any(p.half_written and "views" in p.pattern for _, p in points)
    assert reference["train/done"].tolist() == [True] * 4 and reference["test/done"].tolist() == [True] * 2
    assert all(str(s).startswith("sha256:") for s in reference["train/checksums"])


@pytest.mark.parametrize("point", range(len(NAMED) + 3))
def test_sigkill_then_verify_then_rerun_equals_uninterrupted(
    point: int, tmp_path: Path, uninterrupted: tuple[Path, dict[str, np.ndarray], int]
) -> None:
    tree, reference, writes = uninterrupted
    name, pause = _kill_points(writes)[point]
    store = tmp_path / "killed.zarr"
    child = start(_args(tree, store), tmp_path / "killed-run", pause)
    paused_at = child.wait_paused()
    child.kill()
    assert child.process.exitcode == -9, name

    code, lines = _verify(store)
    pending = None  # chunks the rerun must compute; None: no store yet, it computes them all
    if not (store / "zarr.json").exists():  # killed while the store was being created: no store yet
        assert code == 2 and len(lines) == 1 and "creation was interrupted" in lines[0], (name, lines)
    else:
        left = _arrays(store)
        undone = {s: np.flatnonzero(~left[f"{s}/done"]).tolist() for s in ("train", "test")}
        n_chunks = {"train": 4, "test": 2}
        expected = [
            f"FAIL {s}: {len(c)}/{n_chunks[s]} chunks not done (first: {c[:5]})"
            for s, c in undone.items()
            if c
        ]
        assert code == (1 if expected else 0), (name, paused_at, lines)
        # nothing fails but the unfinished chunks, each named
        assert [line for line in lines if line.startswith("FAIL")] == expected, (name, paused_at, lines)
        for split in ("train", "test"):  # every chunk flagged done holds the uninterrupted run's values
            done = left[f"{split}/done"]
            assert (left[f"{split}/checksums"][done] == reference[f"{split}/checksums"][done]).all(), name
        pending = sum(len(c) for c in undone.values())

    code, stdout, stderr = run(_args(tree, store), tmp_path / "rerun")
    assert code == 0, (name, stderr)
    if pending is not None:
        summary = "nothing to do" if pending == 0 else f"{pending} computed, {6 - pending} already done"
        assert summary in stdout, (name, stdout)
    resumed = _arrays(store)
    assert resumed.keys() == reference.keys()
    for key, value in reference.items():
        np.testing.assert_array_equal(resumed[key], value, err_msg=f"{key} after a kill at {name}")
    assert _verify(store) == (0, [f"OK {store}"])
    leftovers = [p for p in tmp_path.rglob("*") if p.name.endswith((".partial", ".creating", ".lock"))]
    assert leftovers == [], leftovers


def test_a_rerun_right_after_a_kill_resumes_and_the_killed_run_s_helpers_are_gone(
    tmp_path: Path, uninterrupted: tuple[Path, dict[str, np.ndarray], int]
) -> None:
    """`kill -9` of an extraction with loader workers (forked; filelock closes their copy of the
    store lock's descriptor, so they never hold it): the workers die with it at once, and the same
    command, run at once, resumes to the arrays of an uninterrupted run."""
    tree, reference, _ = uninterrupted
    store = tmp_path / "killed.zarr"
    args = _args(tree, store)
    args[args.index("--workers") + 1] = "2"
    child = start(args, tmp_path / "killed-run", PauseAt(r"\.zarr/train/features/c/", 2), daemon=False)
    child.wait_paused()
    helpers = psutil.Process(child.process.pid).children(recursive=True)
    assert len(helpers) >= 2, helpers  # the loader workers, alive
    child.kill()
    _, alive = psutil.wait_procs(helpers, timeout=2)  # torch's own check would take up to 5 s
    assert alive == [], alive
    code, stdout, stderr = run(args, tmp_path / "rerun", daemon=False)
    assert code == 0, stderr
    assert "computed" in stdout
    resumed = _arrays(store)
    for key, value in reference.items():
        np.testing.assert_array_equal(resumed[key], value, err_msg=key)
    assert _verify(store) == (0, [f"OK {store}"])
