"""LuCA + cosine classifier + cross-entropy, forward and backward written out for G stacked configurations.

Autograd would record ~100 tiny ops per step and replay them; here the backward is the chain
rule by hand (method.md §3-4), using ATen's own fused backward kernels where one exists
(LayerNorm, GELU, sigmoid, ReLU, log-softmax), so the numbers follow autograd's closely.
Shapes: G configurations, b samples per batch, d features, R and S the padded bottlenecks,
C classes seen. Matmuls go through `bmm`, or plain `mm` when G = 1 (measurably cheaper on CPU).

Zero padding is exactly inert: a padded unit's pre-activation is 0, GELU(0) = ReLU(0) = 0, its
outgoing weights are 0, so its outputs, gradients (and so momenta and L1 sign terms) stay 0.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from tosca_heads.engine.layout import ParamLayout

aten = torch.ops.aten
LN_EPS = 1e-5
NORM_EPS = 1e-12  # F.normalize's eps


def bmm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """[G, M, K] @ [G, K, N]; `mm` on the single matrix when G = 1."""
    if a.shape[0] == 1:
        if out is None:
            return torch.mm(a[0], b[0]).unsqueeze(0)
        torch.mm(a[0], b[0], out=out[0])
        return out
    return torch.bmm(a, b) if out is None else torch.bmm(a, b, out=out)


def baddbmm(bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """bias [G, N] + [G, M, K] @ [G, K, N]."""
    if a.shape[0] == 1:
        return torch.addmm(bias[0], a[0], b[0]).unsqueeze(0)
    return torch.baddbmm(bias.unsqueeze(1), a, b)


def shared_input_mm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x [n, d] shared by every configuration @ weight [G, d, K] -> [G, n, K] in one matmul."""
    groups, dim, k = weight.shape
    joined = x @ weight.permute(1, 0, 2).reshape(dim, groups * k)
    return joined.view(-1, groups, k).permute(1, 0, 2)


