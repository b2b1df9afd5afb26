"""The paper's claims, each checked as stated on a suite's cells: one small function per claim,
each naming its threshold and its test, each "holds", "does not hold", "not distinguishable at
this sample size" or "not measured" (no store of the suite measured it), with the figures it read:
the difference, its interval and what it rests on (images, seeds).

- L1 lowers the similarity between task modules: the verdict reads the mean pairwise cosine of
  the modules' weight matrices (LayerNorm and biases left out), tested over the seeds (a paired t
  interval of the difference, seed by seed: no images behind a similarity); the similarity over
  all their parameters and over their outputs on the same test features are shown beside it.
- adapter-then-calibrator (`tosca`) beats the reverse order (`tosca_r`): A_last under the suite's
  primary router, by a paired bootstrap of the difference on the same test images and seeds.
- a LuCA module has about 8x fewer parameters than a layer-wise adapter of the same bottleneck on
  a 12-block backbone: a ratio between 7x and 9x (arithmetic: nothing to test).
- the paper's `batch` routing is within a point of the best honest router, either way (it is a
  reference: a test batch votes; the claim asks whether its figure could pass for an honest one):
  the interval of their difference in A_last must lie within one point (an equivalence test); the
  best honest router is the one highest on validation where the suite holds one out (on test
  otherwise, and the claim says so).

Over several stores a claim holds when it holds on every store measured, does not hold when it
fails on one, and is not distinguishable otherwise (`uncertainty.combined`). References (routers
told the task or letting a batch vote, methods that see every task at once) are never the "best
honest" figure a claim compares with.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tosca_heads.engine.layout import parameter_count
from tosca_heads.method import uncertainty
from tosca_heads.method.uncertainty import Outcomes

LAYERS = 12  # the ViT-B/16 depth a layer-wise adapter is counted over
BATCH_WITHIN = 0.01  # "within 1 point", either way
PARAMETER_RATIO = (7.0, 9.0)  # "about 8x"
SIMILARITIES = {
    "similarity_weights": "weight matrices",
    "similarity_parameters": "all parameters",
    "similarity_outputs": "outputs on test features",
}
VERDICT_SIMILARITY = "similarity_weights"  # the measure the L1 claim's verdict reads
NOT_MEASURED = "not measured"


@dataclass
class Claim:
    statement: str
    verdict: str  # holds, does not hold, not distinguishable at this sample size, not measured
    figures: list[str] = field(default_factory=list)
    threshold: str = ""  # what "holds" means, in words, and by which test


@dataclass
class Evidence:
    """What the verdicts read: per (store, entry) and split, each finished cell's per-image answers
    (`answers`; None where a cell kept none), and per (store, entry) each
    cell's module similarities by (class order, seed) (`similarities`). An entry is a table row
    ("tosca:entropy", "simplecil") or an ablation point ("tosca_r@l1=0.0005", under the primary
    router)."""

    answers: dict[tuple[str, str], dict[str, list[Outcomes] | None]] = field(default_factory=dict)
    similarities: dict[tuple[str, str], dict[tuple[int, int], Any]] = field(default_factory=dict)

    def runs(self, store: str, entry: str, split: str = "test") -> list[Outcomes] | None:
        return self.answers.get((store, entry), {}).get(split)

    def mean(self, store: str, entry: str, split: str = "test") -> float:
        """An entry's mean A_last over its cells, from their answers (NaN without)."""
        runs = self.runs(store, entry, split)
        return (
            math.nan if not runs else uncertainty.spread([r.right() / r.images for r in runs if r.images])[0]
        )


def _figure(runs: Sequence[Outcomes]) -> str:
    """'43.89 ± 6.25' over seeds (or one run's value), in %."""
    values = [r.right() / r.images for r in runs if r.images]
    mean, std, _ = uncertainty.spread(values)
    return f"{100 * mean:.2f}" + ("" if math.isnan(std) else f" ± {100 * std:.2f}")


def l1_claim(evidence: Evidence, stores: Sequence[str], with_l1: str, without: str, main_l1: float) -> Claim:
    """L1 lowers the similarity between task modules: on every store measured, the similarity of
    the weight matrices with L1 is lower than without, beyond the spread over seeds (a paired t
    interval of the difference, seed by seed). At L1 = 0 there is nothing to compare."""
    verdicts, figures = [], []
    for store in stores if main_l1 != 0.0 else []:
        on, off = (evidence.similarities.get((store, entry), {}) for entry in (with_l1, without))
        seeds = sorted(set(on) & set(off))
        if not seeds:
            continue
        parts = []
        for metric, label in SIMILARITIES.items():
            measure = metric.removeprefix("similarity_")
            a = [getattr(on[s], measure) for s in seeds]
            b = [getattr(off[s], measure) for s in seeds]
            if any(v is None for v in a + b):
                parts.append(f"{label} not measured")
                continue
            diff = uncertainty.seed_difference(b, a)  # without minus with: above 0 when L1 lowers it
            shown = f"{uncertainty.spread(a)[0]:.3f} with L1, {uncertainty.spread(b)[0]:.3f} without"
            if metric == VERDICT_SIMILARITY:
                verdict = uncertainty.beats(diff)
                verdicts.append(verdict)
                shown += f" (the verdict): lower by {diff.said(1.0, '', 4)}: {verdict}"
            parts.append(f"{label} {shown}")
        figures.append(
            f"{store} (L1 = {main_l1:g}): mean pairwise cosine of the task modules' " + "; ".join(parts)
        )
    return Claim(
        "L1 lowers the similarity between task modules",
        uncertainty.combined(verdicts),
        figures,
        "the mean pairwise cosine of the modules' weight matrices (no LayerNorm, no biases) is lower with "
        "L1 than without, on every store measured, beyond the spread over seeds (95% paired t interval "
        "of the difference over seeds; one seed cannot tell)",
    )


