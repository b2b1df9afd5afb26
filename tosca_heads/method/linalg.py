"""Linear algebra whose floating-point order is fixed: the same bits on 1, 2, 3 or 16 threads.

A multithreaded BLAS or LAPACK splits its sums by its thread count (on an AMD EPYC, MKL's
Cholesky factor of the routers' covariance differed between OMP_NUM_THREADS=1 and 2), so a
figure computed that way is the same bits only on the thread count and the CPU it was computed
on. Every product, factorisation and solve a promised figure rests on is computed here in one of
two ways, neither of which depends on the number of threads or on how MKL would thread:

- **pinned** (`single_threaded`): the calling thread's BLAS and LAPACK (MKL's per-thread
  setting) and torch's own parallel loops (OpenMP's per-thread setting) run on one thread for the
  duration; other threads keep theirs (torch.set_num_threads would change the whole process's).
  For the small solves, where tiles would cost more than they give: the routers' float32
  Cholesky of the d x d covariance, RanPAC's ridge path at each task, the joint probe's
  L-BFGS, predictions.
- **tiled** (`workers` and the functions below): the work is cut into tiles whose sizes depend on
  the shapes alone (TILE columns, ROWS rows), each tile's operation runs single-threaded BLAS on
  a worker thread, and the partial results are combined in a fixed order, so threads only choose
  who computes which tile. For RanPAC's M x M Gram sums, its Cholesky factor and solves and its
  projections. Each tile is a contiguous tensor of its own (allocated aligned), so a tile's
  product does not depend on where it lay in a larger matrix.

The number of worker threads is `linalg_threads()`: TOSCA_LINALG_THREADS, else OMP_NUM_THREADS
(Dask's workers set it to 1), else every usable core. It changes the time, never a bit.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import torch

from tosca_foundation import long_work
from tosca_foundation.limits import usable_cores
from tosca_foundation.settings import setting

TILE = 512  # the side of a square tile, and the width of a column tile
ROWS = 2048  # the rows of one block of a row-blocked product (a Gram sum, a projection)

T = TypeVar("T")
R = TypeVar("R")
Run = Callable[[Callable[[T], R], Sequence[T]], list[R]]  # runs a tile operation on every item
Tiles = list[list[torch.Tensor]]  # a lower-triangular tiled matrix: row i holds tiles (i, 0..i)


def linalg_threads() -> int:
    """Worker threads of the tiled operations: TOSCA_LINALG_THREADS, else OMP_NUM_THREADS (a
    positive whole number), else every usable core."""
    chosen = setting("TOSCA_LINALG_THREADS")
    if chosen is not None:
        return int(chosen)
    omp = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(omp) if omp.isdigit() and int(omp) >= 1 else usable_cores()


# ------------------------------------------------------------------------------- one thread per thread


@functools.lru_cache(maxsize=1)
def mkl_thread_setter() -> tuple[ctypes._CFuncPtr | None, int | None]:  # type: ignore[name-defined]
    """MKL's per-thread thread-count setter inside libtorch_cpu, and its address for C callers;
    (None, None) when this torch build does not link MKL."""
    if not torch.backends.mkl.is_available():
        return None, None
    try:
        setter = ctypes.CDLL(
            str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so")
        ).MKL_Set_Num_Threads_Local
    except (OSError, AttributeError):
        return None, None
    setter.argtypes, setter.restype = [ctypes.c_int], ctypes.c_int
    return setter, ctypes.cast(setter, ctypes.c_void_p).value


@functools.lru_cache(maxsize=1)
def _openmp() -> ctypes.CDLL | None:
    """The OpenMP runtime torch's parallel loops run on (its own copy where the wheel ships one),
    or None (a build without OpenMP)."""
    shipped = sorted((Path(torch.__file__).parent / "lib").glob("lib*omp*.so*"))
    try:
        runtime = ctypes.CDLL(str(shipped[0])) if shipped else ctypes.CDLL(None)
        runtime.omp_set_num_threads.argtypes = [ctypes.c_int]
        runtime.omp_get_max_threads.restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    return runtime


def pin_this_thread() -> tuple[int, int] | None:
    """This thread's BLAS, LAPACK and torch parallel loops on one thread, from now on; returns what
    to hand `unpin_this_thread` to restore them (a negative count: pinned through torch's
    process-wide count, in a build without a per-thread setting; None: nothing to restore)."""
    torch.get_num_threads()  # torch sets a thread's counts on first use: let it, before pinning
    mkl, _ = mkl_thread_setter()
    openmp = _openmp()
    if openmp is None:
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        return None if before == 1 else (-before, 0)
    previous = (int(openmp.omp_get_max_threads()), mkl(1) if mkl else 0)
    openmp.omp_set_num_threads(1)
    return previous


def unpin_this_thread(previous: tuple[int, int] | None) -> None:
    if previous is None:
        return
    threads, mkl_local = previous
    if threads < 0:  # pinned process-wide
        torch.set_num_threads(-threads)
        return
    openmp, (mkl, _) = _openmp(), mkl_thread_setter()
    if openmp is not None:
        openmp.omp_set_num_threads(threads)
    if mkl:
        mkl(mkl_local)


@contextlib.contextmanager
def single_threaded(device: torch.device | str = "cpu") -> Iterator[None]:
    """Compute on one CPU thread, this thread only: its BLAS and LAPACK calls and torch's parallel
    loops (a reduction split over threads sums in another order) run on one thread, so what it
    computes is the same bits under any OMP_NUM_THREADS, in any process, beside any other thread.
    Nothing to do on a GPU."""
    if torch.device(device).type != "cpu":
        yield
        return
    previous = pin_this_thread()
    try:
        yield
    finally:
        unpin_this_thread(previous)


def on_one_thread(method: Callable[..., R]) -> Callable[..., R]:
    """A method computed under `single_threaded` on its object's `device` (the CPU without one)."""

    @functools.wraps(method)
    def pinned(self: object, *args: object, **kwargs: object) -> R:
        with single_threaded(getattr(self, "device", "cpu")):
            return method(self, *args, **kwargs)

    return pinned


