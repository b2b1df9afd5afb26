"""Images decode as a viewer shows them, the same way under both decoders: every mode Pillow opens
maps to 8-bit RGB by one set of rules (featcache.sources.pixels), and one pixel limit holds for both."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from support.images import FAST_CNN

from featcache.backbones import load_backbone, resolve_backbone
from featcache.images.decoding import open_picture
from featcache.images.transforms import make_preprocessing
from featcache.pipeline.mapper import FeatureMapper
from featcache.sources import pixels
from featcache.sources.datasets import SplitSamples

H, W = 40, 52


def _reference() -> np.ndarray:
    """A smooth 8-bit RGB picture: gradients and a blob."""
    yy, xx = np.mgrid[0:H, 0:W]
    base = np.stack([xx / W, yy / H, np.exp(-((xx - W / 2) ** 2 + (yy - H / 2) ** 2) / 200.0)], -1)
    return (255 * base).round().astype(np.uint8)


def _alpha() -> np.ndarray:
    return np.tile(np.linspace(40, 255, W).round().astype(np.uint8), (H, 1))


def _over_white(rgb: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    a = alpha[..., None].astype(np.float32) / 255
    return np.rint(rgb * a + 255 * (1 - a)).astype(np.uint8)


def _grey3(grey: np.ndarray) -> np.ndarray:
    return np.repeat(grey[..., None], 3, axis=2)


def _case(mode: str, folder: Path) -> tuple[Path, np.ndarray]:
    """(a file of this mode, the 8-bit RGB a viewer shows for it)."""
    ref = _reference()
    grey = np.asarray(Image.fromarray(ref).convert("L"))
    path = folder / f"{mode.replace(';', '')}.png"
    if mode == "1":
        img = Image.fromarray(grey).convert("1")
        img.save(path)
        return path, _grey3(np.asarray(img.convert("L")))
    if mode == "L":
        Image.fromarray(grey).save(path)
        return path, _grey3(grey)
    if mode == "LA":
        Image.fromarray(np.dstack([grey, _alpha()])).convert("LA").save(path)
        return path, _over_white(_grey3(grey), _alpha())
    if mode == "P":
        img = Image.fromarray(ref).quantize(64)
        img.save(path)
        return path, np.asarray(img.convert("RGB"))
    if mode == "P+transparency":
        img = Image.fromarray(ref).quantize(64)
        img.info["transparency"] = 0
        img.save(path, transparency=0)
        shown = np.asarray(img.convert("RGB")).copy()
        shown[np.asarray(img) == 0] = 255
        return path, shown
    if mode == "RGB":
        Image.fromarray(ref).save(path)
        return path, ref
    if mode == "RGBA":
        Image.fromarray(np.dstack([ref, _alpha()])).save(path)
        return path, _over_white(ref, _alpha())
    if mode == "I;16":
        Image.fromarray(grey.astype(np.uint16) * 257).save(path)
        return path, _grey3(grey)
    path = path.with_suffix(".tif")
    if mode == "CMYK":
        Image.fromarray(ref).convert("CMYK").save(path)
        return path, ref
    if mode == "I":
        Image.fromarray(grey.astype(np.int32) * 257).save(path)
        return path, _grey3(grey)
    assert mode == "F"
    Image.fromarray(grey.astype(np.float32) / 255).save(path)
    return path, _grey3(grey)


MODES = ["1", "L", "LA", "P", "P+transparency", "RGB", "RGBA", "CMYK", "I;16", "I", "F"]


def _pixels(picture: Image.Image | torch.Tensor) -> np.ndarray:
    if isinstance(picture, torch.Tensor):
        return picture.permute(1, 2, 0).numpy()
    assert picture.mode == "RGB"
    return np.asarray(picture)


@pytest.fixture(scope="module")
def features() -> object:
    """Features of a picture through the tiny test CNN (random init, fixed), by either decoder."""
    backbone = load_backbone(resolve_backbone(FAST_CNN), random_init=True)
    mapper = FeatureMapper(backbone.model, torch.device("cpu"), "fp32", 4)

    def embed(picture: Image.Image | torch.Tensor, decoder: str) -> np.ndarray:
        prep = make_preprocessing("timm", backbone.data_config, decoder)
        return mapper(prep.clean(picture).unsqueeze(0))[0]

    return embed


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_decodes_as_a_viewer_shows_it_under_both_decoders(
    mode: str, tmp_path: Path, features: object
) -> None:
    path, shown = _case(mode, tmp_path)
    with Image.open(path) as img:
        assert img.mode == mode.split("+")[0]  # the file really is of this mode
    samples = SplitSamples([path.name], np.zeros(1, dtype=np.int64), root=tmp_path)
    by_pil, by_torch = open_picture(samples, 0, "pil"), open_picture(samples, 0, "torch")
    np.testing.assert_array_equal(_pixels(by_pil), shown)
    np.testing.assert_array_equal(_pixels(by_torch), shown)
    reference = features(Image.fromarray(shown), "pil")  # type: ignore[operator]
    for decoder, picture in (("pil", by_pil), ("torch", by_torch)):
        got = features(picture, decoder)  # type: ignore[operator]
        cosine = float(got @ reference / np.linalg.norm(got) / np.linalg.norm(reference))
        assert cosine >= 0.99, (mode, decoder, cosine)


def test_a_16_bit_image_is_not_white_any_more(tmp_path: Path) -> None:
    """Pillow's own convert("RGB") clips 16-bit values to 255: the picture came out all white."""
    path, _ = _case("I;16", tmp_path)
    with Image.open(path) as img:
        assert (np.asarray(img.convert("RGB")) == 255).mean() > 0.95  # what happened before: white
    samples = SplitSamples([path.name], np.zeros(1, dtype=np.int64), root=tmp_path)
    assert _pixels(open_picture(samples, 0, "pil")).min() < 50