def order_claim(evidence: Evidence, stores: Sequence[str], tosca: str, reverse: str, primary: str) -> Claim:
    """adapter-then-calibrator beats the reverse order: higher A_last on every store measured, by a
    paired bootstrap of the difference on the same test images and seeds."""
    verdicts, figures = [], []
    for store in stores:
        a, b = evidence.runs(store, tosca), evidence.runs(store, reverse)
        if a is None or b is None:
            if (store, tosca) in evidence.answers and (store, reverse) in evidence.answers:
                figures.append(f"{store}: not tested: its cells kept no per-image answers")
            continue
        diff = uncertainty.paired_difference(a, b, "A_last")
        verdict = uncertainty.beats(diff)
        verdicts.append(verdict)
        figures.append(
            f"{store}: A_last ({primary}) {_figure(a)} for tosca, {_figure(b)} for tosca_r; difference "
            f"{diff.said()}: {verdict}"
        )
    return Claim(
        "adapter-then-calibrator (tosca) beats the reverse order (tosca_r)",
        uncertainty.combined(verdicts),
        figures,
        f"tosca's A_last under `{primary}` is above tosca_r's on every store measured: the 95% paired "
        "bootstrap interval of the difference (the same test images and seeds) lies above 0",
    )


def luca_parameters(d: int, r: int, s: int) -> int:
    """method.md §3: 2dr + r + d (adapter) + 2d (LayerNorm) + 2ds (calibrator), as the layout spec counts."""
    return parameter_count(d, r, s, "tosca")


def layerwise_adapter_parameters(d: int, r: int, layers: int = LAYERS) -> int:
    """One bottleneck adapter (2dr + r + d) in each of `layers` blocks."""
    return layers * (2 * d * r + r + d)


def parameters_claim(shapes: Mapping[str, tuple[int, int, int]]) -> Claim:
    """About 8x fewer parameters than layer-wise adapters: the ratio, per store's (d, r, s), within
    PARAMETER_RATIO."""
    low, high = PARAMETER_RATIO
    checks, figures = [], []
    for store, (d, r, s) in shapes.items():
        ratio = layerwise_adapter_parameters(d, r) / luca_parameters(d, r, s)
        checks.append(low <= ratio <= high)
        figures.append(
            f"{store} (d = {d}, r = {r}, s = {s}): {luca_parameters(d, r, s):,} per LuCA module against "
            f"{layerwise_adapter_parameters(d, r):,} for {LAYERS} layer-wise adapters of bottleneck {r}: {ratio:.2f}x"
        )
    if figures:
        figures.append(
            f"(the paper's 8x compares with EASE's adapters of bottleneck 64 at d = 768: "
            f"{layerwise_adapter_parameters(768, 64):,} / {luca_parameters(768, 48, 48):,} = "
            f"{layerwise_adapter_parameters(768, 64) / luca_parameters(768, 48, 48):.2f}x)"
        )
    return Claim(
        f"a LuCA module has about 8x fewer parameters than a layer-wise adapter of the same bottleneck on a {LAYERS}-block backbone",
        uncertainty.combined([uncertainty.HOLDS if c else uncertainty.FAILS for c in checks]),
        figures,
        f"the ratio is between {low:g}x and {high:g}x on every store (exact arithmetic: nothing to test)",
    )


def batch_claim(
    evidence: Evidence, stores: Sequence[str], honest_routers: Sequence[str], chosen_on: str = "test"
) -> Claim:
    """The paper's `batch` routing is an honest figure: within BATCH_WITHIN of the best honest
    router's A_last, above or below, on every store measured: the interval of the difference (a
    paired bootstrap on the same test images and seeds) lies inside [-1, 1] point. The best honest
    router is the highest on `chosen_on` (validation where the suite holds one out)."""
    verdicts, figures = [], []
    for store in stores:
        batch = evidence.runs(store, "tosca:batch")
        scored = [
            (evidence.mean(store, f"tosca:{r}", split=chosen_on), r)
            for r in honest_routers
            if evidence.runs(store, f"tosca:{r}") is not None
        ]
        scored = [(v, r) for v, r in scored if not math.isnan(v)]
        if batch is None or not scored:
            continue
        _, name = max(scored)
        best = evidence.runs(store, f"tosca:{name}")
        assert best is not None
        diff = uncertainty.paired_difference(batch, best, "A_last")
        verdict = uncertainty.within(diff, BATCH_WITHIN)
        verdicts.append(verdict)
        where = "on validation" if chosen_on == "validation" else "on test (no validation split)"
        figures.append(
            f"{store}: batch {_figure(batch)}, best honest router ({name}, the highest {where}) {_figure(best)}: "
            f"{diff.said()}: {verdict}"
        )
    return Claim(
        "the paper's `batch` routing is an honest figure (within 1 point of the best honest router)",
        uncertainty.combined(verdicts),
        figures,
        f"the 95% paired bootstrap interval of batch A_last - the best honest router's lies within "
        f"[-{100 * BATCH_WITHIN:g}, +{100 * BATCH_WITHIN:g}] point on every store measured",
    )
