"""Each claim checked as stated, on hand-made tables where it holds, where it fails and where it
cannot be measured: a verdict never reads "holds" beside figures that say otherwise."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from tosca_heads.experiments.suite.claims import batch_claim, l1_claim, order_claim, parameters_claim

pytestmark = pytest.mark.cpu_reference


def _table(entries: dict[str, float]) -> pd.DataFrame:
    """A main table of one store "S": method -> A_last (NaN: no finished cell)."""
    rows = [
        {"method": m, "store": "S", "metric": "A_last", "mean": v, "n": 0 if math.isnan(v) else 3}
        for m, v in entries.items()
    ]
    return pd.DataFrame(rows)


def _ablation(entries: dict[tuple[str, float, str], float]) -> pd.DataFrame:
    rows = [
        {"flow": f, "l1": l1, "store": "S", "metric": metric, "mean": v, "n": 0 if math.isnan(v) else 3}
        for (f, l1, metric), v in entries.items()
    ]
    return pd.DataFrame(rows)


@pytest.mark.parametrize(
    ("batch", "best", "verdict"),
    [
        (0.605, 0.600, "holds"),  # half a point above
        (0.595, 0.600, "holds"),  # half a point below: "within" is two-sided
        (0.3275, 0.6050, "does not hold"),  # 27.75 points below (it printed "holds" before)
        (0.9643, 0.9201, "does not hold"),  # 4.42 points above
        (math.nan, 0.60, "not measured"),
    ],
)
def test_the_batch_claim_is_two_sided_and_states_its_threshold(
    batch: float, best: float, verdict: str
) -> None:
    table = _table(
        {"tosca:batch": batch, "tosca:entropy": best - 0.1, "tosca:ncm": best, "tosca:oracle": 0.99}
    )
    claim = batch_claim(table, ["S"], ["entropy", "ncm"])
    assert claim.verdict == verdict
    assert "<= 1 point" in claim.threshold
    if verdict != "not measured":
        (figure,) = claim.figures
        assert f"best honest router (ncm) {100 * best:.2f}" in figure  # never the oracle
        assert f"{100 * (batch - best):+.2f} points" in figure
        assert figure.endswith("yes)" if verdict == "holds" else "no)")


def test_the_batch_claim_without_an_honest_router_is_not_measured() -> None:
    claim = batch_claim(_table({"tosca:batch": 0.9, "tosca:oracle": 0.99}), ["S"], [])
    assert claim.verdict == "not measured" and claim.figures == []


def _l1(
    weights: tuple[float, float], params: tuple[float, float], outputs: tuple[float, float]
) -> pd.DataFrame:
    entries = {}
    for metric, (on, off) in (
        ("similarity_weights", weights),
        ("similarity_parameters", params),
        ("similarity_outputs", outputs),
    ):
        entries[("tosca", 5e-4, metric)] = on
        entries[("tosca", 0.0, metric)] = off
    return _ablation(entries)


def test_the_l1_claim_says_which_similarity_its_verdict_reads() -> None:
    holds = l1_claim(_l1((0.10, 0.30), (0.79, 0.66), (0.95, 0.96)), ["S"], 5e-4)
    assert holds.verdict == "holds"  # the weights' similarity falls, though all parameters' rises
    (figure,) = holds.figures
    assert "weight matrices (the verdict) 0.100 with L1, 0.300 without" in figure
    assert "all parameters 0.790 with L1, 0.660 without" in figure
    assert "outputs on test features 0.950 with L1, 0.960 without" in figure
    assert "no LayerNorm, no biases" in holds.threshold
    fails = l1_claim(_l1((0.40, 0.30), (0.5, 0.6), (0.9, 0.9)), ["S"], 5e-4)
    assert fails.verdict == "does not hold"
    missing = l1_claim(_l1((0.1, math.nan), (0.5, 0.6), (0.9, 0.9)), ["S"], 5e-4)
    assert missing.verdict == "not measured"
    at_zero = l1_claim(_l1((0.1, 0.3), (0.5, 0.6), (0.9, 0.9)), ["S"], 0.0)  # nothing to compare
    assert at_zero.verdict == "not measured"
    partial = l1_claim(_l1((0.1, 0.3), (0.5, 0.6), (math.nan, math.nan)), ["S"], 5e-4)
    assert partial.verdict == "holds" and "outputs on test features not measured" in partial.figures[0]


@pytest.mark.parametrize(
    ("tosca", "reverse", "verdict"),
    [(0.8, 0.7, "holds"), (0.7, 0.8, "does not hold"), (0.7, math.nan, "not measured")],
)
def test_the_order_claim(tosca: float, reverse: float, verdict: str) -> None:
    ablation = _ablation({("tosca", 5e-4, "A_last"): tosca, ("tosca_r", 5e-4, "A_last"): reverse})
    claim = order_claim(ablation, ["S"], 5e-4, "entropy")
    assert claim.verdict == verdict and "above tosca_r's" in claim.threshold


def test_the_parameters_claim() -> None:
    assert parameters_claim({"S": (768, 48, 48)}).verdict == "does not hold"  # 5.97x: same bottleneck
    assert parameters_claim({"S": (768, 64, 32)}).verdict == "holds"  # 7.94x
    assert parameters_claim({}).verdict == "not measured"
    claim = parameters_claim({"S": (1280, 80, 80)})
    assert "5.98x" in claim.figures[0] and "between 7x and 9x" in claim.threshold
