"""The one way tosca writes and reads its files (tosca_foundation.atomic, .files, .tensorfiles):
no write goes through a planted link or into a fifo, temporaries are made exclusively under names
nobody can guess, and every metadata read is bounded (a fifo, a sparse 2 GiB file, JSON or TOML
nested thousands deep, a safetensors header describing an 8 GiB tensor) and one line, within
seconds."""

from __future__ import annotations

import ast
import json
import os
import struct
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tosca_foundation import atomic
from tosca_foundation.errors import UserError
from tosca_foundation.files import read_json, read_toml
from tosca_foundation.tensorfiles import TensorFileError, read_safetensors

ROOT = Path(__file__).resolve().parents[2]


def _figure() -> object:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots()
    axes.plot([0, 1])
    return figure


def _streamed(path: Path) -> None:
    with atomic.writing(path, "w", newline="") as fh:
        fh.write("a,b\n")


WRITERS: dict[str, Callable[[Path], None]] = {  # every way tosca writes a file
    "write_text (config, metrics, sweep.json, markers, tables, manifests)": lambda p: atomic.write_text(
        p, "{}"
    ),
    "write_bytes": lambda p: atomic.write_bytes(p, b"\x00"),
    "write_safetensors (task, head and router files)": lambda p: atomic.write_safetensors(
        p, {"w": torch.ones(2)}, {"task": "0"}
    ),
    "save_figure (plots)": lambda p: atomic.save_figure(_figure(), p.with_suffix(".png"), dpi=20),
    "writing (results.csv, parquet)": _streamed,
}


def _plant(kind: str, target: Path, outside: Path) -> None:
    if kind == "link to a file":
        target.symlink_to(outside)
    elif kind == "dangling link":
        target.symlink_to(outside.with_name("made-through-the-link"))
    elif kind == "fifo":
        os.mkfifo(target)
    else:
        target.mkdir()


@pytest.mark.parametrize("kind", ["link to a file", "dangling link", "fifo", "folder"])
@pytest.mark.parametrize("writer", list(WRITERS))
def test_no_writer_goes_through_a_planted_link_or_into_a_fifo(writer: str, kind: str, tmp_path: Path) -> None:
    shared, outside = tmp_path / "shared", tmp_path / "mine.txt"
    shared.mkdir()
    outside.write_text("keep\n")
    target = shared / ("plot.png" if "figure" in writer else "results.csv")
    _plant(kind, target, outside)
    start = time.monotonic()
    with pytest.raises(UserError, match=r"symbolic link|is a fifo|is a folder") as refused:
        WRITERS[writer](target)
    assert time.monotonic() - start < 10  # a fifo is never opened for writing: nothing waits
    assert "\n" not in str(refused.value)
    assert outside.read_text() == "keep\n" and not outside.with_name("made-through-the-link").exists()
    assert [p.name for p in shared.iterdir()] == [target.name]  # no temporary left behind
    assert target.is_symlink() or target.is_dir() or target.is_fifo()


@pytest.mark.parametrize("writer", list(WRITERS))
def test_no_writer_changes_a_file_another_name_shares(writer: str, tmp_path: Path) -> None:
    """A hard link (`ln results.csv mine.csv`): an append would land in the other name's file, a
    rewrite would part the two without a word; both are refused, and the file is left as it was."""
    shared, outside = tmp_path / "shared", tmp_path / "mine.txt"
    shared.mkdir()
    target = shared / ("plot.png" if "figure" in writer else "results.csv")
    target.write_text("keep\n")
    os.link(target, outside)
    with pytest.raises(UserError, match="has 2 hard links: another name shares this file") as refused:
        WRITERS[writer](target)
    assert "\n" not in str(refused.value)
    assert outside.read_text() == "keep\n" and os.stat(target).st_nlink == 2
    assert [p.name for p in shared.iterdir()] == [target.name]  # no temporary left behind


