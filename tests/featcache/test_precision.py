"""Faithful by default: fp32 on every device with TF32 off; bf16 only when asked, and recorded."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from support.commands import extract_request
from support.images import TINY_VIT
from typer.testing import CliRunner

from cli import app
from featcache.extraction import ExtractRequest, plan_extraction, run_extraction
from featcache.pipeline.mapper import FeatureMapper
from featcache.store import FeatureStore
from featcache.store.meanings import resolve_precision
from tosca_foundation.errors import UserError


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@pytest.mark.heavy
def test_default_is_fp32_and_bf16_is_recorded_and_shown(tmp_path: Path, image_tree: Path) -> None:
    assert ExtractRequest(model="m", dataset="d").precision == "fp32"
    fp32 = FeatureStore.open(
        run_extraction(plan_extraction(extract_request(tmp_path, image_tree, "a"))).store
    )
    bf16 = FeatureStore.open(
        run_extraction(plan_extraction(extract_request(tmp_path, image_tree, "b", precision="bf16"))).store
    )
    assert fp32.identity["precision"] == "fp32" and bf16.identity["precision"] == "bf16"
    assert fp32.attrs["compute"]["tf32"] is False
    assert fp32.fingerprint != bf16.fingerprint
    a, b = fp32.features("test"), bf16.features("test")
    assert not np.array_equal(a, b)  # bf16 really ran
    assert _cosines(a, b).min() > 0.999  # CPU autocast on a tiny ViT stays far above this
    with pytest.raises(UserError, match=r"precision: bf16 -> fp32"):
        run_extraction(plan_extraction(extract_request(tmp_path, image_tree, "b")))

    shown = CliRunner().invoke(app, ["cache", "info", str(bf16.path)])
    assert shown.exit_code == 0, shown.output
    assert "bf16: bfloat16 autocast" in shown.output and "not the fp32 default" in shown.output
    shown = CliRunner().invoke(app, ["cache", "info", str(fp32.path)])
    assert "fp32: float32, TF32 matmuls and convolutions off" in shown.output
    assert "decoder" in shown.output and "pil: PIL decodes" in shown.output


def test_auto_precision_is_gone_with_a_clear_line(tmp_path: Path, image_tree: Path) -> None:
    with pytest.raises(UserError, match=r"unknown --precision 'auto': use fp32 \(the default"):
        resolve_precision("auto")
    result = CliRunner().invoke(
        app,
        [
            *("extract", "--model", TINY_VIT, "--dataset", "imagefolder", "--data-root", str(image_tree)),
            *("--random-init", "--precision", "fp16", "--cache-dir", str(tmp_path / "c")),
        ],
    )
    assert result.exit_code == 2 and "unknown --precision 'fp16'" in result.output


def test_tf32_is_off_during_the_forward_and_restored_after() -> None:
    seen: list[tuple[bool, bool]] = []
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
    model.register_forward_hook(
        lambda *_: seen.append((torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32))
    )
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = True, True
    try:
        for precision in ("fp32", "bf16"):
            FeatureMapper(model, torch.device("cpu"), precision, 2)(torch.randn(5, 3, 8, 8))
        assert seen and all(flags == (False, False) for flags in seen)
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (True, True)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