@contextlib.contextmanager
def workers(threads: int | None = None, device: torch.device | str = "cpu") -> Iterator[Run]:
    """A `run(operation, items)` that applies a tile operation to every item on `threads` worker
    threads (default `linalg_threads()`), each pinned to one BLAS thread, and returns the results
    in the items' order; the calling thread is pinned meanwhile. The operations of one call must be
    independent (each writes its own tiles): their order of completion then changes nothing. One
    thread, or a GPU, runs them on the calling thread in order. Worker threads start from the
    calling thread, so they share its floating-point settings (flushed denormals)."""
    threads = 1 if torch.device(device).type != "cpu" else (threads or linalg_threads())
    with single_threaded(device):
        if threads == 1:
            yield lambda operation, items: [operation(item) for item in items]
            return
        with ThreadPoolExecutor(threads, initializer=pin_this_thread) as pool:
            yield lambda operation, items: list(pool.map(operation, items))


# ------------------------------------------------------------------------------------------- tiles


def spans(size: int, width: int = TILE) -> list[slice]:
    """The fixed tiles of `size` rows or columns: `width` each, the last one shorter."""
    return [slice(start, min(start + width, size)) for start in range(0, size, width)]


def own_tile(values: torch.Tensor) -> torch.Tensor:
    """A contiguous copy in memory of its own (a view's products could depend on its alignment)."""
    return values.clone(memory_format=torch.contiguous_format)


def column_tiles(matrix: torch.Tensor, width: int = TILE) -> list[torch.Tensor]:
    return [own_tile(matrix[:, span]) for span in spans(matrix.shape[1], width)]


def row_blocks(matrix: torch.Tensor, rows: int = ROWS) -> list[torch.Tensor]:
    return [own_tile(matrix[span]) for span in spans(len(matrix), rows)]


def tiled(matrix: torch.Tensor) -> list[list[torch.Tensor]]:
    """A matrix as its row blocks, each as its column tiles: what `add_gram` and `add_cross` take."""
    return [column_tiles(block) for block in row_blocks(matrix)]


def add_gram(gram: torch.Tensor, blocks: list[list[torch.Tensor]], run: Run) -> None:
    """gram += H'H, where H's row blocks are `blocks` (each its column tiles, widths as `spans`):
    each tile (i, j), i >= j, is the sum over the row blocks in their order of H_ri' H_rj, added
    into gram's tile and mirrored into (j, i); a diagonal tile's lower triangle is mirrored into its
    upper one (a product's two triangles need not agree to the bit), so gram stays symmetric."""
    cols = spans(len(gram))

    def tile(pair: tuple[int, int]) -> None:
        i, j = pair
        total = blocks[0][i].T @ blocks[0][j]
        for block in blocks[1:]:
            total.addmm_(block[i].T, block[j])
        if i == j:
            total = total.tril() + total.tril(-1).T
        gram[cols[i], cols[j]] += total
        if i != j:
            gram[cols[j], cols[i]] = gram[cols[i], cols[j]].T

    run(tile, [(i, j) for i in range(len(cols)) for j in range(i + 1)])


