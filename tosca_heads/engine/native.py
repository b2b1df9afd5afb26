"""The compiled CPU step: `csrc/luca_step.c`, built on first use with the system C compiler.

Why: on a CPU, one SGD step of the paper recipe is ~14 matmuls of 48 x 768 x 48 and ~100 small
element-wise PyTorch operations over [48, 768] tensors; the element-wise part, each op a separate
pass over memory plus its dispatch, costs more than the matmuls. The C step fuses it into a few
loops and calls the same BLAS (PyTorch's own `sgemm_`, so MKL threads as set by `step_mode`).

The library is cached per source, compiler and CPU under `$TOSCA_KERNEL_CACHE` (default
`~/.cache/tosca/kernels`), built into a temporary name and renamed, so concurrent sweep workers
never load a half-written file. `TOSCA_STEP` chooses (`engine.device`): `auto` (the compiled step
on a CPU when it can be built, else the PyTorch step, saying why once), `native` (insist: one-line
error if it cannot be built) or `torch` (always the PyTorch step in `kernels.py`).

Checked at every load, because a mismatch would corrupt memory silently: the library reports its
ABI version and the sizes of its two argument structs, which must equal `ABI_VERSION` and the
ctypes mirrors below (a stale library is rebuilt once, then refused in one line). A library is
loaded only from a folder owned by this user and writable by no one else (the folder is created
0700): anyone who could write there could run code in every process that trains.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import stat
import subprocess
import tempfile
import threading
import warnings
from pathlib import Path

import torch

from featcache.foundation.errors import UserError
from featcache.foundation.settings import setting
from tosca_heads.engine.device import mkl_thread_setter, step_choice
from tosca_heads.engine.layout import ParamLayout

ABI_VERSION = 2  # TOSCA_ABI_VERSION in csrc/luca_step.c

SOURCE = Path(__file__).parent / "csrc" / "luca_step.c"
FLAGS = [
    "-O3",
    "-march=native",
    "-fopenmp-simd",
    "-pthread",
    "-fPIC",
    "-shared",
    "-fno-math-errno",
    "-fno-trapping-math",
]
FLOW_CODES = {"tosca": 0, "tosca_r": 1, "adapter": 2, "calibrator": 3}
SLOT_NAMES = (
    "down.weight",
    "down.bias",
    "up.weight",
    "up.bias",
    "norm.weight",
    "norm.bias",
    "cal_down.weight",
    "cal_up.weight",
)
# the C structs' `Slots` members, in order: "down.weight" -> "off_down_w"
OFFSET_FIELDS = tuple(f"off_{n.replace('.weight', '_w').replace('.bias', '_b')}" for n in SLOT_NAMES)


class StepArgs(ctypes.Structure):
    """The C struct `StepArgs`, field by field."""

    _fields_ = [
        *(
            (name, ctypes.c_int64)
            for name in ("groups", "batch", "dim", "r", "s", "classes", "flow", "track", "threads")
        ),
        ("param_size", ctypes.c_int64),
        *((name, ctypes.c_int64) for name in OFFSET_FIELDS),
        ("features", ctypes.c_void_p),
        ("targets", ctypes.c_void_p),
        ("index", ctypes.c_void_p),
        ("index_stride", ctypes.c_int64),
        *(
            (name, ctypes.c_void_p)
            for name in (
                "flat",
                "grad_flat",
                "buf_flat",
                "weight",
                "grad_weight",
                "buf_weight",
                "sigma",
                "grad_sigma",
                "buf_sigma",
                "neg_lr",
                "momentum",
                "decay",
                "l1",
                "epoch_loss",
                "loss_sum",
                "correct",
                "work",
                "gemm",
                "blas_threads",
            )
        ),
    ]


class ForwardArgs(ctypes.Structure):
    """The C struct `ForwardArgs`, field by field."""

    _fields_ = [
        *((name, ctypes.c_int64) for name in ("groups", "rows", "dim", "r", "s", "flow", "normalize")),
        ("param_size", ctypes.c_int64),
        *((name, ctypes.c_int64) for name in OFFSET_FIELDS),
        *((name, ctypes.c_void_p) for name in ("params", "x", "out", "work", "gemm")),
    ]


def slot_offsets(layout: ParamLayout) -> dict[str, int]:
    """The `off_*` fields of both structs: each parameter's offset in the flat vector, -1 if absent."""
    return {
        field: layout.slots[name].offset if name in layout.slots else -1
        for field, name in zip(OFFSET_FIELDS, SLOT_NAMES, strict=True)
    }


