"""Features at any scale a float holds: the methods whose answer cannot depend on the features'
scale (a cosine, a variance-scaled kernel, standardised inputs, a covariance solved in float32)
give the same answer at x1e30 and x1e-30 as at x1 (issue 57, point 2).

The fault was one class: a scale-free answer computed through a sum of squares or a float32 cast
that overflows (1e30 squared is past float32's 3.4e38) or underflows (1e-30 squared is below its
1e-45), or through an absolute floor (a norm's eps 1e-12, a standard deviation's 1e-6). The cure is
one too: divide by a power of two before the sum (exact in binary floating point, so where nothing
overflowed or underflowed before, the bits are the ones computed before) or compute the scale in
float64, which holds the square of every float32 and float16 value a store can hold.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from tosca_foundation.errors import UserError


def binary_peak(x: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """2**e with the largest |x| (over `dim`, kept as a size-1 dimension; over every entry without
    one) in [2**(e-1), 2**e), as float64; 1 where every entry is 0. Dividing by it is exact."""
    peak = x.detach().abs().amax(dim=dim, keepdim=dim is not None) if x.numel() else x.new_zeros(())
    _, exponent = torch.frexp(peak.double())
    return torch.exp2(exponent.double())


def unit_rows(x: torch.Tensor) -> torch.Tensor:
    """Each row over its L2 norm, in x's dtype, at any scale: each row is first divided by the
    power of two nearest above its largest entry (exact; in float64, so that even a float32
    subnormal row is scaled without overflow), so its squares neither overflow nor underflow and
    the norm's floor (1e-12) is never reached by a non-zero row; a zero row stays zero. Where
    `F.normalize(x)` neither overflowed nor underflowed, the same bits.

    Where every row's 1 / 2**e is a normal number of x's dtype (features within some 38 decades of
    1 in float32), x is multiplied by it in its own dtype: the exact product rounded once, as the
    float64 quotient rounded back is, so the same bits without a float64 copy of the features."""
    peak = binary_peak(x, dim=-1)
    inverse = 1.0 / peak
    if x.dtype != torch.float64 and x.is_floating_point():
        limits = torch.finfo(x.dtype)
        if bool(((inverse >= limits.tiny) & (inverse <= limits.max)).all()):
            return torch.nn.functional.normalize(x * inverse.to(x.dtype), dim=-1)
    scaled = (x.double() * inverse).to(x.dtype)
    return torch.nn.functional.normalize(scaled, dim=-1)


# TOSCA's modules and cosine classifier work on the features at their own scale, in float32 (the
# compiled step, the CUDA path): a row's squared norm must neither overflow (3.4e38) nor fall below
# the normaliser's floor (a norm of 1e-12), or every answer ties. Bounds on a row's largest entry.
COSINE_FLOOR = 1e-12


def cosine_reach(dim: int) -> tuple[float, float]:
    """The range of a non-zero row's largest |entry| where a float32 L2 norm of `dim` entries
    neither overflows nor reaches the normaliser's floor: [1e-12, 1e18 / sqrt(dim)]."""
    return COSINE_FLOOR, 1e18 / math.sqrt(max(dim, 1))


def outside_cosine_reach(x: torch.Tensor) -> float | None:
    """The largest |entry| of the first non-zero row of `x` [n, d] outside `cosine_reach` (None when
    every row is within it, or zero): one pass of |x|.amax per row."""
    if x.numel() == 0:
        return None
    peaks = x.detach().abs().amax(-1)
    low, high = cosine_reach(x.shape[-1])
    outside = (peaks > 0) & ((peaks < low) | (peaks > high))
    if not bool(outside.any()):
        return None
    return float(peaks[outside.nonzero()[0, 0]])


def power_of_four_near(value: float) -> float:
    """A power of four within a factor of four of `value` (> 0; 1 for 0 or a non-finite value):
    a matrix divided by it keeps its Cholesky factor's bits up to the factor's exact power of two
    (sqrt(4**k a) = 2**k sqrt(a) exactly), so a solve scaled by it gives the unscaled solve's bits."""
    if not value > 0 or not math.isfinite(value):
        return 1.0
    return 4.0 ** round(math.log(value, 4))


def scaled_variance(x: np.ndarray) -> tuple[np.floating, float]:
    """(var(x / p), p): the variance of every entry of x divided by p, the power of two above its
    largest entry, computed in x's own precision as `np.var` computes it (so var(x) = that * p**2,
    with the bits `np.var(x)` had wherever it neither overflowed nor underflowed), and p."""
    peak = float(binary_peak(torch.from_numpy(np.ascontiguousarray(x)))) if x.size else 1.0
    return (x.astype(np.float64) / peak).astype(x.dtype).var(), peak


# A regularised solve (H'H + gamma I)^-1 kept as a D x D float64 matrix (ACIL's, GACL's and
# DS-AL's R) holds two scales at once, 1 / gamma on the directions the rows never took and
# 1 / |H|^2 on theirs: past about 1 / eps (4.5e15) of one over the other, the smaller is rounding.
# Measured (tests/tosca_heads/method/test_scale.py: ACIL's recursion against an
# SVD ridge in float64 on the same rows): the predictions agree up to |H|_F^2 / gamma = 1.25e16 and
# agree on half the rows at 1.25e17. The reach is set a decade below the first agreement measured.
PRECISION_REACH = 1e15


