"""On a CUDA machine: features agree with the CPU fp32 reference within a stated tolerance per precision.

Skipped where `torch.cuda.is_available()` is false (CI has no GPU). Tolerances, per image:
- fp32 (TF32 off): cosine >= 0.99999 and relative L2 error <= 1e-3, room for cuDNN's other fp32
  algorithms (fp32 and float64 on the CPU are far closer than that).
- bf16 autocast: mean cosine >= 0.99, minimum >= 0.97.
- `--decode torch` on CUDA (nvjpeg + GPU resizes) vs the same decoder on the CPU: mean absolute
  pixel difference <= 3 grey levels, the same crops and flips; features: mean cosine >= 0.999.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from support.commands import extract_request
from support.images import TINY_CNN, TINY_VIT, make_jpeg_tree

from featcache.extraction import plan_extraction, run_extraction
from featcache.images.transforms import make_preprocessing
from featcache.pipeline.reader import DeviceImages, SampleImages, collate
from featcache.sources.datasets import load_dataset
from featcache.store import FeatureStore

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

TOLERANCE = {"fp32": (0.99999, 0.99999), "bf16": (0.99, 0.97)}  # (mean cosine, min cosine)
LEVEL = 1 / 255


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def _extract(tmp_path: Path, tree: Path, name: str, **kw: Any) -> FeatureStore:
    """Two seeded views, small chunks, on the device the test names (auto: CUDA when present)."""
    request = extract_request(
        tmp_path, tree, name, **{"views": 2, "seed": 2, "chunk_size": 4, "device": "auto", **kw}
    )
    return FeatureStore.open(run_extraction(plan_extraction(request)).store)


def _all_features(store: FeatureStore) -> np.ndarray:
    views = np.asarray(store.group["train/views"][:])
    return np.concatenate([store.features("train"), store.features("test"), *views])


@pytest.mark.parametrize("model", [TINY_VIT, TINY_CNN])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_cuda_features_match_cpu_fp32(tmp_path: Path, image_tree: Path, model: str, precision: str) -> None:
    """Same decoder (pil), same crops: only the forward differs."""
    cpu = _extract(tmp_path, image_tree, "cpu", model=model, device="cpu", decode="pil")
    gpu = _extract(tmp_path, image_tree, "gpu", model=model, device="cuda", decode="pil", precision=precision)
    assert gpu.identity["precision"] == precision and gpu.attrs["compute"]["device"] == "cuda"
    a, b = _all_features(gpu), _all_features(cpu)
    cos = _cosines(a, b)
    mean_floor, min_floor = TOLERANCE[precision]
    print(f"\n{model} {precision}: cosine to CPU fp32 min {cos.min():.6f} mean {cos.mean():.6f}")
    assert cos.mean() >= mean_floor and cos.min() >= min_floor
    if precision == "fp32":
        relative = np.linalg.norm(a - b, axis=1) / np.linalg.norm(b, axis=1)
        assert relative.max() <= 1e-3


def test_tf32_stays_off_for_fp32_on_cuda(tmp_path: Path, image_tree: Path) -> None:
    seen: list[tuple[bool, bool]] = []
    from featcache.pipeline.mapper import FeatureMapper

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
    model.register_forward_hook(
        lambda *_: seen.append((torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32))
    )
    FeatureMapper(model, torch.device("cuda"), "fp32", 4)(torch.rand(6, 3, 16, 16))
    assert seen == [(False, False), (False, False)]


def test_torch_decode_on_cuda_matches_the_cpu(tmp_path: Path) -> None:
    """nvjpeg + GPU resizes vs torchvision on the CPU: the same crops and flips, near-identical pixels."""
    tree = make_jpeg_tree(tmp_path / "jpegs", classes=2, per_class=4)
    cpu = _extract(tmp_path, tree, "cpu", device="cpu", decode="torch")
    gpu = _extract(tmp_path, tree, "gpu", device="cuda", decode="torch")
    assert gpu.identity["preprocessing"]["decoder"] == "torch"
    cos = _cosines(_all_features(gpu), _all_features(cpu))
    print(f"\ndecode torch, cuda vs cpu: feature cosine min {cos.min():.6f} mean {cos.mean():.6f}")
    assert cos.mean() >= 0.999 and cos.min() >= 0.99

    # the pixels themselves, views included: the device stage on CUDA vs the loader stage on the CPU
    samples = load_dataset("imagefolder", tree, tmp_path / "cache").splits["train"]
    prep, rows = make_preprocessing("pilot", {}, "torch"), list(range(len(samples)))
    host = collate([SampleImages(samples, prep, "train", 9, 3)[i] for i in rows]).images
    encoded = collate([SampleImages(samples, prep, "train", 9, 3, device_stage=True)[i] for i in rows])
    device = DeviceImages(samples, prep, "train", 9, 3, torch.device("cuda"))(encoded).images
    assert host is not None and device is not None and device.device.type == "cuda"
    diff = (device.cpu() - host).abs().flatten(1).mean(1)
    print(f"mean abs pixel difference per image: max {diff.max() * 255:.3f} grey levels")
    assert diff.max() <= 3 * LEVEL


def test_pil_and_torch_decoders_on_cuda_agree(tmp_path: Path) -> None:
    tree = make_jpeg_tree(tmp_path / "jpegs", classes=2, per_class=4)
    pil = _extract(tmp_path, tree, "pil", device="cuda", decode="pil")
    tch = _extract(tmp_path, tree, "torch", device="cuda")  # auto on CUDA: torch
    assert tch.identity["preprocessing"]["decoder"] == "torch"
    cos = _cosines(_all_features(tch), _all_features(pil))
    assert cos.mean() >= 0.999 and cos.min() >= 0.99


@pytest.mark.skipif(importlib.util.find_spec("dask_cuda") is None, reason="dask-cuda is not installed")
def test_local_cuda_cluster_equals_one_process(tmp_path: Path, image_tree: Path) -> None:
    one = _extract(tmp_path, image_tree, "one", device="cuda", decode="torch")
    many = _extract(tmp_path, image_tree, "many", device="cuda", decode="torch", scheduler="local-cuda")
    cos = _cosines(_all_features(many), _all_features(one))
    assert cos.min() >= TOLERANCE["fp32"][1]


def test_damaged_jpegs_on_the_gpu_path_are_one_reason_or_the_cpu_pixels(tmp_path: Path) -> None:
    """nvjpeg meets each damaged JPEG of the hostile table (issue 47, point 2), batched with an
    intact one: the batch names the damaged file's position with a one-line reason, or (for a JPEG
    libjpeg reads too) gives the pixels the CPU gives within the nvjpeg tolerance."""
    from support.hostile_images import READABLE, encoded, hostile_files

    from featcache.images.decoding import DecodeError, decode_on_device, read_encoded
    from featcache.sources.datasets import SplitSamples

    (tmp_path / "intact.jpg").write_bytes(encoded("JPEG", seed=5))
    for case, (name, data) in hostile_files().items():
        if not name.endswith(".jpg") or not data.startswith(b"\xff\xd8\xff"):
            continue
        (tmp_path / name).write_bytes(data)
        samples = SplitSamples(["intact.jpg", name], np.zeros(2, dtype=np.int64), root=tmp_path)
        try:
            items = [read_encoded(samples, i) for i in range(2)]
        except Exception:  # refused from its header on the worker, before nvjpeg
            assert case not in READABLE
            continue
        try:
            on_gpu = decode_on_device(items, torch.device("cuda"))
        except DecodeError as exc:
            assert exc.position == 1 and "\n" not in exc.reason, (case, exc.reason)
            continue
        on_cpu = decode_on_device(items, torch.device("cpu"))
        for gpu, cpu in zip(on_gpu, on_cpu, strict=True):
            assert (gpu.cpu().float() - cpu.float()).abs().mean() <= 3, case
