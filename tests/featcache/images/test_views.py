"""Views depend only on (seed, split, sample id, view index): not on batching, workers or order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support.images import TINY_CNN, TINY_VIT

from featcache.extraction import ExtractRequest, plan_extraction, run_extraction
from featcache.images.transforms import make_preprocessing, random_resized_crop_box, view_rng
from featcache.sources.datasets import load_dataset
from featcache.store import FeatureStore


def _extract(tmp_path: Path, tree: Path, name: str, **kw: object) -> FeatureStore:
    args = dict(
        model=TINY_VIT,
        dataset="imagefolder",
        data_root=tree,
        cache_dir=tmp_path / "cache",
        store=tmp_path / f"{name}.zarr",
        random_init=True,
        views=3,
        seed=7,
        chunk_size=5,
        device="cpu",  # bit-exact comparisons across batch sizes hold for CPU kernels
    )
    args.update(kw)
    return FeatureStore.open(run_extraction(plan_extraction(ExtractRequest(**args))).store)


@pytest.mark.heavy
def test_same_seed_same_views_across_batch_sizes_and_workers(tmp_path: Path, image_tree: Path) -> None:
    a = _extract(tmp_path, image_tree, "a", batch_size=2, workers=0)
    b = _extract(tmp_path, image_tree, "b", batch_size=5, workers=2)
    assert a.views == 3 and a.group["train/views"].shape == (3, 12, a.dim)
    # ViT forwards are bit-exact across batch sizes on CPU: the whole arrays are identical.
    np.testing.assert_array_equal(a.view(0), b.view(0))
    np.testing.assert_array_equal(
        np.asarray(a.group["train/views"][:]), np.asarray(b.group["train/views"][:])
    )
    np.testing.assert_array_equal(a.features("train"), b.features("train"))


@pytest.mark.heavy
def test_cnn_views_match_across_batch_sizes(tmp_path: Path, image_tree: Path) -> None:
    """CNN convolutions pick other CPU kernels per batch size (~1e-6 apart); the crops are identical."""
    a = _extract(tmp_path, image_tree, "a", model=TINY_CNN, batch_size=3, workers=0)
    b = _extract(tmp_path, image_tree, "b", model=TINY_CNN, batch_size=4, workers=1)
    np.testing.assert_allclose(
        np.asarray(a.group["train/views"][:]), np.asarray(b.group["train/views"][:]), atol=1e-5
    )
    c = _extract(tmp_path, image_tree, "c", model=TINY_CNN, batch_size=3, workers=2)
    np.testing.assert_array_equal(
        np.asarray(a.group["train/views"][:]), np.asarray(c.group["train/views"][:])
    )


@pytest.mark.heavy
def test_different_seed_or_view_index_gives_different_crops(tmp_path: Path, image_tree: Path) -> None:
    a = _extract(tmp_path, image_tree, "a", batch_size=4, workers=0)
    b = _extract(tmp_path, image_tree, "b", batch_size=4, workers=0, seed=8)
    views = np.asarray(a.group["train/views"][:])
    assert not np.allclose(views, np.asarray(b.group["train/views"][:]))
    for k in range(1, 3):
        assert not np.allclose(views[0], views[k])
    assert not np.allclose(views[0], a.features("train"))  # a view is not the clean image
    # the clean features do not depend on the view seed
    np.testing.assert_array_equal(a.features("train"), b.features("train"))


def test_view_pixels_are_a_pure_function_of_identity(image_tree: Path) -> None:
    prep = make_preprocessing("pilot", {})
    img = load_dataset("imagefolder", image_tree, image_tree.parent / "c").splits["train"].open_image(0)
    first = prep.view(img, view_rng(1, "train", "a.png", 0))
    again = prep.view(img, view_rng(1, "train", "a.png", 0))
    assert first.shape == (3, 224, 224)
    assert (first == again).all()
    for other in (
        view_rng(2, "train", "a.png", 0),
        view_rng(1, "test", "a.png", 0),
        view_rng(1, "train", "b.png", 0),
        view_rng(1, "train", "a.png", 1),
    ):
        assert not (prep.view(img, other) == first).all()


@pytest.mark.parametrize("size", [(64, 64), (30, 200), (500, 40)])
def test_crop_box_stays_inside_image_with_scale_bounds(size: tuple[int, int]) -> None:
    h, w = size
    rng = np.random.default_rng(0)
    areas = []
    for _ in range(500):
        top, left, ch, cw = random_resized_crop_box(h, w, (0.05, 1.0), (3 / 4, 4 / 3), rng)
        assert top >= 0 and top + ch <= h and left >= 0 and left + cw <= w and ch > 0 and cw > 0
        areas.append(ch * cw / (h * w))
    assert min(areas) < 0.2
    if h == w:  # a square image admits the full 0.05-1 scale range (extreme shapes are capped by the ratio)
        assert max(areas) > 0.8