def forward(layout: ParamLayout, modules: torch.Tensor, x: torch.Tensor, normalize: bool) -> torch.Tensor:
    """Every configuration's LuCA output ([G, n, d]; unit rows when `normalize`) on shared rows x
    [n, d], through the compiled library; only call where `use_native` said yes."""
    lib, gemm, why = load()
    if lib is None:
        raise RuntimeError(f"the compiled step is unavailable: {why}")
    modules = modules.detach().to(torch.float32).contiguous()
    x = x.detach().to(torch.float32).contiguous()
    groups, rows = modules.shape[0], x.shape[0]
    out = torch.empty(groups, rows, layout.dim)
    work = torch.empty(lib.tosca_forward_workspace_floats(layout.dim, layout.r, layout.s))
    args = ForwardArgs(
        groups=groups,
        rows=rows,
        dim=layout.dim,
        r=layout.r,
        s=layout.s,
        flow=FLOW_CODES[layout.flow],
        normalize=int(normalize),
        param_size=layout.size,
        params=modules.data_ptr(),
        x=x.data_ptr(),
        out=out.data_ptr(),
        work=work.data_ptr(),
        gemm=gemm,
        **slot_offsets(layout),
    )
    lib.tosca_forward(ctypes.byref(args))
    return out


def cache_dir() -> Path:
    chosen = setting("TOSCA_KERNEL_CACHE")
    if chosen is not None:
        return Path(chosen)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "tosca" / "kernels"


def _cpu_identity() -> str:
    """What -march=native depends on: the CPU's model and feature flags."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    keep = [line for line in text.splitlines() if line.startswith(("model name", "flags"))]
    return "\n".join(sorted(set(keep)))


def compiler() -> str | None:
    """The C compiler that builds the step: $CC, else cc or gcc on the PATH (None: none)."""
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def library_path(compiler_version: str) -> Path:
    """Where the library built from this source, with these flags, by this compiler (its
    `--version` text) for this CPU lives in the kernel cache."""
    key = hashlib.sha256(
        "\n".join([SOURCE.read_text(), " ".join(FLAGS), compiler_version, _cpu_identity()]).encode()
    ).hexdigest()[:16]
    return cache_dir() / f"luca_step-{key}.so"


def _sgemm_address() -> int | None:
    """PyTorch's own Fortran `sgemm_` (MKL or OpenBLAS inside libtorch_cpu), or None."""
    lib_dir = Path(torch.__file__).parent / "lib"
    for name in ("libtorch_cpu.so", "libtorch_cpu.dylib"):
        if (lib_dir / name).exists():
            try:
                fn = ctypes.CDLL(str(lib_dir / name)).sgemm_
            except (OSError, AttributeError):
                return None
            return ctypes.cast(fn, ctypes.c_void_p).value
    return None


_LOAD_LOCK = threading.Lock()


def load() -> tuple[ctypes.CDLL | None, int | None, str]:
    """(library, sgemm address, why not) for this process; built once per machine and source.
    Locked: the training and evaluation threads may both ask first."""
    with _LOAD_LOCK:
        return _load()


def blas_threads_address() -> int | None:
    """MKL's per-thread thread-count setter (None without MKL): the step's helper thread sets its
    own BLAS to one thread, as `step_mode` does for the caller."""
    return mkl_thread_setter()[1]


def _safe_folder(folder: Path) -> str:
    """Why a library may not be loaded from `folder` ("" when it may): it must be owned by this user
    and writable by no one else."""
    info = folder.stat()
    if info.st_uid != os.getuid():
        return f"the kernel cache {folder} belongs to another user (uid {info.st_uid})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"the kernel cache {folder} is writable by others (mode {stat.S_IMODE(info.st_mode):o})"
    return ""


def _build(compiler: str, target: Path) -> str:
    """Build the library at `target` (through a temporary name); "" or why it failed."""
    try:
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            built = Path(tmp) / target.name
            done = subprocess.run(
                [compiler, *FLAGS, str(SOURCE), "-o", str(built), "-lm"],
                capture_output=True,
                text=True,
                timeout=300,
            )
            if done.returncode != 0:
                first = (done.stderr.strip().splitlines() or ["no message"])[0]
                return f"{compiler} failed to build {SOURCE.name}: {first}"
            built.chmod(0o700)
            os.replace(built, target)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"could not build the compiled step in {target.parent} ({exc})"
    return ""


