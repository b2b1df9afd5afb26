"""What the terminal cannot encode never ends a command (issue 47, point 9): under an ASCII locale
(`LC_ALL=C`, no UTF-8 mode) a store's non-ASCII names are shown as Python escapes, and `--json`
stays JSON with `\\u` escapes; a byte of a file name that is not UTF-8 is shown as that byte."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support import ROOT
from support.stores import synthetic_store

from featcache.store import FeatureStore
from tosca_cli.terminal import plainly

CLASSES = ["café", "日本"]
ROOT_NAME = "/données/日本"


def _store_with_non_ascii_names(path: Path) -> Path:
    labels = {"train": np.repeat(np.arange(2), 4), "test": np.repeat(np.arange(2), 2)}
    dataset = {
        "name": "synthetic",
        "num_classes": 2,
        "class_names": CLASSES,
        "data_root": ROOT_NAME,
        "files_sha256": "ab" * 32,
        "samples": {split: len(y) for split, y in labels.items()},
    }
    identity = {"dataset": dataset, "backbone": {"alias": "none", "feature_dim": 4}, "views": 0, "seed": 0}
    ids = {split: [f"{split}/é{i}" for i in range(len(y))] for split, y in labels.items()}
    store = FeatureStore.create(path, identity, {}, ids, labels, 4, 0, 16, "float32")
    for split, y in labels.items():
        store.write_chunk(split, 0, np.ones((len(y), 4), np.float32), None)
    return path


def ascii_tosca(*args: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    """`tosca ARGS` in a process of an ASCII locale without UTF-8 mode."""
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, str(ROOT / "cli.py"), *args], env=env, cwd=cwd, capture_output=True, timeout=120
    )


def test_cache_info_of_non_ascii_names_under_an_ascii_locale_prints_them_escaped(tmp_path: Path) -> None:
    store = _store_with_non_ascii_names(tmp_path / "s.zarr")
    shown = ascii_tosca("cache", "info", str(store), cwd=tmp_path)
    assert shown.returncode == 0 and shown.stderr == b"", shown.stderr.decode("ascii", "replace")
    root = next(line for line in shown.stdout.decode("ascii").splitlines() if line.startswith("data root"))
    assert "/donn\\xe9es/\\u65e5\\u672c (files fingerprint abababababab" in root

    as_json = ascii_tosca("cache", "info", str(store), "--json", cwd=tmp_path)
    assert as_json.returncode == 0, as_json.stderr.decode("ascii", "replace")
    data = json.loads(as_json.stdout.decode("ascii"))  # ASCII bytes, and JSON
    assert data["identity"]["dataset"]["class_names"] == CLASSES
    assert data["identity"]["dataset"]["data_root"] == ROOT_NAME


def test_what_a_stream_cannot_encode_is_escaped_and_a_byte_that_is_not_utf8_is_that_byte() -> None:
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="ascii", errors="strict")
    saved = sys.stdout
    sys.stdout = stream
    try:
        with plainly():
            print("caf\u00e9 \u65e5 " + os.fsdecode(b"\xff.png"), file=stream)
            stream.flush()
        assert stream.errors == "strict"  # as it was, after the command
    finally:
        sys.stdout = saved
    assert raw.getvalue() == b"caf\\xe9 \\u65e5 \\xff.png\n"


@pytest.mark.heavy
@pytest.mark.parametrize("command", ["baselines", "sweep"])
def test_commands_that_write_tables_run_whole_under_an_ascii_locale(tmp_path: Path, command: str) -> None:
    """Every text file tosca writes is UTF-8 whatever the locale (`atomic._text_args`): `baselines`
    and `sweep` under LC_ALL=C PYTHONUTF8=0 ended in UnicodeEncodeError writing their tables ("±"),
    leaving half the files (issue 57, point 5). Their files are whole and read back as UTF-8."""
    store = synthetic_store(tmp_path / "s.zarr", classes=4)
    out = tmp_path / "out"
    split = [
        "--store",
        str(store.path),
        "--out",
        str(out),
        "--device",
        "cpu",
        "--init-cls",
        "2",
        "--increment",
        "2",
    ]
    extra = (
        ["--no-tosca", "--methods", "simplecil"] if command == "baselines" else ["--r", "2", "--epochs", "1"]
    )
    result = ascii_tosca(command, *split, *extra, cwd=tmp_path)
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-2000:]
    assert b"Traceback" not in result.stderr and b"UnicodeEncodeError" not in result.stdout + result.stderr
    written = [p for p in out.rglob("*") if p.suffix in (".md", ".csv", ".json")]
    assert any(p.suffix == ".md" for p in written), sorted(p.name for p in written)
    texts = [p.read_text(encoding="utf-8") for p in written]  # UTF-8 whatever the locale
    assert any(not text.isascii() for text in texts)  # what an ASCII default could not have written


def test_an_encoders_name_typed_in_utf8_under_an_ascii_locale_is_taken_as_typed(tmp_path: Path) -> None:
    """`tosca import --encoder probé` under LC_ALL=C PYTHONUTF8=0: Python holds the bytes of é as
    lone surrogates, and the name was refused as "names no encoder: give its name in printable
    text". A text argument that is not a path is read as the UTF-8 it is (`text.text_argument`);
    the store's path keeps its bytes."""
    arrays = tmp_path / "a.npz"
    rng = np.random.default_rng(0)
    np.savez(arrays, features=rng.normal(size=(40, 4)).astype(np.float32), labels=np.arange(40) % 2)
    store = tmp_path / "s-\u00e9.zarr"
    args = ["import", str(arrays), "--store", str(store), "--encoder", "prob\u00e9", "--modality", "text"]
    made = ascii_tosca(*args, "--name", "asc", "--test-fraction", "0.5", cwd=tmp_path)
    assert made.returncode == 0, made.stdout.decode("ascii", "replace") + made.stderr.decode(
        "ascii", "replace"
    )
    assert store.is_dir()
    data = json.loads(ascii_tosca("cache", "info", str(store), "--json", cwd=tmp_path).stdout.decode("ascii"))
    assert data["identity"]["backbone"]["encoder"] == "prob\u00e9"


def test_a_text_argument_is_read_as_the_utf8_it_is() -> None:
    from tosca_foundation.text import text_argument

    held = "prob\u00e9".encode().decode("ascii", "surrogateescape")  # as an ASCII locale holds it
    assert held != "prob\u00e9" and text_argument(held) == "prob\u00e9"
    assert text_argument("plain") == "plain"
    latin1 = b"prob\xe9".decode("ascii", "surrogateescape")  # not UTF-8: kept as the bytes it is
    assert text_argument(latin1) == latin1
