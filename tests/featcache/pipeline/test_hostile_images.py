"""No image file crashes or hangs tosca, under either decoder (issue 47, point 2): a damaged PNG
that killed torchvision's `decode_png` with SIGSEGV (leaving the store's lock behind), a header
that lies, a truncation, damaged JPEG data, are one line naming the file (exit 2), or left out and
counted with `--skip-bad-images`, in `extract` (with and without loader workers) and `predict`.
Intact images decode to the very pixels torchvision gave before."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from support.commands import invoke, refusal
from support.hostile_images import KILLED_TORCHVISION, READABLE, encoded, hostile_files, pixels
from support.images import FAST_CNN, make_image_tree
from torchvision.io import ImageReadMode, decode_image

from featcache.images.decoding import decode_on_device, open_picture, read_encoded
from featcache.sources.datasets import SplitSamples
from featcache.store import FeatureStore
from tosca_foundation.locks import lock_path

HOSTILE = hostile_files()
DECODERS = ("pil", "torch")


def _samples(folder: Path, *names: str) -> SplitSamples:
    return SplitSamples(list(names), np.zeros(len(names), dtype=np.int64), root=folder)


def _as_array(picture: object) -> np.ndarray:
    if isinstance(picture, torch.Tensor):
        return picture.permute(1, 2, 0).numpy()
    return np.asarray(picture)


def _outcome(decode: Callable[[], object]) -> np.ndarray | Exception:
    """The decoded pixels, or the exception (any: each is one line; a signal would end pytest)."""
    try:
        return _as_array(decode())
    except Exception as exc:
        return exc


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_each_hostile_file_raises_or_decodes_the_same_under_both_decoders(tmp_path: Path, case: str) -> None:
    name, data = HOSTILE[case]
    (tmp_path / name).write_bytes(data)
    samples = _samples(tmp_path, name)
    pil = _outcome(lambda: open_picture(samples, 0, "pil", 256))
    tch = _outcome(lambda: open_picture(samples, 0, "torch", 256))
    # on CUDA the workers read (and decode all but JPEGs), the extraction process decodes the rest
    staged = _outcome(lambda: decode_on_device([read_encoded(samples, 0, 256)], torch.device("cpu"))[0])
    if case not in READABLE:
        assert all(isinstance(v, Exception) for v in (pil, tch, staged)), (case, pil, tch, staged)
        return
    assert all(isinstance(v, np.ndarray) for v in (pil, tch, staged)), (case, pil, tch, staged)
    assert np.array_equal(staged, tch)
    if case.startswith("PNG"):  # the damage is outside the pixel data: the intact image's pixels
        assert np.array_equal(pil, pixels()) and np.array_equal(tch, pixels())
    elif case.startswith("GIF"):
        assert np.array_equal(pil, tch)


@pytest.mark.parametrize("kind", ["PNG", "JPEG"])
@pytest.mark.parametrize("side", [64, 224])
@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_intact_images_decode_to_the_pixels_torchvision_gave_before(
    tmp_path: Path, kind: str, side: int, mode: str
) -> None:
    """The `torch` decoder's PNGs now come from Pillow: bit for bit what torchvision's decode_png
    gave (PNG is lossless); its JPEGs still come from torchvision, bit for bit as before."""
    from PIL import Image

    rng = np.random.default_rng(side)
    smooth = np.linspace(0, 255, side * side * 3).reshape(side, side, 3) + rng.normal(0, 20, (side, side, 3))
    image = Image.fromarray(np.clip(smooth, 0, 255).astype(np.uint8)).convert(mode)
    path = tmp_path / f"img.{kind.lower()}"
    image.save(path, kind)
    before = decode_image(torch.from_numpy(np.fromfile(path, dtype=np.uint8)), mode=ImageReadMode.RGB)
    now = open_picture(_samples(tmp_path, path.name), 0, "torch")
    assert isinstance(now, torch.Tensor) and torch.equal(now, before)
    if kind == "PNG":
        assert np.array_equal(
            np.asarray(open_picture(_samples(tmp_path, path.name), 0, "pil")), _as_array(before)
        )


def _extract(tree: Path, store: Path, decoder: str, workers: int, *extra: str) -> tuple[int, list[str]]:
    return invoke(
        *("extract", "--model", FAST_CNN, "--dataset", "imagefolder", "--data-root", tree, "--random-init"),
        *("--store", store, "--cache-dir", store.parent / "cache", "--chunk-size", "4", "--batch-size", "4"),
        *("--workers", workers, "--device", "cpu", "--decode", decoder, *extra),
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return make_image_tree(tmp_path / "imgs", classes=2, train=3, test=2)


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("case", KILLED_TORCHVISION)
def test_a_png_that_killed_torchvision_stops_extract_in_one_line_naming_it(
    tree: Path, tmp_path: Path, case: str, decoder: str
) -> None:
    name, data = HOSTILE[case]
    bad = tree / "train" / "class_1" / name
    bad.write_bytes(data)
    store = tmp_path / "s.zarr"
    line = refusal(*_extract(tree, store, decoder, 0), f"cannot read image {bad} (", "--skip-bad-images")
    assert "not marked done" in line
    assert not lock_path(store).exists()  # released: the process lived to say it


@pytest.mark.parametrize("decoder", DECODERS)
def test_loader_workers_name_the_file_in_one_line_and_skip_counts_every_hostile_file(
    tree: Path, tmp_path: Path, decoder: str
) -> None:
    """With two loader workers: the file killed a worker before (a traceback naming a pid, not the
    file); now the refusal names it, and `--skip-bad-images` leaves out every unreadable file of the
    table and keeps the readable ones."""
    name, data = HOSTILE["PNG, IDAT damaged (its CRC broken)"]
    (tree / "test" / "class_0" / name).write_bytes(data)
    store = tmp_path / "s.zarr"
    refusal(*_extract(tree, store, decoder, 2), f"cannot read image {tree / 'test' / 'class_0' / name} (")
    assert not lock_path(store).exists()

    for name, data in HOSTILE.values():
        (tree / "train" / "class_0" / name).write_bytes(data)
    code, lines = _extract(tree, tmp_path / "skip.zarr", decoder, 2, "--skip-bad-images")
    assert code == 0, lines
    st = FeatureStore.open(tmp_path / "skip.zarr")
    skipped = {item["id"] for item in st.attrs["skipped_images"]}
    unreadable = {f"train/class_0/{HOSTILE[c][0]}" for c in HOSTILE if c not in READABLE}
    assert skipped == unreadable | {f"test/class_0/{HOSTILE['PNG, IDAT damaged (its CRC broken)'][0]}"}
    assert all(item["reason"] and "0x" not in item["reason"] for item in st.attrs["skipped_images"])
    kept = set(st.ids("train").tolist())
    assert {f"train/class_0/{HOSTILE[c][0]}" for c in READABLE} <= kept
    assert st.is_complete() and np.isfinite(st.features("train")).all()
    assert not lock_path(tmp_path / "skip.zarr").exists()


@pytest.mark.parametrize("decoder", DECODERS)
def test_predict_names_a_hostile_file_given_alone_or_in_a_folder(
    tree: Path, tmp_path: Path, decoder: str
) -> None:
    store, run = tmp_path / "s.zarr", tmp_path / "run"
    assert _extract(tree, store, decoder, 0)[0] == 0
    fit = ("fit", "--store", store, "--run", run, "--device", "cpu", "--epochs", "1")
    assert invoke(*fit, "--init-cls", "1", "--increment", "1")[0] == 0
    folder = tmp_path / "new"
    folder.mkdir()
    (folder / "good.png").write_bytes(encoded("PNG", seed=3))
    for case in (*KILLED_TORCHVISION, "JPEG, progressive, entropy data garbled", "zero bytes"):
        name, data = HOSTILE[case]
        bad = folder / name
        bad.write_bytes(data)
        refusal(*invoke("predict", run, bad, "--device", "cpu"), f"cannot read image {bad} (")
        if case == KILLED_TORCHVISION[0]:
            refusal(*invoke("predict", run, folder, "--device", "cpu"), f"cannot read image {bad} (")
        bad.unlink()
    code, lines = invoke("predict", run, folder, "--device", "cpu")
    assert code == 0, lines
