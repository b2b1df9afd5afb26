"""`--decode torch`: the same crops and flips as `pil`, near-identical pixels, its own store identity."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from support.commands import extract_request
from support.images import TINY_CNN, make_jpeg_tree

from featcache.extraction import ExtractRequest, open_or_create_store, plan_extraction, run_extraction
from featcache.images.decoding import decode_on_device, open_picture, read_encoded, resolve_decoder
from featcache.images.transforms import make_preprocessing, view_rng
from featcache.pipeline.chunks import extract_chunks
from featcache.pipeline.mapper import FeatureMapper
from featcache.sources.datasets import load_dataset
from featcache.store import SPLITS, FeatureStore
from tosca_foundation.errors import UserError

LEVEL = 1 / 255  # one uint8 grey level, in [0, 1] units
# torchvision's and PIL's resizes round to uint8 on their own: up to 2 levels apart on noise images,
# none on the real archives' JPEGs; decoders of two libjpeg builds may add one more.
PIXEL_TOLERANCE = 3 * LEVEL


def _timm_config() -> dict:
    return timm.data.resolve_data_config({}, model=timm.create_model(TINY_CNN, num_classes=0))


@pytest.mark.parametrize("policy", ["pilot", "timm"])
@pytest.mark.parametrize("tree_kind", ["png", "jpeg"])
def test_torch_decoder_gives_pils_pixels_with_the_same_crops_and_flips(
    tmp_path: Path, image_tree: Path, jpeg_tree: Path, policy: str, tree_kind: str
) -> None:
    tree = image_tree if tree_kind == "png" else jpeg_tree
    samples = load_dataset("imagefolder", tree, tmp_path / "c").splits["train"]
    pil = make_preprocessing(policy, _timm_config(), "pil")
    tch = make_preprocessing(policy, _timm_config(), "torch")
    scale = 1.0 if policy == "pilot" else 1 / min(tch.std or (1.0,))  # normalised units per [0, 1] unit
    tolerance = PIXEL_TOLERANCE * scale + 1e-6
    for i in range(len(samples)):
        a_img, t_img = open_picture(samples, i, "pil"), open_picture(samples, i, "torch")
        assert isinstance(t_img, torch.Tensor) and t_img.dtype == torch.uint8 and t_img.shape[0] == 3
        decoded_diff = np.abs(np.asarray(a_img, dtype=np.int16) - t_img.permute(1, 2, 0).numpy())
        assert decoded_diff.max() <= (0 if tree_kind == "png" else 1)
        clean_diff = (pil.clean(a_img) - tch.clean(t_img)).abs()
        assert float(clean_diff.max()) <= tolerance  # uint8 rounding, not geometry
        for k in range(3):
            rng_args = (5, "train", samples.ids[i], k)
            a = pil.view(a_img, view_rng(*rng_args))
            b = tch.view(t_img, view_rng(*rng_args))
            assert float((a - b).abs().max()) <= tolerance
            other = tch.view(t_img, view_rng(5, "train", samples.ids[i], k + 1))
            assert float((a - other).abs().mean()) > 10 * float((a - b).abs().mean())  # the check can fail


def test_batched_clean_equals_one_by_one(jpeg_tree: Path, tmp_path: Path) -> None:
    samples = load_dataset("imagefolder", jpeg_tree, tmp_path / "c").splits["train"]
    prep = make_preprocessing("timm", _timm_config(), "torch")
    images = [open_picture(samples, i, "torch") for i in range(len(samples))]
    images.append(images[0].clone())  # two of the same size: one resize call for both
    one_by_one = torch.stack([prep.clean(img) for img in images])
    torch.testing.assert_close(prep.clean_batch(images), one_by_one, rtol=0, atol=0)


def test_encoded_jpegs_decode_as_on_the_host(jpeg_tree: Path, image_tree: Path, tmp_path: Path) -> None:
    for tree in (jpeg_tree, image_tree):
        samples = load_dataset("imagefolder", tree, tmp_path / tree.name).splits["train"]
        encoded = [read_encoded(samples, i) for i in range(len(samples))]
        assert {e.kind for e in encoded} == ({"jpeg"} if tree == jpeg_tree else {"pixels"})
        decoded = decode_on_device(encoded, torch.device("cpu"))
        for i, image in enumerate(decoded):
            torch.testing.assert_close(image, open_picture(samples, i, "torch"), rtol=0, atol=0)


def _request(tmp_path: Path, tree: Path, name: str, **kw: object) -> ExtractRequest:
    """Two seeded views, small batches and chunks: the decoders meet every path."""
    return extract_request(
        tmp_path, tree, name, **{"views": 2, "seed": 4, "batch_size": 3, "chunk_size": 4, **kw}
    )


@pytest.mark.heavy
def test_device_stage_equals_loader_stage(
    tmp_path: Path, jpeg_tree: Path, planted_working_folder: Path
) -> None:
    """The CUDA road (bytes in the loader, batched decode + transforms + prefetch thread) run on the
    CPU writes exactly what the torch decoder's loader workers write."""
    host = FeatureStore.open(
        run_extraction(plan_extraction(_request(tmp_path, jpeg_tree, "host", decode="torch"))).store
    )
    plan = plan_extraction(_request(tmp_path, jpeg_tree, "device", decode="torch"))
    store, created = open_or_create_store(plan)
    assert created
    mapper = FeatureMapper(plan.backbone.model, torch.device("cpu"), "fp32", plan.batch_size)
    for split in SPLITS:
        extract_chunks(
            store,
            split,
            store.pending_chunks(split),
            plan.dataset.splits[split],
            plan.preprocessing,
            mapper,
            plan.request.seed,
            plan.batch_size,
            workers=1,
            device_stage=True,
        )
    assert store.is_complete()
    for split in SPLITS:
        np.testing.assert_array_equal(store.features(split), host.features(split))
    np.testing.assert_array_equal(
        np.asarray(store.group["train/views"][:]), np.asarray(host.group["train/views"][:])
    )
    # the loader workers imported nothing from the working folder (a planted multiprocessing.py)
    assert not planted_working_folder.exists(), planted_working_folder.read_text()