@pytest.mark.parametrize("decoder", ["pil", "torch"])
def test_one_pixel_limit_for_both_decoders(
    decoder: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = _case("RGB", tmp_path)
    monkeypatch.setattr(pixels, "MAX_PIXELS", 1000)
    samples = SplitSamples([path.name], np.zeros(1, dtype=np.int64), root=tmp_path)
    with pytest.raises(
        pixels.ImageTooLarge, match=f"{W} x {H} = {W * H:,} pixels, over the limit of 1,000 pixels"
    ):
        open_picture(samples, 0, decoder)


def _thin_png(path: Path, width: int, height: int) -> Path:
    Image.fromarray(np.zeros((height, width), dtype=np.uint8)).save(path, optimize=True)
    return path


@pytest.mark.parametrize(
    ("width", "height", "refused"),
    [
        (3, 20_000, True),  # 478 bytes as a PNG: 256 x 1,706,667 pixels once resized (1.3 GB)
        (20_000, 3, True),  # the same lying down
        (2, 30_000, True),
        (1, 60_000_000, True),  # past what torchvision's resize can count (OverflowError)
        (1, 256, False),  # 256 x 65,536: exactly the limit
        (1, 257, True),
        (4_000, 1_000, False),  # a panorama
    ],
)
def test_the_resize_of_a_thin_image_is_bounded(width: int, height: int, refused: bool) -> None:
    resized_width, resized_height = pixels.resized(width, height, 256)
    assert min(resized_width, resized_height) == 256
    assert (resized_width * resized_height > pixels.MAX_RESIZED_PIXELS) == refused
    if refused:
        with pytest.raises(
            pixels.ImageTooLarge, match=r"times longer than wide: scaling its short side to 256"
        ):
            pixels.check_pixels(width, height, 256)
    else:
        pixels.check_pixels(width, height, 256)


@pytest.mark.parametrize("decoder", ["pil", "torch"])
def test_a_thin_image_is_refused_from_its_header_by_both_decoders(
    decoder: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused before a pixel is decoded, with the same reason under both decoders (the transform
    checks again before it resizes, for any image handed to it)."""
    from featcache.images import decoding

    _thin_png(tmp_path / "thin.png", 1, 60_000_000)  # 116 kB; 60 MB decoded, more as RGB
    samples = SplitSamples(["thin.png"], np.zeros(1, dtype=np.int64), root=tmp_path)

    def decoded(*args: object, **kwargs: object) -> None:
        raise AssertionError("decoded before the header was checked")

    monkeypatch.setattr(Image.Image, "load", decoded)
    monkeypatch.setattr(decoding, "decode_jpeg_here", decoded)
    with pytest.raises(
        pixels.ImageTooLarge, match="1 x 60,000,000 pixels, 60,000,000 times longer than wide"
    ):
        open_picture(samples, 0, decoder, 256)
    with pytest.raises(pixels.ImageTooLarge, match="1 x 60,000,000 pixels"):
        decoding.read_encoded(samples, 0, 256)  # the device stage's worker half
    monkeypatch.undo()
    prep = make_preprocessing("pilot", {}, decoder)
    for picture in (Image.new("L", (3, 20_000)), torch.zeros(3, 20_000, 3, dtype=torch.uint8)):
        with pytest.raises(pixels.ImageTooLarge, match="3 x 20,000 pixels, 6,667 times longer than wide"):
            prep.clean(picture)


@pytest.mark.parametrize("decoder", ["pil", "torch"])
@pytest.mark.parametrize("replacement", ["fifo", "link to /dev/zero"])
def test_an_image_replaced_by_a_fifo_or_a_device_after_listing_is_refused_at_once(
    decoder: str, replacement: str, tmp_path: Path
) -> None:
    """Listed as a file, then swapped (in a shared folder): the reader would wait on the fifo for
    ever, or read /dev/zero for ever; refused when opened, naming why."""
    path, _ = _case("RGB", tmp_path)
    samples = SplitSamples([path.name], np.zeros(1, dtype=np.int64), root=tmp_path)
    path.unlink()
    if replacement == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    start = time.monotonic()
    with pytest.raises(pixels.NotAnImageFile, match="not a regular file"):
        open_picture(samples, 0, decoder, 256)
    assert time.monotonic() - start < 5
