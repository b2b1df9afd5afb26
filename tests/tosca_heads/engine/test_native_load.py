"""Building and loading the compiled step (engine/native.py): built once per source and machine,
loaded only from a private folder, checked at every load (ABI, struct sizes, the slot table
against the layout spec, torch's sgemm_ against torch's own product), and every failure a
fallback to the PyTorch step with one line (`TOSCA_STEP=auto`) or a one-line refusal (`native`)."""

from __future__ import annotations

import ctypes
import stat
import subprocess
from pathlib import Path

import pytest
import torch

from tosca_foundation.errors import UserError
from tosca_heads.engine import native
from tosca_heads.engine.layout import ParamLayout
from tosca_heads.engine.steppers import StepTask, TorchStep, make_step

pytestmark = pytest.mark.cpu_reference

# where a C compiler is, the compiled step must build: its tests fail there, never skip
needs_native = pytest.mark.skipif(native.compiler() is None, reason="no C compiler here")


def test_without_a_compiler_auto_falls_back_with_a_warning_and_native_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("TOSCA_KERNEL_CACHE", str(tmp_path / "kernels"))
    native.forget()
    try:
        monkeypatch.setenv("TOSCA_STEP", "native")
        with pytest.raises(UserError, match=r"compiled CPU step is unavailable: C compiler .*no-such-cc"):
            native.use_native(torch.device("cpu"))
        monkeypatch.setenv("TOSCA_STEP", "auto")
        with pytest.warns(RuntimeWarning, match="training with the PyTorch step"):
            assert native.use_native(torch.device("cpu")) is False
        assert not (tmp_path / "kernels").exists() or not list((tmp_path / "kernels").glob("*.so"))
    finally:
        native.forget()


@needs_native
def test_the_library_is_built_once_and_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOSCA_KERNEL_CACHE", str(tmp_path))
    native.forget()
    try:
        lib, _, why = native.load()
        assert lib is not None, why
        built = list(tmp_path.glob("luca_step-*.so"))
        assert len(built) == 1 and not [p for p in tmp_path.iterdir() if p.is_dir()]  # no temporaries left
        stamp = built[0].stat().st_mtime_ns
        native.forget()
        native.load()
        assert built[0].stat().st_mtime_ns == stamp  # reused, not rebuilt
    finally:
        native.forget()


@needs_native
def test_the_compiled_step_builds_where_there_is_a_compiler() -> None:
    lib, gemm, why = native.load()
    assert lib is not None and gemm is not None, why


@needs_native
def test_the_kernel_cache_is_made_private(kernel_cache: Path) -> None:
    assert native.load()[0] is not None
    assert stat.S_IMODE(kernel_cache.stat().st_mode) == 0o700
    (library,) = kernel_cache.glob("luca_step-*.so")
    assert stat.S_IMODE(library.stat().st_mode) & 0o077 == 0


@needs_native
@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777])
def test_a_kernel_cache_others_can_write_is_refused(kernel_cache: Path, mode: int) -> None:
    kernel_cache.mkdir(parents=True)
    kernel_cache.chmod(mode)
    with pytest.raises(
        UserError, match=r"writable by others .*set TOSCA_KERNEL_CACHE to a folder of your own"
    ):
        native.load()
    assert not list(kernel_cache.iterdir())  # nothing built, nothing loaded