def _abi_mismatch(lib: ctypes.CDLL) -> str:
    """Why the loaded library does not fit this Python side ("" when it does)."""
    try:
        for name in ("tosca_abi_version", "tosca_sizeof_step_args", "tosca_sizeof_forward_args"):
            getattr(lib, name).argtypes, getattr(lib, name).restype = [], ctypes.c_int64
        version = lib.tosca_abi_version()
        sizes = (lib.tosca_sizeof_step_args(), lib.tosca_sizeof_forward_args())
    except AttributeError:
        return "it reports no ABI version (built from an older source)"
    expected = (ctypes.sizeof(StepArgs), ctypes.sizeof(ForwardArgs))
    if version != ABI_VERSION or sizes != expected:
        return f"ABI {version} with struct sizes {sizes}, where this tosca expects ABI {ABI_VERSION} and {expected}"
    return ""


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    """The argument and result types of the step's entry points (after `_abi_mismatch` passed)."""
    lib.tosca_step.argtypes = [ctypes.POINTER(StepArgs)]
    lib.tosca_step.restype = None
    lib.tosca_workspace_floats.argtypes = [ctypes.c_int64] * 5
    lib.tosca_workspace_floats.restype = ctypes.c_int64
    lib.tosca_forward.argtypes = [ctypes.POINTER(ForwardArgs)]
    lib.tosca_forward.restype = None
    lib.tosca_forward_workspace_floats.argtypes = [ctypes.c_int64] * 3
    lib.tosca_forward_workspace_floats.restype = ctypes.c_int64
    return lib


@functools.lru_cache(maxsize=1)
def _load() -> tuple[ctypes.CDLL | None, int | None, str]:
    gemm = _sgemm_address()
    if gemm is None:
        return None, None, "this PyTorch build exports no sgemm_ to call"
    cc = compiler()
    if cc is None:
        return None, None, "no C compiler (cc or gcc) found; set CC"
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return None, None, f"C compiler {cc} does not run ({exc})"
    folder = cache_dir()
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        return None, None, f"cannot make the kernel cache {folder} ({exc.strerror})"
    unsafe = _safe_folder(folder)
    if unsafe:
        raise UserError(
            f"{unsafe}: anyone who can write there could run code here; set TOSCA_KERNEL_CACHE to a folder of your own"
        )
    target = library_path(version)
    for attempt in range(2):  # a library that does not fit is rebuilt once
        if not target.exists():
            why = _build(cc, target)
            if why:
                return None, None, why
        unsafe = _safe_folder(target)
        if unsafe:
            raise UserError(f"{unsafe.replace('kernel cache', 'compiled step')}: refusing to load it")
        try:
            lib = ctypes.CDLL(str(target))
        except OSError as exc:
            return None, None, f"could not load {target} ({exc})"
        mismatch = _abi_mismatch(lib)
        if not mismatch:
            return _declare(lib), gemm, ""
        if attempt == 0:
            target.unlink(missing_ok=True)
            target = target.with_name(f"{target.stem}-rebuilt.so")
    raise UserError(
        f"the compiled step {target} does not fit this tosca ({mismatch}); delete {folder} and retry"
    )


def use_native(device: torch.device) -> bool:
    """Whether training on `device` takes the compiled step (see the module docstring)."""
    choice = step_choice()
    if device.type != "cpu" or choice == "torch":
        if choice == "native" and device.type != "cpu":
            raise UserError(
                f"TOSCA_STEP=native is a CPU step, but this trains on {device}: unset it or use auto"
            )
        return False
    lib, _, why = load()
    if lib is not None:
        return True
    if choice == "native":
        raise UserError(f"TOSCA_STEP=native, but the compiled CPU step is unavailable: {why}")
    _warn_once(why)
    return False


def forget() -> None:
    """Forget the loaded library and the warning given, so that the next `load` looks again (after
    CC or TOSCA_KERNEL_CACHE changed)."""
    _load.cache_clear()
    _warn_once.cache_clear()


@functools.lru_cache(maxsize=1)
def _warn_once(why: str) -> None:
    warnings.warn(
        f"the compiled CPU step is unavailable ({why}); training with the PyTorch step, 2-3x slower",
        RuntimeWarning,
        stacklevel=3,
    )
