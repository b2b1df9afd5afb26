"""Bad data never becomes a silently wrong store: empty or one-sided classes are refused naming the
folder, unreadable images are refused naming the file (or, with --skip-bad-images, left out and
listed in the store's attrs and `cache info`), and NaN/inf features never make a chunk done."""

from __future__ import annotations

import io
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file
from support.commands import refusal, said
from support.images import FAST_CNN, make_image_tree
from typer.testing import CliRunner

from cli import app
from featcache.backbones import load_backbone, resolve_backbone
from featcache.pipeline.mapper import FeatureMapper
from featcache.store import FeatureStore
from tosca_foundation.text import image_name

runner = CliRunner()


def _extract(tree: Path, store: Path, *extra: str) -> tuple[int, list[str]]:
    result = runner.invoke(
        app,
        [
            *("extract", "--model", FAST_CNN, "--dataset", "imagefolder", "--data-root", str(tree)),
            *("--store", str(store), "--cache-dir", str(store.parent / "cache"), "--chunk-size", "2"),
            *("--batch-size", "2", "--workers", "0", "--device", "cpu", *extra),
        ],
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, said(result.output)


def _refused(code: int, lines: list[str]) -> str:
    return refusal(code, lines)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return make_image_tree(tmp_path / "imgs", classes=3, train=3, test=2)


def _empty(folder: Path) -> None:
    shutil.rmtree(folder)
    folder.mkdir()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            "empty train/class_2",
            "class 'class_2' has 2 image(s) in {t}/test/class_2 but none in {t}/train/class_2",
        ),
        (
            "empty test/class_2",
            "class 'class_2' has 3 image(s) in {t}/train/class_2 but none in {t}/test/class_2",
        ),
        (
            "no test/class_2",
            "class 'class_2' has 3 image(s) in {t}/train/class_2 but none in {t}/test/class_2",
        ),
        ("empty both class_2", "class folder {t}/train/class_2 holds no images (.jpg, .jpeg, .png"),
        ("no train/class_2", "{t}/test has classes missing from train/: class_2"),
        (
            "text-only train/class_2",
            "class 'class_2' has 2 image(s) in {t}/test/class_2 but none in {t}/train/class_2",
        ),
    ],
)
def test_classes_without_images_in_a_split_are_refused_naming_the_folder(
    tree: Path, tmp_path: Path, change: str, message: str
) -> None:
    what, place = change.rsplit(" ", 1)
    folders = (
        [tree / "train" / "class_2", tree / "test" / "class_2"] if place == "class_2" else [tree / place]
    )
    for folder in folders:
        if what == "no":
            shutil.rmtree(folder)
        else:
            _empty(folder)
            if what == "text-only":
                (folder / "README.txt").write_text("no images here")
    for flags in ([], ["--skip-bad-images"]):  # no flag makes a class without images acceptable
        line = _refused(*_extract(tree, tmp_path / "s.zarr", "--random-init", *flags))
        assert message.format(t=tree) in line, line
        assert not (tmp_path / "s.zarr").exists()  # refused before anything was written