@needs_native
def test_a_kernel_cache_of_another_user_is_refused(
    kernel_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kernel_cache.mkdir(parents=True, mode=0o700)
    monkeypatch.setattr(native.os, "getuid", lambda: kernel_cache.stat().st_uid + 1)
    with pytest.raises(UserError, match="belongs to another user"):
        native.load()


@needs_native
def test_a_library_others_can_write_is_not_loaded(kernel_cache: Path) -> None:
    assert native.load()[0] is not None
    (library,) = kernel_cache.glob("luca_step-*.so")
    library.chmod(0o777)
    native.forget()
    with pytest.raises(UserError, match=r"writable by others .*refusing to load it"):
        native.load()


@needs_native
def test_a_library_of_another_abi_is_rebuilt_once(kernel_cache: Path) -> None:
    """A library in the cache under this source's name that does not report this tosca's ABI (one
    built from another source) is replaced by a fresh build, and the fresh one is loaded."""
    cc = native.compiler()
    assert cc is not None
    version = subprocess.run([cc, "--version"], capture_output=True, text=True, check=True).stdout
    library = native.library_path(version)
    kernel_cache.mkdir(parents=True, mode=0o700)
    stale = kernel_cache / "stale.c"
    stale.write_text("long tosca_abi_version(void) { return -1; }\n")
    subprocess.run([cc, "-shared", "-fPIC", str(stale), "-o", str(library)], check=True)
    library.chmod(0o700)
    lib, _, why = native.load()
    assert lib is not None, why
    assert lib.tosca_abi_version() == native.ABI_VERSION
    assert not library.exists() and library.with_name(f"{library.stem}-rebuilt.so").exists()


@needs_native
def test_a_library_that_still_does_not_fit_stops_with_one_line(
    kernel_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(native, "ABI_VERSION", native.ABI_VERSION + 1)  # this side moved on alone
    with pytest.raises(UserError, match=r"does not fit this tosca \(ABI \d+ .*expects ABI \d+.*delete"):
        native.load()


@needs_native
def test_torchs_sgemm_passes_the_check_at_load(kernel_cache: Path) -> None:
    lib, gemm, why = native.load()
    assert lib is not None and gemm is not None, why
    assert native.gemm_mismatch(lib, gemm) == ""


@pytest.fixture
def wrong_sgemm(tmp_path: Path) -> int:
    """The address of a function with sgemm_'s signature that multiplies wrongly (it adds one to
    every product), as a torch build whose private symbol changed meaning could."""
    cc = native.compiler()
    assert cc is not None
    source = tmp_path / "wrong.c"
    source.write_text(
        "#include <stddef.h>\n"
        "void wrong_sgemm(const char *ta, const char *tb, const int *m, const int *n, const int *k,\n"
        "                 const float *alpha, const float *a, const int *lda, const float *b,\n"
        "                 const int *ldb, const float *beta, float *c, const int *ldc, size_t la, size_t lb) {\n"
        "    for (int j = 0; j < *n; ++j) for (int i = 0; i < *m; ++i) c[i + j * *ldc] = 1.0f;\n"
        "}\n"
    )
    subprocess.run([cc, "-shared", "-fPIC", str(source), "-o", str(tmp_path / "wrong.so")], check=True)
    library = ctypes.CDLL(str(tmp_path / "wrong.so"))
    wrong_sgemm.keep = library  # type: ignore[attr-defined]  # loaded as long as the test runs
    return ctypes.cast(library.wrong_sgemm, ctypes.c_void_p).value or 0


@needs_native
def test_a_wrong_sgemm_falls_back_to_the_pytorch_step_with_one_line(
    kernel_cache: Path, wrong_sgemm: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(native, "_sgemm_address", lambda: wrong_sgemm)
    lib, gemm, why = native.load()
    assert lib is None and gemm is None
    assert why.startswith("the sgemm_ this PyTorch build exports (libtorch_cpu) gave a wrong product")
    assert "\n" not in why
    monkeypatch.setenv("TOSCA_STEP", "auto")
    layout = ParamLayout(8, 2, 2, "tosca")
    flat, weight = torch.zeros(1, layout.size), torch.zeros(1, 2, 8)
    with pytest.warns(RuntimeWarning, match=r"wrong product.*training with the PyTorch step"):
        step = make_step(StepTask(layout, [_Hyper()], flat, weight, torch.ones(1), torch.tensor([0, 1])))
    assert isinstance(step, TorchStep)
    monkeypatch.setenv("TOSCA_STEP", "native")
    with pytest.raises(
        UserError, match=r"TOSCA_STEP=native, but the compiled CPU step is unavailable: the sgemm_"
    ):
        native.use_native(torch.device("cpu"))


class _Hyper:
    momentum, weight_decay, l1, batch_size = 0.9, 0.0, 0.0, 2


@needs_native
def test_a_library_whose_slot_table_is_not_the_specs_is_refused(
    kernel_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A library built from another slot table (here the spec's slots in reverse) would read every
    parameter at the wrong offset: it is rebuilt once, then refused in one line."""
    header = native.slots_header()
    members = header.split("#define TOSCA_SLOTS(X) ")[1].split("\n")[0].split()
    names = header.split("#define TOSCA_SLOT_NAMES ")[1].split("\n")[0].strip('"').split(",")
    swapped = (
        f"#define TOSCA_SLOTS(X) {' '.join(reversed(members))}\n"
        f'#define TOSCA_SLOT_NAMES "{",".join(reversed(names))}"\n'
    )
    monkeypatch.setattr(native, "slots_header", lambda: swapped)
    with pytest.raises(
        UserError,
        match=r"does not fit this tosca \(slots cal_up\.weight,.* the layout spec has down\.weight,",
    ):
        native.load()


@needs_native
def test_a_spec_with_a_slot_the_step_does_not_compute_does_not_build(
    kernel_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    header = native.slots_header().replace("X(cal_up_w)", "X(cal_up_w) X(gate_w)")
    monkeypatch.setattr(native, "slots_header", lambda: header)
    lib, _, why = native.load()
    assert lib is None
    assert "failed to build luca_step.c" in why
    assert "the layout spec holds other slots than the step computes" in why


def test_an_ascii_locale_finds_the_compiled_step(tmp_path: Path) -> None:
    """Under LC_ALL=C without UTF-8 mode the step's C source (which holds a non-ASCII character)
    is still read as UTF-8: the kernel cache's key, which every CPU fit asks for, is computed."""
    import os
    import sys

    from support import ROOT

    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""}
    env["TOSCA_KERNEL_CACHE"] = str(tmp_path)
    code = "from tosca_heads.engine import native; print(native.library_path('cc 1').name)"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().startswith("luca_step-") and done.stdout.strip().endswith(".so")


@pytest.mark.parametrize("home", ["", "relative/home"])
def test_an_empty_or_relative_home_is_refused_not_made_the_kernel_cache(
    home: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HOME="" would make ~ the filesystem's root (/.cache/tosca/kernels); a relative HOME the
    working folder: one line naming what to set, never a library built or loaded there."""
    monkeypatch.delenv("TOSCA_KERNEL_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", home)
    with pytest.raises(UserError, match=r"not an absolute folder.*TOSCA_KERNEL_CACHE"):
        native.cache_dir()
    monkeypatch.setenv("XDG_CACHE_HOME", "also/relative")  # ignored, as the XDG spec says
    with pytest.raises(UserError, match="HOME is"):
        native.cache_dir()
    monkeypatch.setenv("XDG_CACHE_HOME", "/tmp/xdg")
    assert native.cache_dir() == Path("/tmp/xdg/tosca/kernels")