def add_cross(
    out: torch.Tensor, blocks: list[list[torch.Tensor]], right: list[torch.Tensor], run: Run
) -> None:
    """out += H'Y, H's row blocks as in `add_gram` and Y's the same rows (`right`): each column tile
    of H gives its rows of `out`, summed over the row blocks in their order."""
    cols = spans(len(out))

    def tile(i: int) -> None:
        total = blocks[0][i].T @ right[0]
        for block, y in zip(blocks[1:], right[1:], strict=True):
            total.addmm_(block[i].T, y)
        out[cols[i]] += total

    run(tile, range(len(cols)))


def cholesky(matrix: torch.Tensor, shift: float, run: Run) -> Tiles | None:
    """The lower Cholesky factor of matrix + shift I (a symmetric matrix, its lower triangle read),
    as tiles, or None when that is not positive definite in floating point. Right-looking and tile
    by tile: at step k the diagonal tile is factored, the tiles below it solved against it, and
    every tile right of them updated by one product; a tile's updates come in the order of k."""
    cols = spans(len(matrix))
    n = len(cols)

    def copied(pair: tuple[int, int]) -> torch.Tensor:
        i, j = pair
        tile = own_tile(matrix[cols[i], cols[j]])
        if i == j:
            tile.diagonal().add_(shift)
        return tile

    flat = run(copied, [(i, j) for i in range(n) for j in range(i + 1)])
    factor: Tiles = [flat[i * (i + 1) // 2 : (i + 1) * (i + 2) // 2] for i in range(n)]
    for k in range(n):
        diagonal, info = torch.linalg.cholesky_ex(factor[k][k])
        if int(info) != 0:
            return None
        factor[k][k] = diagonal

        def below(i: int, k: int = k) -> None:  # L_ik = A_ik L_kk^-T
            factor[i][k] = torch.linalg.solve_triangular(
                factor[k][k].mT, factor[i][k], upper=True, left=False
            )

        def update(pair: tuple[int, int], k: int = k) -> None:  # A_ij -= L_ik L_jk'
            i, j = pair
            factor[i][j].addmm_(factor[i][k], factor[j][k].mT, alpha=-1)

        run(below, range(k + 1, n))
        run(update, [(i, j) for i in range(k + 1, n) for j in range(k + 1, i + 1)])
    return factor


def cholesky_solve(factor: Tiles, rhs: torch.Tensor, run: Run) -> torch.Tensor:
    """X with L L' X = rhs, L given as `cholesky`'s tiles: forward, then back substitution, tile by
    tile; a tile of the right-hand side takes its updates in a fixed order."""
    n = len(factor)
    rows = spans(sum(len(row[0]) for row in factor))
    x = [own_tile(rhs[span]) for span in rows]
    for k in range(n):
        x[k] = torch.linalg.solve_triangular(factor[k][k], x[k], upper=False)

        def forward(i: int, k: int = k) -> None:
            x[i].addmm_(factor[i][k], x[k], alpha=-1)

        run(forward, range(k + 1, n))
    for k in reversed(range(n)):
        x[k] = torch.linalg.solve_triangular(factor[k][k].mT, x[k], upper=True)

        def back(i: int, k: int = k) -> None:
            x[i].addmm_(factor[k][i].mT, x[k], alpha=-1)

        run(back, range(k))
    return torch.cat(x)


# ------------------------------------------------------------------------------ long LAPACK calls


def interruptible(operation: Callable[[], R], what: str) -> R:
    """`operation()` (one long LAPACK call: an LU solve or an eigendecomposition) on a worker
    thread pinned to one BLAS thread, the calling thread waiting for it in short waits: a LAPACK
    call holds its thread until it returns, so run on the main thread it would leave SIGINT and
    SIGTERM unanswered for minutes; here the main thread raises KeyboardInterrupt (or the CLI's
    `Terminated`) within a second, and the worker, a daemon, is abandoned with the process. Same
    bits as calling it here: one thread either way. `what` names it in the error it may raise and
    in the progress line while it lasts (`tosca_foundation.long_work`)."""
    found: list[R] = []
    failed: list[BaseException] = []

    def work() -> None:
        try:
            with single_threaded():
                found.append(operation())
        except BaseException as error:  # handed to the waiting thread
            failed.append(error)

    worker = threading.Thread(target=work, name=f"tosca {what}", daemon=True)
    with long_work.during(what):  # the progress line says it while it lasts
        worker.start()
        try:
            while worker.is_alive():
                worker.join(0.2)
        except BaseException:  # SIGINT or SIGTERM: the worker is left to the process's end
            long_work.abandon()
            raise
    if failed:
        raise failed[0]
    return found[0]