def test_a_temporary_linked_to_another_name_meanwhile_is_not_renamed_into_place(tmp_path: Path) -> None:
    target, other = tmp_path / "metrics.json", tmp_path / "other.json"
    target.write_text("old\n")
    with pytest.raises(UserError, match="replaced or linked to another name"), atomic.writing(target) as fh:
        fh.write("new\n")
        os.link(next(tmp_path.glob(".metrics.json.*.tmp")), other)  # by another user, meanwhile
    assert target.read_text() == "old\n" and os.stat(target).st_nlink == 1


def test_temporaries_are_made_exclusively_under_names_nobody_can_guess(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A link planted at the name a temporary would take is never written through: the name has 16
    random hex digits, and a name already taken (here: forced to be) is never reused."""
    target, outside = tmp_path / "metrics.json", tmp_path / "outside.txt"
    outside.write_text("keep\n")
    (tmp_path / f".metrics.json.{os.getpid()}.tmp").symlink_to(outside)  # the name tosca 0.1 used
    guessed = f".metrics.json.{os.getpid()}.{'a' * 16}.tmp"
    (tmp_path / guessed).symlink_to(outside)
    tokens = iter(["a" * 16, "b" * 16])
    monkeypatch.setattr(atomic.secrets, "token_hex", lambda n: next(tokens))
    atomic.write_text(target, '{"A_last": 1}\n')
    assert outside.read_text() == "keep\n"
    assert json.loads(target.read_text()) == {"A_last": 1} and not target.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == sorted(
        [f".metrics.json.{os.getpid()}.tmp", guessed]
    )


def test_leftovers_of_killed_writers_are_known_by_both_names_and_only_files_go(tmp_path: Path) -> None:
    import subprocess

    dead = subprocess.Popen(["true"])
    dead.wait()
    old = tmp_path / f".metrics.json.{dead.pid}.tmp"  # as tosca 0.1 named them
    new = tmp_path / f".metrics.json.{dead.pid}.{'0f' * 8}.tmp"
    live = tmp_path / f".config.json.{os.getpid()}.{'1e' * 8}.tmp"
    link = tmp_path / f".plot.png.{dead.pid}.{'2d' * 8}.tmp"
    for path in (old, new, live):
        path.write_text("half")
    link.symlink_to(tmp_path / "elsewhere")
    assert sorted(atomic.remove_stale(tmp_path)) == sorted([old, new])
    assert live.exists() and link.is_symlink()


def _sparse(path: Path, size: int, head: bytes = b"") -> None:
    with open(path, "wb") as fh:
        fh.write(head)
        fh.truncate(size)


def test_metadata_reads_are_bounded_and_one_line(tmp_path: Path) -> None:
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    huge = tmp_path / "huge.json"
    _sparse(huge, 2 << 30, b"{")  # 2 GiB that take 4 KiB on disk
    deep = tmp_path / "deep.json"
    deep.write_text('{"x": ' + "[" * 3000 + "]" * 3000 + "}")
    suite = tmp_path / "SUITE.toml"
    suite.write_text("seeds = " + "[" * 1000 + "]" * 1000 + '\nname = "[[not a bracket]]" # ]]]\n')
    cases = [
        (lambda: read_json(fifo, "run config", "fix it"), "is not a regular file"),
        (lambda: read_json(huge, "run config", "fix it"), r"is larger than such a file can be \(2\.0 GiB"),
        (lambda: read_json(deep, "run config", "fix it"), "nests more than 64 levels deep"),
        (lambda: read_toml(suite, "suite file"), "nests more than 64 levels deep"),
    ]
    for read, said in cases:
        start = time.monotonic()
        with pytest.raises(UserError, match=said) as refused:
            read()
        assert time.monotonic() - start < 5 and "\n" not in str(refused.value)
    fine = tmp_path / "fine.toml"
    fine.write_text('name = "a [[ b" # ]]\n[[stores]]\nname = "x"\nflows = [["a"], ["b"]]\n')
    assert read_toml(fine, "suite file")["stores"][0]["name"] == "x"


def _safetensors(path: Path, extra_bytes: int = 0) -> None:
    """A task-like file, optionally with an extra tensor whose 2^k bytes are a hole in the file."""
    from safetensors.torch import save

    raw = save({"w": torch.ones(4)}, metadata={"task": "0"})
    (n,) = struct.unpack("<Q", raw[:8])
    header, data = json.loads(raw[8 : 8 + n]), raw[8 + n :]
    if extra_bytes:
        header["extra"] = {
            "dtype": "F32",
            "shape": [extra_bytes // 4],
            "data_offsets": [len(data), len(data) + extra_bytes],
        }
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    _sparse(path, 8 + len(text) + len(data) + extra_bytes, struct.pack("<Q", len(text)) + text + data)


def test_a_safetensors_header_is_checked_before_any_tensor_is_read(tmp_path: Path) -> None:
    from tosca_foundation.tensorfiles import expect

    good, extra = tmp_path / "good.safetensors", tmp_path / "extra.safetensors"
    _safetensors(good)
    _safetensors(extra, 8 << 30)  # an 8 GiB tensor beside the expected one
    tensors, meta = read_safetensors(good, lambda h: expect(h, {"w": (4,)}, "F32"))
    assert tensors["w"].tolist() == [1.0] * 4 and meta == {"task": "0"}
    start = time.monotonic()
    with pytest.raises(TensorFileError, match="it holds an unexpected tensor 'extra'"):
        read_safetensors(extra, lambda h: expect(h, {"w": (4,)}, "F32"))
    assert time.monotonic() - start < 5  # nothing of the 8 GiB was read
    truncated = tmp_path / "cut.safetensors"
    truncated.write_bytes(good.read_bytes()[:-3])
    with pytest.raises(TensorFileError, match=r"its header puts 'w' \(F32 \[4\]\) at bytes 0\.\.16 of 13"):
        read_safetensors(truncated)
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_text("not a safetensors file")
    with pytest.raises(TensorFileError, match="it is not a safetensors file"):
        read_safetensors(garbage)


WRITE_CALLS = {"write_text", "write_bytes", "savefig", "save_file", "to_parquet", "to_csv"}
SHUTIL_WRITES = {"copy", "copy2", "copyfile", "copytree", "move"}


def _primitive_handles(tree: ast.AST) -> set[str]:
    """Names bound by `with atomic.writing(...) as fh` : files the primitive opened."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.With):
            for item in node.items:
                call = item.context_expr
                if (
                    isinstance(call, ast.Call)
                    and getattr(call.func, "attr", "") == "writing"
                    and isinstance(item.optional_vars, ast.Name)
                ):
                    names.add(item.optional_vars.id)
    return names


def test_every_writer_goes_through_the_one_primitive() -> None:
    """No module of the package writes a file but through tosca_foundation.atomic (or the lock
    file's own safe open): a writer that bypassed it would bypass the link and fifo checks."""
    found = []
    allowed = {
        ROOT / "tosca_foundation" / "atomic.py",
        ROOT / "tosca_foundation" / "locks.py",
    }
    for path in [
        *ROOT.glob("tosca_foundation/**/*.py"),
        *ROOT.glob("featcache/**/*.py"),
        *ROOT.glob("tosca_heads/**/*.py"),
        ROOT / "cli.py",
        *(ROOT / "tosca_cli").rglob("*.py"),
    ]:
        if path in allowed:
            continue
        tree = ast.parse(path.read_text())
        handles = _primitive_handles(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            owner = getattr(getattr(node.func, "value", None), "id", "")
            if owner == "atomic":  # the primitive itself
                continue
            keywords = {k.arg: k.value for k in node.keywords}
            first = node.args[0] if node.args else keywords.get("path_or_buf", keywords.get("path"))
            into_primitive = isinstance(first, ast.Name) and first.id in handles
            modes = [a.value for a in node.args[:2] if isinstance(a, ast.Constant)]
            mode = keywords.get("mode")
            modes += [mode.value] if isinstance(mode, ast.Constant) else []
            if (
                (name == "open" and any(isinstance(m, str) and m[:1] in "wax" for m in modes))
                or (name in WRITE_CALLS and first is not None and not into_primitive)
                or (name in SHUTIL_WRITES and owner == "shutil")
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    assert found == [], found