def _truncated(kind: str) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (48, 48, 3), dtype=np.uint8)).save(buffer, kind)
    return buffer.getvalue()[: len(buffer.getvalue()) // 2]


BAD_FILES = {
    "text named .jpg": ("train/class_1/notes.jpg", b"these are notes, not a JPEG\n"),
    "zero bytes": ("train/class_0/img_001.png", b""),
    "truncated PNG": ("train/class_2/img_000.png", _truncated("PNG")),
    "truncated JPEG": ("test/class_1/broken.jpg", _truncated("JPEG")),
}


@pytest.mark.parametrize("decoder", ["pil", "torch"])
@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_unreadable_image_is_refused_naming_the_file(
    tree: Path, tmp_path: Path, case: str, decoder: str
) -> None:
    relative, data = BAD_FILES[case]
    (tree / relative).write_bytes(data)
    store = tmp_path / "s.zarr"
    line = _refused(*_extract(tree, store, "--random-init", "--decode", decoder))
    assert str(tree / relative) in line and "--skip-bad-images" in line, line
    if case == "zero bytes":  # found while listing: nothing written at all
        assert line.startswith("error: empty image file (0 bytes): ") and not store.exists()
    else:  # found when its chunk is decoded: that chunk is not done, none holds NaN
        st = FeatureStore.open(store)
        assert not st.is_complete() and "not marked done" in line
        assert all(np.isfinite(st.features(split)).all() for split in ("train", "test"))


def test_skip_bad_images_leaves_them_out_lists_them_and_resumes_without_a_rescan(
    tree: Path, tmp_path: Path
) -> None:
    for relative, data in BAD_FILES.values():
        (tree / relative).write_bytes(data)
    store = tmp_path / "s.zarr"
    code, lines = _extract(tree, store, "--random-init", "--skip-bad-images")
    assert code == 0, lines
    st = FeatureStore.open(store)
    skipped = st.attrs["skipped_images"]
    assert sorted((s["split"], s["id"]) for s in skipped) == [
        ("test", "test/class_1/broken.jpg"),
        ("train", "train/class_0/img_001.png"),
        ("train", "train/class_1/notes.jpg"),
        ("train", "train/class_2/img_000.png"),
    ]
    assert all(s["reason"] for s in skipped)
    assert st.identity["skip_bad_images"] is True
    assert (
        st.layout("train").n == 9 + 1 - 3 and st.layout("test").n == 6
    )  # 3 bad of 10 train, 1 bad of 7 test
    assert not {s["id"] for s in skipped} & set(st.ids("train").tolist() + st.ids("test").tolist())
    assert st.is_complete() and all(np.isfinite(st.features(s)).all() for s in ("train", "test"))

    info = runner.invoke(app, ["cache", "info", str(store)]).output
    assert "skipped images     4 unreadable, left out (--skip-bad-images)" in info
    assert all(f"{image_name(s['split'], s['id'])}: " in info for s in skipped)
    assert "train/train/" not in info  # ids of a train/<class>/ tree already start with their split
    verify = runner.invoke(app, ["cache", "verify", str(store)])
    assert verify.exit_code == 0 and "4 unreadable image(s) were left out on purpose" in verify.output

    (tree / "train/class_1/notes.jpg").unlink()  # a rerun reuses the store's list: no rescan, no change
    code, lines = _extract(tree, store, "--random-init", "--skip-bad-images")
    assert code == 0 and any("nothing to do" in line for line in lines), lines
    for relative, _ in BAD_FILES.values():
        (tree / relative).unlink(missing_ok=True)
    line = _refused(*_extract(tree, store, "--random-init"))  # the flag is part of the store's identity
    assert line.endswith(
        "made with another configuration (skip_bad_images: True -> None); pass --overwrite "
        "to replace it or --store PATH for a new one"
    ), line


def test_skip_bad_images_that_empties_a_class_is_refused(tree: Path, tmp_path: Path) -> None:
    for path in (tree / "test" / "class_0").iterdir():
        path.write_bytes(b"")
    line = _refused(*_extract(tree, tmp_path / "s.zarr", "--random-init", "--skip-bad-images"))
    assert f"class 'class_0' has 3 image(s) in {tree}/train/class_0 but none in {tree}/test/class_0" in line


def test_nan_weights_never_mark_a_chunk_done(tree: Path, tmp_path: Path) -> None:
    model = load_backbone(resolve_backbone(FAST_CNN), random_init=True).model
    state = {k: v.clone().contiguous() for k, v in model.state_dict().items()}
    first = next(k for k, v in state.items() if v.is_floating_point() and v.ndim == 4)
    state[first][0, 0, 0, 0] = float("nan")
    weights = tmp_path / "nan.safetensors"
    save_file(state, str(weights))
    store = tmp_path / "s.zarr"
    line = _refused(*_extract(tree, store, "--weights", str(weights)))
    assert line.startswith(
        "error: the backbone gave NaN or inf features for 2 image(s) of train chunk 0: "
        "train/class_0/img_000.png (clean), train/class_0/img_001.png (clean); the chunk is not marked done"
    ), line
    assert not FeatureStore.open(store).done("train").any()


def test_one_inf_view_names_that_image_and_view(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = FeatureMapper.__call__

    def poisoned(self: FeatureMapper, images: torch.Tensor) -> Any:
        out = original(self, images)
        if images.shape[0] == 2 * (1 + 2) and poisoned.calls == 1:  # the second batch of train
            out[2 + 1 * 2 + 0, 5] = np.inf  # sample 1 of the batch, view 0
        poisoned.calls += 1
        return out

    poisoned.calls = 0  # type: ignore[attr-defined]
    monkeypatch.setattr(FeatureMapper, "__call__", poisoned)
    store = tmp_path / "s.zarr"
    line = _refused(*_extract(tree, store, "--random-init", "--views", "2"))
    ids = FeatureStore.open(store).ids("train")
    assert f"for 1 image(s) of train chunk 1: {ids[3]} (view 0);" in line, line
    assert FeatureStore.open(store).done("train").tolist() == [True, False, False, False, False]
    monkeypatch.undo()
    code, lines = _extract(tree, store, "--random-init", "--views", "2")
    assert code == 0 and any("7 computed, 1 already done" in x for x in lines), lines


@pytest.mark.parametrize("decoder", ["pil", "torch"])
def test_a_thin_image_is_refused_or_left_out_and_said(tree: Path, tmp_path: Path, decoder: str) -> None:
    """3 x 20,000 pixels, 478 bytes as a PNG: resized to its short side it would take gigabytes.
    Refused like an unreadable image, naming it and why; left out and listed with --skip-bad-images;
    and `predict` refuses it for the same reason."""
    thin = tree / "train" / "class_1" / "thin.png"
    Image.fromarray(np.zeros((20_000, 3), dtype=np.uint8)).save(thin, optimize=True)
    line = _refused(*_extract(tree, tmp_path / "s.zarr", "--random-init", "--decode", decoder))
    assert (
        f"{thin} (ImageTooLarge: 3 x 20,000 pixels, 6,667 times longer than wide: scaling its short side"
        in line
    )
    store = tmp_path / "skip.zarr"
    code, lines = _extract(tree, store, "--random-init", "--decode", decoder, "--skip-bad-images")
    assert code == 0, lines
    (skipped,) = FeatureStore.open(store).attrs["skipped_images"]
    assert skipped["id"] == "train/class_1/thin.png"
    assert skipped["reason"].startswith("ImageTooLarge: 3 x 20,000 pixels, 6,667 times longer than wide")
    if decoder == "torch":
        return
    run = tmp_path / "run"
    split = ("--init-cls", "1", "--increment", "1")
    fit = ("fit", "--store", store, "--run", run, "--device", "cpu", "--epochs", "1", *split)
    assert runner.invoke(app, [str(a) for a in fit]).exit_code == 0
    for name, (width, height) in (("thin.png", (3, 20_000)), ("thinner.png", (1, 60_000_000))):
        Image.fromarray(np.zeros((height, width), dtype=np.uint8)).save(tmp_path / name, optimize=True)
        result = runner.invoke(app, ["predict", str(run), str(tmp_path / name), "--device", "cpu"])
        line = _refused(result.exit_code, [x for x in result.output.splitlines() if x.strip()])
        assert f"cannot read image {tmp_path / name} (ImageTooLarge: {width:,} x {height:,} pixels, " in line
        assert "times longer than wide: scaling its short side to" in line
