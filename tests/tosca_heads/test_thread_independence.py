"""The same bits on any thread count, by construction (docs/guarantees.md, "The same command gives
the same number"): tests/support/digests.py computes each promised figure in a subprocess under
OMP_NUM_THREADS = MKL_NUM_THREADS = TOSCA_LINALG_THREADS = 1, 2 and 3 (TOSCA_STEP_THREADS 1, 2, 2
and the evaluation thread on from two), within each instruction-set cap, and every thread count
must give the same digest. Across caps the bits may differ: the heavy test measures by how much.

MKL_ENABLE_INSTRUCTIONS=AVX2 and AVX512 take MKL's other code paths on an Intel CPU; on an AMD one
MKL ignores them (the same bits and time under AVX512, AVX2 and even SSE4_2), so the heavy tier
adds `generic`: MKL's compatible branch (MKL_CBWR=COMPATIBLE) and torch's kernels without vector
extensions (ATEN_CPU_CAPABILITY=default), which take other code paths on any x86-64 CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from support import ROOT

from tosca_heads.engine import native
from tosca_heads.method import linalg

DIGESTS = ROOT / "tests" / "support" / "digests.py"
THREADS = (1, 2, 3)
CAPS = {
    "AVX512": {"MKL_ENABLE_INSTRUCTIONS": "AVX512"},
    "AVX2": {"MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "generic": {"MKL_CBWR": "COMPATIBLE", "ATEN_CPU_CAPABILITY": "default"},
}
# how far an area's arrays may move from one instruction set to another, relative to each array's
# largest value: ten times or more what was measured on the 2-core AMD EPYC, AVX512 against
# generic (docs/guarantees.md): the class scatter 6e-16 and the lda weights 2e-7 (float32 solve);
# RanPAC's Gram 3e-7 (its float32 projection), weights 3e-6, the eigh fallback 4e-5; a fit's task
# files 6e-7 and TOSCAClassifier's probabilities 1.3e-7, with every accuracy identical; the small
# suite's figures identical. The joint probe's float32 L-BFGS follows its rounding: 5e-4.
ACROSS_CAPS = {"statistics": 1e-5, "ranpac": 3e-4, "engine": 1e-5, "estimators": 1e-5, "suite": 0.0}
PROBE = 5e-3


def _env(threads: int, cap: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MKL_CBWR", "ATEN_CPU_CAPABILITY")}
    return {
        **env,
        **CAPS[cap],
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
        "TOSCA_LINALG_THREADS": str(threads),
        "TOSCA_STEP_THREADS": str(min(threads, 2)),
        "TOSCA_OVERLAP_EVAL": "1" if threads > 1 else "0",
        "HF_HUB_OFFLINE": "1",
    }


def _digests(tmp_path: Path, areas: list[str], caps: list[str]) -> dict[tuple[str, int], dict[str, str]]:
    """{(cap, threads): {area: digest}}, each from its own process (one cap's thread counts at a time)."""
    found = {}
    for cap in caps:
        running = {}
        for threads in THREADS:
            out = tmp_path / f"{cap}-{threads}"
            out.mkdir()
            running[threads] = subprocess.Popen(
                [sys.executable, str(DIGESTS), str(out), *areas],
                env=_env(threads, cap),
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        for threads, process in running.items():
            stdout, stderr = process.communicate(timeout=900)
            assert process.returncode == 0, stderr[-3000:]
            found[(cap, threads)] = json.loads(stdout.strip().splitlines()[-1])
    return found


def _same_on_every_thread_count(found: dict[tuple[str, int], dict[str, str]], caps: list[str]) -> None:
    for cap in caps:
        for threads in THREADS[1:]:
            assert found[(cap, threads)] == found[(cap, 1)], f"{cap}: {threads} threads differ from one"


@pytest.mark.heavy  # subprocesses on 1-3 threads x 2 caps: 30 s, out of `make test`'s six minutes
def test_router_statistics_and_the_baselines_are_the_same_bits_on_one_two_and_three_threads(
    tmp_path: Path,
) -> None:
    caps = ["AVX512", "AVX2"]
    found = _digests(tmp_path, ["statistics", "ranpac", "field"], caps)
    _same_on_every_thread_count(found, caps)


@pytest.mark.heavy
@pytest.mark.skipif(native.compiler() is None, reason="no C compiler here: the compiled step's threads")
def test_every_promised_figure_is_the_same_bits_on_any_thread_count_and_close_across_instruction_sets(
    tmp_path: Path,
) -> None:
    areas = list(ACROSS_CAPS)
    caps = ["AVX512", "AVX2", "generic"]
    found = _digests(tmp_path, areas, caps)
    _same_on_every_thread_count(found, caps)
    for area, tolerance in ACROSS_CAPS.items():
        first = np.load(tmp_path / "AVX512-1" / f"{area}.npz")
        other = np.load(tmp_path / "generic-1" / f"{area}.npz")
        assert sorted(first.files) == sorted(other.files)
        for key in first.files:
            a, b = first[key].astype(np.float64), other[key].astype(np.float64)
            assert np.array_equal(np.isnan(a), np.isnan(b)), f"{area} {key}: missing values moved"
            a, b = np.nan_to_num(a), np.nan_to_num(b)
            scale = max(float(np.abs(a).max(initial=0.0)), 1e-300)
            moved = float(np.abs(a - b).max(initial=0.0)) / scale
            assert moved <= (PROBE if "probe" in key else tolerance), (
                f"{area} {key}: {moved:.2e} apart across instruction sets"
            )


# ------------------------------------------------------------------------ the tiled algebra itself


def _problem(m: int, rows: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    h = torch.relu(torch.randn(rows, m, generator=gen, dtype=torch.float64))
    return h, torch.randn(rows, 3, generator=gen, dtype=torch.float64)


@pytest.mark.parametrize("m", [1, 511, 512, 1300])  # one tile, one short of a tile, exactly one, three
def test_tiled_gram_cholesky_and_solve_are_the_same_bits_on_any_worker_count(m: int) -> None:
    h, y = _problem(m, 2100)  # two row blocks
    results = []
    for threads in THREADS:
        gram, cross = torch.zeros(m, m, dtype=torch.float64), torch.zeros(m, 3, dtype=torch.float64)
        with linalg.workers(threads) as run:
            blocks = [linalg.column_tiles(block) for block in linalg.row_blocks(h)]
            linalg.add_gram(gram, blocks, run)
            linalg.add_cross(cross, blocks, linalg.row_blocks(y), run)
            factor = linalg.cholesky(gram, 0.5, run)
            assert factor is not None
            results.append((gram, cross, linalg.cholesky_solve(factor, cross, run)))
    for other in results[1:]:
        assert all(torch.equal(a, b) for a, b in zip(results[0], other, strict=True))
    gram, cross, solved = results[0]
    torch.testing.assert_close(gram, h.T @ h, rtol=1e-12, atol=0)
    assert torch.equal(gram, gram.T)
    torch.testing.assert_close(cross, h.T @ y, rtol=1e-12, atol=1e-12)
    expected = torch.linalg.solve(h.T @ h + 0.5 * torch.eye(m, dtype=torch.float64), h.T @ y)
    torch.testing.assert_close(solved, expected, rtol=1e-9, atol=1e-9)


def test_a_matrix_that_is_not_positive_definite_has_no_factor() -> None:
    h, _ = _problem(700, 40)  # rank 40 of 700
    with linalg.workers(2) as run:
        assert linalg.cholesky(h.T @ h, -1e-3, run) is None
        assert linalg.cholesky(h.T @ h, 1.0, run) is not None


def test_one_thread_is_this_thread_only_and_is_restored() -> None:
    """The pin is per thread: another thread keeps its count meanwhile, and this one gets its own
    back (torch.set_num_threads would have changed the whole process's)."""
    before = torch.get_num_threads()
    seen = {}

    def other() -> None:
        seen["other"] = torch.get_num_threads()

    with linalg.single_threaded():
        seen["pinned"] = torch.get_num_threads()
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    assert seen["pinned"] == 1
    assert torch.get_num_threads() == before
    assert seen["other"] == before


def test_the_worker_count_is_the_setting_else_omp_else_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    from tosca_foundation.limits import usable_cores

    monkeypatch.delenv("TOSCA_LINALG_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert linalg.linalg_threads() == usable_cores()
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert linalg.linalg_threads() == 3
    monkeypatch.setenv("TOSCA_LINALG_THREADS", "5")
    assert linalg.linalg_threads() == 5