@pytest.mark.heavy
def test_decoder_is_part_of_the_identity(tmp_path: Path, image_tree: Path) -> None:
    pil = run_extraction(plan_extraction(_request(tmp_path, image_tree, "s")))  # auto on CPU: pil
    assert FeatureStore.open(pil.store).identity["preprocessing"]["decoder"] == "pil"
    with pytest.raises(UserError, match=r"preprocessing\.decoder: pil -> torch"):
        run_extraction(plan_extraction(_request(tmp_path, image_tree, "s", decode="torch")))
    tch = run_extraction(plan_extraction(_request(tmp_path, image_tree, "t", decode="torch")))
    assert FeatureStore.open(tch.store).fingerprint != FeatureStore.open(pil.store).fingerprint
    # auto resumes an existing store with the decoder it was made with
    again = run_extraction(plan_extraction(_request(tmp_path, image_tree, "t")))
    assert again.already_done


def test_auto_decoder_choice() -> None:
    assert resolve_decoder("auto", torch.device("cpu")) == "pil"
    assert resolve_decoder("auto", torch.device("cuda")) == "torch"
    assert resolve_decoder("auto", torch.device("cuda"), existing="pil") == "pil"
    assert resolve_decoder("torch", torch.device("cpu"), existing="pil") == "torch"
    with pytest.raises(UserError, match="use one of auto, pil, torch"):
        resolve_decoder("nvjpeg", torch.device("cpu"))


@pytest.mark.parametrize("device_stage", [False, True])
def test_unreadable_jpeg_is_named_and_its_chunk_not_flagged(tmp_path: Path, device_stage: bool) -> None:
    tree = make_jpeg_tree(tmp_path / "imgs")
    bad = tree / "train" / "class_1" / "img_001.jpg"
    bad.write_bytes(bad.read_bytes()[:40])  # a JPEG header and nothing else
    plan = plan_extraction(_request(tmp_path, tree, "bad", decode="torch", views=0))
    store, _ = open_or_create_store(plan)
    mapper = FeatureMapper(plan.backbone.model, torch.device("cpu"), "fp32", plan.batch_size)
    with pytest.raises(UserError, match=r"cannot read image .*img_001\.jpg"):
        extract_chunks(
            store,
            "train",
            store.pending_chunks("train"),
            plan.dataset.splits["train"],
            plan.preprocessing,
            mapper,
            0,
            plan.batch_size,
            workers=0,
            device_stage=device_stage,
        )
    assert not store.done("train")[-1]


def test_arrays_dataset_decodes_identically(tmp_path: Path) -> None:
    """In-memory (torchvision-format) images: both decoders see the very same pixels."""
    from featcache.sources.datasets import SplitSamples

    arrays = np.random.default_rng(0).integers(0, 256, size=(3, 32, 32, 3), dtype=np.uint8)
    samples = SplitSamples(ids=["0", "1", "2"], labels=np.zeros(3, np.int64), arrays=arrays)
    for i in range(3):
        np.testing.assert_array_equal(
            np.asarray(open_picture(samples, i, "pil")),
            open_picture(samples, i, "torch").permute(1, 2, 0).numpy(),
        )
