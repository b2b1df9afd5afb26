"""The two quantiles the uncertainty module needs, the beta distribution's (Clopper-Pearson) and
Student's t (a paired t interval over seeds), written out so that a fit never loads scipy: every
run computes intervals, and scipy is 35 MiB a GPU image would otherwise carry (make gpu-bundle).

Both rest on the regularized incomplete beta function I_x(a, b), computed by its continued
fraction (Lentz's method; the symmetry I_x(a, b) = 1 - I_{1-x}(b, a) where that converges faster),
and inverted by Newton's method kept inside a shrinking bracket, so it always converges. They
agree with scipy.special's to about 1e-12 (tests/tosca_heads/method/test_uncertainty.py).
"""

from __future__ import annotations

import math

_TINY = 1e-300
_EPS = 1e-15


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def _continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of I_x(a, b), converging fast for x < (a + 1) / (a + b + 2)."""
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 100_000):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + numerator / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            break
    return h


def beta_cdf(x: float, a: float, b: float) -> float:
    """I_x(a, b): the beta(a, b) distribution's probability below x."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(a * math.log(x) + b * math.log1p(-x) - _log_beta(a, b))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _continued_fraction(a, b, x) / a
    return 1.0 - front * _continued_fraction(b, a, 1.0 - x) / b


def beta_quantile(q: float, a: float, b: float) -> float:
    """The x with I_x(a, b) = q (scipy.special.betaincinv(a, b, q))."""
    if q <= 0.0:
        return 0.0
    if q >= 1.0:
        return 1.0
    low, high = 0.0, 1.0
    x = a / (a + b)  # the mean: a start inside the bracket
    for _ in range(200):
        f = beta_cdf(x, a, b) - q
        if f == 0.0:
            return x
        if f < 0.0:
            low = x
        else:
            high = x
        density = math.exp((a - 1.0) * math.log(x) + (b - 1.0) * math.log1p(-x) - _log_beta(a, b))
        step = x - f / density if density > 0.0 else math.nan
        if abs(step - x) <= _EPS * x:  # Newton's step has come to rest
            return step
        # Newton where it stays inside the bracket, else the bracket's middle
        x = step if low < step < high else 0.5 * (low + high)
        if high - low <= _EPS * high:
            return x
    return x


def t_quantile(q: float, df: float) -> float:
    """Student's t distribution's quantile with `df` degrees of freedom (scipy.special.stdtrit):
    P(|T| > t) = I_{df / (df + t^2)}(df / 2, 1 / 2)."""
    if q == 0.5:
        return 0.0
    tail = 2.0 * min(q, 1.0 - q)  # the two-sided tail probability beyond |t|
    x = beta_quantile(tail, df / 2.0, 0.5)
    t = math.sqrt(df * (1.0 - x) / x) if x > 0.0 else math.inf
    return t if q > 0.5 else -t
