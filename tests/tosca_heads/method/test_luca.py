"""LuCA computes exactly method.md §3, with the paper's parameter count and init rule."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tosca_heads.method.classifier import cosine_logits, new_rows
from tosca_heads.method.luca import FLOWS, LuCA, new_module

pytestmark = pytest.mark.cpu_reference


def test_parameter_count_of_the_paper() -> None:
    assert LuCA(768, 48, 48, "tosca").num_parameters() == 149_808
    assert LuCA(768, 48, 48, "tosca_r").num_parameters() == 149_808
    assert LuCA(768, 48, 48, "adapter").num_parameters() == 2 * 768 * 48 + 48 + 768 + 2 * 768
    assert LuCA(768, 48, 48, "calibrator").num_parameters() == 2 * 768 * 48


def _by_hand(module: LuCA, x: np.ndarray) -> np.ndarray:
    """Section 3's formulas in plain numpy, from the module's own weights."""
    p = {k: v.detach().double().numpy() for k, v in module.state_dict().items()}
    gelu = np.vectorize(lambda v: 0.5 * v * (1 + math.erf(v / math.sqrt(2))))
    sigmoid = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731

    def adapter(v: np.ndarray) -> np.ndarray:
        return gelu(v @ p["down.weight"].T + p["down.bias"]) @ p["up.weight"].T + p["up.bias"]

    def ln(v: np.ndarray) -> np.ndarray:
        mu, var = v.mean(-1, keepdims=True), v.var(-1, keepdims=True)
        return (v - mu) / np.sqrt(var + 1e-5) * p["norm.weight"] + p["norm.bias"]

    def cal(v: np.ndarray) -> np.ndarray:
        return sigmoid(np.maximum(v @ p["cal_down.weight"].T, 0) @ p["cal_up.weight"].T)

    if module.flow == "tosca":
        z = ln(x + adapter(x))
        return z * cal(z)
    if module.flow == "tosca_r":
        return x * cal(x) + ln(adapter(x))
    if module.flow == "adapter":
        return ln(adapter(x))
    return x * cal(x)


@pytest.mark.parametrize("flow", FLOWS)
def test_each_flow_is_its_formula(flow: str) -> None:
    torch.manual_seed(0)
    module = LuCA(6, 2, 3, flow)
    with torch.no_grad():  # non-trivial LN affine so the check covers it
        for name, param in module.named_parameters():
            if name.startswith("norm."):
                param.copy_(torch.randn_like(param))
    x = np.random.default_rng(1).normal(size=(4, 6))
    got = module(torch.from_numpy(x).float()).detach().double().numpy()
    np.testing.assert_allclose(got, _by_hand(module, x), rtol=1e-5, atol=1e-6)


def test_init_rule_task0_default_later_xavier_zero_ln_ones() -> None:
    torch.manual_seed(0)
    first, later = new_module(64, 4, 4, "tosca", 0), new_module(64, 4, 4, "tosca", 1)
    assert first.down.bias.abs().sum() > 0  # PyTorch's default Linear init has non-zero biases
    assert later.down.bias.abs().sum() == 0 and later.up.bias.abs().sum() == 0
    assert torch.all(later.norm.weight == 1) and torch.all(later.norm.bias == 0)
    bound = math.sqrt(6 / (64 + 4))  # xavier_uniform for a 64 -> 4 layer
    assert later.down.weight.abs().max() <= bound and later.down.weight.abs().max() > 0.8 * bound


def test_cosine_classifier_growth_quirk_and_formula() -> None:
    first = new_rows(3, 16, first_task=True, generator=torch.Generator().manual_seed(0))
    assert first.shape == (3, 16) and first.abs().max() <= 1 / 4 and first.abs().sum() > 0
    later = new_rows(2, 16, first_task=False)
    assert torch.all(later == 0)  # later tasks: zero rows (the reference quirk)
    weight, sigma = torch.cat([first, later]), torch.tensor([1.5])
    feats = torch.randn(4, 16)
    cos = torch.nn.functional.normalize(feats, dim=1) @ torch.nn.functional.normalize(weight, dim=1).T
    torch.testing.assert_close(cosine_logits(feats, weight, sigma), 1.5 * cos)
    assert torch.all(cosine_logits(feats, weight, sigma)[:, 3:] == 0)  # a zero row scores 0
