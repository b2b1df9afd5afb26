"""User mistakes end in one clear line and exit code 2 (exit 1 for a failed verify)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image
from support.commands import one_line, said
from support.images import TINY_VIT
from typer.testing import CliRunner

from cli import app
from featcache.store import FeatureStore

runner = CliRunner()


def _run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), (
        result.exception
    )
    return result.exit_code, result.output


def _one_line_error(output: str) -> str:
    return one_line(said(output))


def test_unknown_model_lists_valid_names(image_tree: Path) -> None:
    code, output = _run(
        "extract", "--model", "no_such_net", "--dataset", "imagefolder", "--data-root", str(image_tree)
    )
    line = _one_line_error(output)
    assert code == 2 and "no_such_net" in line and "vit_b16" in line and "effnet_lite0" in line


def test_unknown_dataset_lists_valid_names(image_tree: Path) -> None:
    code, output = _run("extract", "--model", TINY_VIT, "--dataset", "mnist", "--data-root", str(image_tree))
    line = _one_line_error(output)
    assert code == 2 and "mnist" in line and "eurosat" in line and "cifar100" in line


def test_missing_data_root(tmp_path: Path) -> None:
    code, output = _run(
        "extract", "--model", TINY_VIT, "--dataset", "imagefolder", "--data-root", str(tmp_path / "nope")
    )
    assert code == 2 and "data root not found" in _one_line_error(output)


def test_no_weights_offline_says_how_to_supply_them(
    image_tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, output = _run(
        "extract", "--model", "vit_b16", "--dataset", "imagefolder", "--data-root", str(image_tree)
    )
    line = _one_line_error(output)
    assert code == 2 and "--weights FILE" in line and "--random-init" in line


def test_bad_policy_and_dtype(image_tree: Path) -> None:
    base = [
        "extract",
        "--model",
        TINY_VIT,
        "--dataset",
        "imagefolder",
        "--data-root",
        str(image_tree),
        "--random-init",
    ]
    code, output = _run(*base, "--policy", "fancy")
    assert code == 2 and "pilot" in _one_line_error(output)
    code, output = _run(*base, "--dtype", "int8")
    assert code == 2 and "float16" in _one_line_error(output)


@pytest.mark.heavy
def test_corrupt_image_names_file_and_leaves_chunk_undone(tmp_path: Path, image_tree: Path) -> None:
    bad = image_tree / "train" / "class_1" / "img_001.png"
    bad.write_bytes(b"this is not a png")
    store = tmp_path / "s.zarr"
    code, output = _run(
        "extract",
        "--model",
        TINY_VIT,
        "--dataset",
        "imagefolder",
        "--data-root",
        str(image_tree),
        "--random-init",
        "--store",
        str(store),
        "--chunk-size",
        "4",
        "--batch-size",
        "2",
        "--workers",
        "0",
    )
    line = _one_line_error(output)
    assert code == 2 and str(bad) in line and "not marked done" in line
    done = FeatureStore.open(store).done("train")
    assert done.tolist() == [True, False, False]  # image 5 of 12 sits in chunk 1
    code, output = _run("cache", "verify", str(store))
    assert code == 1 and "chunks not done" in output
    Image.new("RGB", (50, 50), (10, 20, 30)).save(bad)  # repaired: the re-run completes it
    code, output = _run(
        "extract",
        "--model",
        TINY_VIT,
        "--dataset",
        "imagefolder",
        "--data-root",
        str(image_tree),
        "--random-init",
        "--store",
        str(store),
        "--chunk-size",
        "4",
        "--batch-size",
        "2",
        "--workers",
        "0",
    )
    assert code == 0 and "1 already done" in output
    assert FeatureStore.open(store).is_complete()


@pytest.mark.heavy
def test_conflicting_store_is_refused_then_overwritten(tmp_path: Path, image_tree: Path) -> None:
    store = tmp_path / "s.zarr"
    base = [
        "extract",
        "--model",
        TINY_VIT,
        "--dataset",
        "imagefolder",
        "--data-root",
        str(image_tree),
        "--random-init",
        "--store",
        str(store),
        "--workers",
        "0",
    ]
    assert _run(*base)[0] == 0
    code, output = _run(*base, "--views", "2")
    line = _one_line_error(output)
    assert code == 2 and "views: 0 -> 2" in line and "--overwrite" in line
    code, output = _run(*base, "--views", "2", "--overwrite")
    assert code == 0 and FeatureStore.open(store).views == 2


def test_cache_commands(tmp_path: Path, image_tree: Path) -> None:
    cache = tmp_path / "cache"
    assert (
        _run(
            "extract",
            "--model",
            TINY_VIT,
            "--dataset",
            "imagefolder",
            "--data-root",
            str(image_tree),
            "--random-init",
            "--cache-dir",
            str(cache),
            "--workers",
            "0",
        )[0]
        == 0
    )
    store = cache / "imagefolder" / f"{TINY_VIT}.zarr"
    code, output = _run("cache", "ls", "--cache-dir", str(cache), "--json")
    assert code == 0 and '"complete": true' in output and '"weights": "random-init"' in output
    code, output = _run("cache", "info", str(store))
    assert code == 0 and "RANDOM INIT" in output and "imagefolder" in output
    assert _run("cache", "verify", str(store)) == (0, f"OK {store}\n")
    code, output = _run("cache", "info", str(tmp_path))
    assert code == 2 and "not a feature store" in _one_line_error(output)


def test_demo_without_data_says_where_to_get_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOSCA_DATA", raising=False)
    code, output = _run("demo", "--cache-dir", str(tmp_path))
    line = _one_line_error(output)
    assert code == 2 and "no local data" in line and "EuroSAT" in line and "TOSCA_DATA" in line
    code, output = _run("demo", "--data-root", str(tmp_path / "nowhere.zip"))
    line = _one_line_error(output)
    assert code == 2 and "no EuroSAT data at" in line and "--data-root" in line


@pytest.mark.parametrize(
    "args",
    [
        ["fit", "--store", "s.zarr", "--task", "1"],
        ["sweep", "--store", "s.zarr", "--r", "4,8"],
        ["extract", "--model", TINY_VIT, "--dataset", "imagefolder", "--data-root", "images"],
    ],
    ids=["fit", "sweep", "extract"],
)
def test_a_deleted_working_folder_is_one_line(tmp_path: Path, args: list[str]) -> None:
    """A shell whose folder was deleted under it (`cd x; rm -rf ../x`): one line saying so before
    anything loads, where a fit used to end in an MKL fatal error (issue 47, point 11)."""
    import os
    import subprocess
    import sys

    from support import ROOT

    gone = tmp_path / "gone"
    gone.mkdir()
    # no empty entry: Python itself cannot start with one (the working folder) when that is gone
    paths = [str(ROOT), *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    script = 'cd "$1" && rmdir "$1" && shift && exec "$@"'
    done = subprocess.run(
        ["bash", "-c", script, "-", str(gone), sys.executable, str(ROOT / "cli.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stdout) == (2, ""), done.stderr[-2000:]
    assert done.stderr.splitlines() == [
        "error: the working folder was deleted (it no longer exists); cd to an existing folder and run "
        "the command again"
    ]
