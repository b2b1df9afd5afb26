"""scikit-learn's OAS shrinkage coefficient (`sklearn.covariance.OAS`, assume_centered), written
once: the routers' covariance (`method.class_statistics`), SLDA's base task and RanDumb's class
covariances each work out its two moments their own way (from a scatter, or from the smaller Gram
of the rows) and take the coefficient from here."""

from __future__ import annotations


def oas_coefficient(alpha: float, mu: float, n: float, p: int) -> float:
    """With S the empirical covariance of n rows in p dimensions, alpha = mean(S**2) and
    mu = trace(S) / p: min((alpha + mu^2) / ((n + 1)(alpha - mu^2 / p)), 1), and 1 where the
    denominator is 0 (scikit-learn's formula)."""
    den = (n + 1) * (alpha - mu**2 / p)
    return 1.0 if den == 0 else min((alpha + mu**2) / den, 1.0)
