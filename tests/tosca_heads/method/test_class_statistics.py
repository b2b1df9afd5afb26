"""The Gaussian router's shrunk covariance is built without a d x d identity, to the same bits."""

from __future__ import annotations

import torch

from tosca_heads.method.class_statistics import SHRINKAGE_GRID, _shrunk


def test_the_shrunk_covariance_is_the_identity_formulas_bit_for_bit() -> None:
    gen = torch.Generator().manual_seed(0)
    for dim in (3, 64, 300):
        a = torch.randn(dim, dim, generator=gen, dtype=torch.float64)
        covariance = a @ a.T / dim
        covariance[0, 1] = covariance[2, 2] = -0.0  # signed zeros and a denormal
        covariance[1, 0] = 1e-320
        scale = float(torch.trace(covariance)) / dim
        for lam in SHRINKAGE_GRID:
            identity = (1 - lam) * covariance + lam * scale * torch.eye(dim, dtype=torch.float64)
            shrunk = _shrunk(covariance, lam, lam * scale)
            assert torch.equal(shrunk.view(torch.int64), identity.view(torch.int64))
