"""LuCA (Learn and Calibrate): one module per task on the final [CLS] feature (method.md §3)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tosca_heads.method.recipe import FLOWS


class LuCA(nn.Module):
    """Adapter A(x) = W2 GELU(W1 x + b1) + b2, LayerNorm, calibrator C(z) = sigmoid(V2 ReLU(V1 z)).

    Flows: tosca z = LN(x + A(x)), out = z * C(z); tosca_r out = x * C(x) + LN(A(x));
    adapter out = LN(A(x)); calibrator out = x * C(x). A flow holds only the parts it uses,
    so its parameter count (and its L1 penalty) is what the flow really adds.
    """

    def __init__(self, dim: int, r: int, s: int, flow: str = "tosca"):
        super().__init__()
        if flow not in FLOWS:
            raise ValueError(f"unknown flow {flow!r}: use one of {', '.join(FLOWS)}")
        self.dim, self.r, self.s, self.flow = dim, r, s, flow
        if flow != "calibrator":
            self.down = nn.Linear(dim, r)
            self.up = nn.Linear(r, dim)
            self.norm = nn.LayerNorm(dim, eps=1e-5)
        if flow != "adapter":
            self.cal_down = nn.Linear(dim, s, bias=False)
            self.cal_up = nn.Linear(s, dim, bias=False)

    def adapter(self, x: torch.Tensor) -> torch.Tensor:
        return self.up(F.gelu(self.down(x)))  # exact GELU, not the tanh approximation

    def calibrator(self, z: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.cal_up(F.relu(self.cal_down(z))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.flow == "tosca":
            z = self.norm(x + self.adapter(x))
            return z * self.calibrator(z)
        if self.flow == "tosca_r":
            return x * self.calibrator(x) + self.norm(self.adapter(x))
        if self.flow == "adapter":
            return self.norm(self.adapter(x))
        return x * self.calibrator(x)

    def reinit_(self) -> LuCA:
        """The reference init of every task after the first: xavier weights, zero biases, LN 1/0."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
        return self

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def new_module(dim: int, r: int, s: int, flow: str, task: int) -> LuCA:
    """Task 0 keeps PyTorch's default init; later tasks are re-initialised (method.md §3 quirk)."""
    module = LuCA(dim, r, s, flow)
    return module if task == 0 else module.reinit_()