def plain_layer_norm(y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """LayerNorm without affine over the last axis: (normalised, mean, rstd). The affine part is
    per configuration, applied by the caller. Passing weight 1 and bias 0 takes ATen's faster
    kernel (20 us instead of 41 us for 48 x 768 on one core)."""
    ones, zeros = _unit_affine(y.shape[-1], y.device, y.dtype)
    return torch.native_layer_norm(y, (y.shape[-1],), ones, zeros, LN_EPS)


@functools.lru_cache(maxsize=8)
def _unit_affine(dim: int, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.ones(dim, device=device, dtype=dtype), torch.zeros(dim, device=device, dtype=dtype)


def gelu(h: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(h)  # exact erf GELU, as nn.GELU() and F.gelu default


# ----------------------------------------------------------------------------- module forward (no grad)


def luca_forward(p: dict[str, torch.Tensor], x: torch.Tensor, flow: str) -> torch.Tensor:
    """Every configuration's LuCA output. x is [G, n, d] (own inputs) or [n, d] (shared); -> [G, n, d]."""
    shared = x.dim() == 2

    def first(weight: torch.Tensor) -> torch.Tensor:
        return shared_input_mm(x, weight) if shared else bmm(x, weight)

    def calibrator(v: torch.Tensor, first_layer: torch.Tensor | None = None) -> torch.Tensor:
        c1 = first_layer if first_layer is not None else bmm(v, p["cal_down.weight"])
        return torch.sigmoid(bmm(torch.relu(c1), p["cal_up.weight"]))

    def layer_norm(y: torch.Tensor) -> torch.Tensor:
        zhat = plain_layer_norm(y)[0]
        return torch.addcmul(p["norm.bias"].unsqueeze(1), zhat, p["norm.weight"].unsqueeze(1))

    xg = x.unsqueeze(0) if shared else x  # broadcasts against [G, n, d]
    if flow == "calibrator":
        return xg * calibrator(xg, first(p["cal_down.weight"]))
    h = first(p["down.weight"]) + p["down.bias"].unsqueeze(1)
    u = baddbmm(p["up.bias"], gelu(h), p["up.weight"])
    if flow == "adapter":
        return layer_norm(u)
    if flow == "tosca_r":
        return xg * calibrator(xg, first(p["cal_down.weight"])) + layer_norm(u)
    z = layer_norm(u + xg)
    return z * calibrator(z)


def normalize_rows(v: torch.Tensor) -> torch.Tensor:
    """F.normalize(v, dim=-1)."""
    return v / torch.linalg.vector_norm(v, dim=-1, keepdim=True).clamp_min(NORM_EPS)


# ----------------------------------------------------------------------------- training step


@dataclass
class StepResult:
    """What a step reports besides the gradients: per-configuration CE loss and the logits."""

    loss: torch.Tensor  # [G]
    logits: torch.Tensor  # [G, b, C]


def _normalize(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    norm = torch.linalg.vector_norm(v, dim=-1, keepdim=True)
    denom = norm.clamp_min(NORM_EPS)
    return v / denom, norm, denom


def _normalize_backward(
    grad: torch.Tensor, unit: torch.Tensor, norm: torch.Tensor, denom: torch.Tensor
) -> torch.Tensor:
    """Gradient through v / max(|v|, eps): (g - v̂ <v̂, g> [|v| >= eps]) / max(|v|, eps).

    A zero row (the reference's new classifier rows) gets g / eps: the huge first step of the quirk."""
    along = (unit * grad).sum(-1, keepdim=True)
    along = along.masked_fill_(norm < NORM_EPS, 0.0)
    return torch.addcmul(grad, unit, along, value=-1.0).div_(denom)


class LucaStep:
    """One SGD step's forward and backward for a flow, writing gradients into the given views.

    With G = 1 every tensor drops its configuration axis (2-D matmuls, no per-op select), which
    measurably shortens a CPU step; with G > 1 tensors keep it and biases are `[G, 1, n]` views,
    so the same lines of code serve both.
    """

    def __init__(self, layout: ParamLayout, groups: int):
        self.layout, self.flow, self.groups = layout, layout.flow, groups
        self.batched = groups > 1
        self.mm = torch.bmm if self.batched else torch.mm
        self.addmm = torch.baddbmm if self.batched else torch.addmm

    def views(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per-parameter views of a `[G, size]` tensor in the step's shapes (writes go through)."""
        views = self.layout.views(flat)
        if not self.batched:
            return {name: v[0] for name, v in views.items()}
        return {name: v.unsqueeze(1) if v.dim() == 2 else v for name, v in views.items()}

    def head(
        self, weight: torch.Tensor, sigma: torch.Tensor, grad: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Classifier rows [G, C, d] and sigma [G] (or their gradients) in the step's shapes."""
        if not self.batched:
            return weight[0], sigma[0]
        return weight, sigma if grad else sigma.view(-1, 1, 1)

    def inputs(
        self, features: torch.Tensor, targets: torch.Tensor, index: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch: index [G, b] rows of features [n, d] and targets [n] -> x, y in the step's shapes."""
        flat = index.reshape(-1)
        shape = index.shape if self.batched else index.shape[1:]
        return features.index_select(0, flat).view(*shape, -1), targets.index_select(0, flat).view(shape)

    def __call__(
        self,
        p: dict[str, torch.Tensor],
        grad: dict[str, torch.Tensor],
        weight: torch.Tensor,
        sigma: torch.Tensor,
        grad_weight: torch.Tensor,
        grad_sigma: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
    ) -> StepResult:
        """p/grad: `views()` of the parameters and gradients; weight/sigma and grad_weight/grad_sigma:
        `head()` of the classifier and of its gradients; x [G, b, d] features, y [G, b] class ids
        (without the G axis when G = 1). Returns the CE loss per configuration and the logits."""
        flow, mm, addmm = self.flow, self.mm, self.addmm
        b = x.shape[-2]
        keep = self.batched  # reductions over the batch axis keep it when biases are [G, 1, n]
        # ---- forward, keeping what the backward needs
        if flow != "calibrator":
            h = addmm(p["down.bias"], x, p["down.weight"])
            a = gelu(h)
            u = addmm(p["up.bias"], a, p["up.weight"])
            if flow == "tosca":
                u.add_(x)  # y = x + A(x)
            zhat, mean, rstd = plain_layer_norm(u)
            z = torch.addcmul(p["norm.bias"], zhat, p["norm.weight"])
        if flow != "adapter":
            v = z if flow == "tosca" else x  # the calibrator's input
            q = torch.clamp_min(mm(v, p["cal_down.weight"]), 0.0)
            gate = torch.sigmoid(mm(q, p["cal_up.weight"]))
        if flow == "tosca":
            out = z * gate
        elif flow == "tosca_r":
            out = torch.addcmul(z, x, gate)
        elif flow == "adapter":
            out = z
        else:
            out = x * gate
        unit, norm, denom = _normalize(out)
        w_unit, w_norm, w_denom = _normalize(weight)
        cos = mm(unit, w_unit.mT)
        logits = cos * sigma
        logp = torch._log_softmax(logits, -1, False)
        picked = logp.gather(-1, y.unsqueeze(-1))
        loss = picked.mean((-2, -1)).neg_()
        # ---- backward: cross-entropy (mean over the batch), as log_softmax + nll_loss's backward
        d_logits = logp.exp_().mul_(1.0 / b)
        d_logits.scatter_add_(-1, y.unsqueeze(-1), picked.fill_(-1.0 / b))
        torch.sum(d_logits * cos, dim=(-2, -1), out=grad_sigma)
        d_cos = d_logits.mul_(sigma)
        grad_weight.copy_(_normalize_backward(mm(d_cos.mT, unit), w_unit, w_norm, w_denom))
        d_out = _normalize_backward(mm(d_cos, w_unit), unit, norm, denom)
        # ---- the flow's own parts
        if flow != "adapter":
            d_c2 = aten.sigmoid_backward(d_out * (z if flow == "tosca" else x), gate)
            mm(q.mT, d_c2, out=grad["cal_up.weight"])
            d_c1 = aten.threshold_backward(mm(d_c2, p["cal_up.weight"].mT), q, 0.0)
            mm(v.mT, d_c1, out=grad["cal_down.weight"])
        if flow == "calibrator":
            return StepResult(loss, logits)
        if flow == "tosca":
            d_z = d_out.mul_(gate)  # d_out is not needed after this
            d_z.add_(mm(d_c1, p["cal_down.weight"].mT))
        else:
            d_z = d_out  # tosca_r: out = x * gate + LN(A(x)); adapter: out = LN(A(x))
        torch.sum(d_z * zhat, dim=-2, keepdim=keep, out=grad["norm.weight"])
        torch.sum(d_z, dim=-2, keepdim=keep, out=grad["norm.bias"])
        d_u = aten.native_layer_norm_backward(
            d_z.mul_(p["norm.weight"]), u, [u.shape[-1]], mean, rstd, None, None, [True, False, False]
        )[0]
        torch.sum(d_u, dim=-2, keepdim=keep, out=grad["up.bias"])
        mm(a.mT, d_u, out=grad["up.weight"])
        d_h = aten.gelu_backward(mm(d_u, p["up.weight"].mT), h)
        torch.sum(d_h, dim=-2, keepdim=keep, out=grad["down.bias"])
        mm(x.mT, d_h, out=grad["down.weight"])
        return StepResult(loss, logits)