class ScaleRefusal(UserError):
    """A value refused beside the features' scale: `param` the estimator's keyword; `said(flag)`
    the line with the command line's spelling beside it (`running.baseline_runs.solvable`)."""

    param = ""

    def said(self, flag: str = "") -> str:  # pragma: no cover - each refusal says its own
        raise NotImplementedError


class BeyondPrecision(ScaleRefusal):
    """A regularisation too small beside the features' scale for float64 to solve: `param` is the
    estimator's keyword, `least` the smallest value that keeps the solve within `PRECISION_REACH`."""

    def __init__(self, method: str, param: str, value: float, ratio: float, least: float) -> None:
        self.method, self.param, self.value, self.ratio, self.least = method, param, value, ratio, least
        super().__init__(self.said())

    def said(self, flag: str = "") -> str:
        """The line; `flag`: the command line's spelling of the parameter, said beside it."""
        spelled = f"{self.param} ({flag})" if flag else self.param
        return (
            f"{self.method}'s {spelled} = {self.value!r} is too small beside the features' scale for "
            f"float64: the rows' squared norm is {_times(self.ratio)} it, past the {PRECISION_REACH:.0e} "
            f"its D x D inverse can hold (1 / {self.param} and 1 / |H|^2 at once); raise {self.param} to "
            f"at least {self.least:.2g}, or rescale the features (`tosca cache info` shows their scale)"
        )


def _times(ratio: float) -> str:
    """'3.2e+17 times', or for a ratio float64 cannot hold (a gamma of 1e-320) 'more than 1.8e+308 times'."""
    return f"{ratio:.2g} times" if math.isfinite(ratio) else f"more than {np.finfo(np.float64).max:.2g} times"


def within_reach(method: str, param: str, value: float, mass: float, gamma: float) -> None:
    """Refuse (`BeyondPrecision`) a solve whose rows' squared norm `mass` is past `PRECISION_REACH`
    times its regularisation `gamma` (`value` is the keyword's value, which `gamma` is in proportion
    to: GACL's gamma / online_iter)."""
    if not mass <= PRECISION_REACH * gamma:
        ratio = mass / gamma if gamma > 0 else math.inf
        raise BeyondPrecision(method, param, value, ratio, mass / PRECISION_REACH * (value / gamma))


# An RBF kernel exp(-sigma |x - y|^2) through random Fourier features cos(xW + b), W ~ N(0, 2 sigma):
# sigma is absolute (the authors' KLDA), so the features' scale sets what it means. With `reach` =
# sigma x the rows' mean squared distance: above KERNEL_HIGH the kernel of two typical rows,
# exp(-reach), is 0 in float64 (below its least subnormal, 4.9e-324), so nothing but a row's own
# near-duplicates carries weight and the random features' phases are noise; below KERNEL_LOW the
# phases of two rows differ by sqrt(2 reach), less than about float32's epsilon beside cos(b), so every
# row's features are one vector. Measured on the demo's store (EuroSAT, EfficientNet-Lite0, first 5
# classes, D = 1,000): accuracy 0.165 with 157 of 1,500 ties at reach 1e-16, 0.909 at 1e-13, 0.899
# at 1, 0.254 at 30, 0.212 at 100 (chance 0.2): between the bounds a poor sigma is a choice (tuned on
# validation where the run has one), outside them no sigma-like answer is left. Defaults: 0.026 there.
KERNEL_LOW, KERNEL_HIGH = 1e-14, 745.0


class KernelBeyondScale(ScaleRefusal):
    """An RBF kernel parameter whose kernel cannot tell the features' rows apart at their scale:
    `reach` = value x `spread` (their mean squared distance) outside [KERNEL_LOW, KERNEL_HIGH]."""

    def __init__(self, method: str, param: str, value: float, spread: float) -> None:
        self.method, self.param, self.value, self.spread = method, param, value, spread
        super().__init__(self.said())

    def said(self, flag: str = "") -> str:
        spelled = f"{self.param} ({flag})" if flag else self.param
        return (
            f"{self.method}'s {spelled} = {self.value!r} is far from the features' scale: times their mean "
            f"squared distance ({self.spread:.3g}) it is {self.value * self.spread:.3g}, outside "
            f"[{KERNEL_LOW:g}, {KERNEL_HIGH:g}] where its RBF kernel tells rows apart; give it between "
            f"{KERNEL_LOW / self.spread:.3g} and {KERNEL_HIGH / self.spread:.3g} (about {1 / self.spread:.3g} "
            "puts typical rows at kernel exp(-1)), or rescale the features (`tosca cache info`)"
        )


def mean_squared_distance(x: np.ndarray | torch.Tensor) -> float:
    """The mean |x_i - x_j|^2 over pairs of rows (2 x the summed per-feature variance), in float64,
    which holds the square of any float32 a store can hold (x1e30 and x1e-30 alike)."""
    values = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    return 2.0 * float(values.astype(np.float64).var(0).sum()) if len(values) > 1 else 0.0


def kernel_within_reach(method: str, param: str, value: float, spread: float) -> None:
    """Refuse (`KernelBeyondScale`) an RBF parameter outside the reach where its kernel tells rows
    of mean squared distance `spread` apart; rows all one vector (spread 0) are left to the tie
    rule (nothing tells them apart at any sigma)."""
    if spread > 0 and math.isfinite(spread) and not KERNEL_LOW <= value * spread <= KERNEL_HIGH:
        raise KernelBeyondScale(method, param, value, spread)
