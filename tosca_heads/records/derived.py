"""Every figure a file keeps that its kept answers give, worked out again when the file is read and
compared with what it says: a stored figure is believed only where it follows from the answers.

A metrics block (a sweep point's row of results.csv; a run's or a baseline's metrics.json view)
keeps figures that are all functions of its per-image answers
(`records.outcomes`): A_t and the accuracy matrix, every figure of `metrics.figures()` computed
from them (A_bar, A_last, forgetting, a plug-in's), their intervals and standard errors
(`uncertainty.intervals_of`), and the images they rest on. `expected_block` makes each again
exactly as the writers make it (`metrics.summarise`, then `records.with_intervals`), and
`check_figures` compares field by field: an edited figure, or answers of another run, is one line
naming the file and the figure, never a number. The routing accuracy is worked out from the kept
routes (`routing_of`). A run and a baseline are cells (`records.cell`) and store no figure: only a
sweep's rows are checked here; `expected_block` is also how a cell's figures are computed.

The intervals of every block of one split on the same images come from one bootstrap
(`intervals_of` over them all): its draws depend only on the seed and the classes' sizes, so a
block's intervals are the same whichever others are checked with it (`cell.figures_of_many`
computes many cells' figures on one bootstrap so).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tosca_foundation.errors import UserError
from tosca_heads.method.metrics import BUILT_IN, figures, summarise
from tosca_heads.method.uncertainty import Interval, Outcomes, accuracy_interval, intervals_of
from tosca_heads.records import with_intervals

# files keep intervals and standard errors to 6 decimals, A_t in results.csv too: a figure within
# this of the one its answers give is the one tosca wrote
TOLERANCE = 1.5e-6

Block = dict[str, Any]


def curves_of(outcome: Outcomes) -> tuple[list[float], list[list[float]]]:
    """A_t after each task (the accuracy over the images of every class seen) and the accuracy
    matrix (row t: the accuracy on each task's images after task t), from per-image answers."""
    right = outcome.correct.astype(np.int64)
    curve, matrix = [], []
    for t in range(outcome.tasks):
        seen = outcome.task <= t
        curve.append(float(right[t][seen].sum() / seen.sum()) if seen.any() else math.nan)
        row = []
        for j in range(t + 1):
            block = outcome.task == j
            row.append(float(right[t][block].sum() / block.sum()) if block.any() else math.nan)
        matrix.append(row)
    return curve, matrix


def routing_of(outcome: Outcomes) -> list[float] | None:
    """The routing accuracy after each task (the images of every class seen that the router sent
    to their own task's module), from the kept routes (None: a method without a router)."""
    if outcome.routed is None:
        return None
    routed = outcome.routed.astype(np.int64)
    return [
        float(routed[t][outcome.task <= t].sum() / (outcome.task <= t).sum()) for t in range(outcome.tasks)
    ]


def expected_block(outcome: Outcomes, found: Mapping[str, Interval] | None) -> Block:
    """The metrics block tosca writes for these answers (`found`: their intervals)."""
    curve, matrix = curves_of(outcome)
    routed = routing_of(outcome)
    block = summarise(curve, matrix, routed)
    interval = None
    if routed is not None and found:
        interval = accuracy_interval(routed[-1], next(iter(found.values())).images)
    return with_intervals(block, dict(found) if found else None, interval)


@dataclass(frozen=True)
class Recorded:
    """A metrics block as a file keeps it, with its answers: `where` the file (and the point) that
    holds the block, `name` its router or method, `split` test or validation, `hint` what rewrites
    it; `fields` the block's fields the file keeps (a sweep's row keeps no matrix)."""

    block: Block
    outcome: Outcomes
    where: str
    name: str
    split: str
    hint: str
    fields: frozenset[str] | None = None  # None: every field of the block


def recorded_blocks(
    found: Mapping[str, Mapping[str, Outcomes]],
    blocks: Mapping[str, Mapping[str, Block]],
    where: str,
    hint: str,
    fields: frozenset[str] | None = None,
) -> list[Recorded]:
    """Each block of a file (split -> router or method -> block) with its kept answers (`found`,
    as `records.outcomes` reads them); a block whose answers are not kept is one line (every
    block tosca writes has them: its figures would be believed unchecked)."""
    paired = []
    for split, named in blocks.items():
        for name, block in named.items():
            outcome = found.get(split, {}).get(name)
            if outcome is None:
                raise UserError(
                    f"{where}: the {split} figures of {name} have no kept answers to check them against "
                    f"(the files were edited or damaged, or are of two runs): {hint}"
                )
            paired.append(Recorded(block, outcome, where, name, split, hint, fields))
    return paired


def image_key(split: str, outcome: Outcomes) -> tuple[str, str]:
    """Blocks on the same images share one bootstrap (`intervals_of` requires the same images)."""
    digest = hashlib.sha256(outcome.rows.tobytes() + b"|" + outcome.classes.tobytes()).hexdigest()
    return split, digest


def check_figures(recorded: Iterable[Recorded]) -> None:
    """Each recorded block equals the one its answers give, figure by figure (`TOLERANCE`); the
    first that does not is one line naming its file, block and figure."""
    items = list(recorded)
    groups: dict[tuple[str, str], dict[int, list[Outcomes]]] = {}
    for i, item in enumerate(items):
        groups.setdefault(image_key(item.split, item.outcome), {})[i] = [item.outcome]
    found: dict[int, dict[str, Interval]] = {}
    for named in groups.values():
        found.update(intervals_of(named))  # type: ignore[arg-type]  # any hashable names a run
    for i, item in enumerate(items):
        if item.outcome.tasks != len(item.block.get("A_t") or []):
            raise UserError(
                f"{item.where}: its {item.split} figures of {item.name} cover {len(item.block.get('A_t') or [])} "
                f"tasks, its kept answers {item.outcome.tasks}; the files were edited or damaged, or are of "
                f"two runs: {item.hint}"
            )
        if (item.block.get("routing_accuracy_t") is None) != (item.outcome.routed is None):
            raise UserError(
                f"{item.where}: the routes of {item.name} ({item.split}) are not kept beside its routing "
                f"figures, or kept for a method without a router (written before routes were kept, or edited or "
                f"damaged): {item.hint}"
            )
        wanted = expected_block(item.outcome, found.get(i))
        names = _figure_names()
        keys = [  # in the block's order (A_t first); a plug-in's figure the file lacks left out
            k
            for k in wanted
            if (item.fields is None or k in item.fields)
            and (k in BUILT_IN or k not in names or item.block.get(k) is not None)
        ]
        for key in keys:
            figure = _first_difference(key, _kept(item.block, key), _kept(wanted, key, item.block))
            if figure is not None:
                raise UserError(
                    f"{item.where}: {figure} of {item.name} ({item.split}) is not what its kept answers give "
                    f"(the figure or the answers were edited or damaged, or are of another run): {item.hint}"
                )


def _figure_names() -> set[str]:
    return {metric.name for metric in figures()}


def _kept(block: Block, key: str, recorded: Block | None = None) -> Any:
    """A block's field as compared: a plug-in's figure (and interval, standard error) that the
    recorded block lacks is left out, as a file written before the plug-in was registered lacks it
    (`recorded`: that block, when `block` is the one its answers give)."""
    value = block.get(key)
    lacking = recorded if recorded is not None else block
    if isinstance(value, Mapping):
        return {
            metric: figure
            for metric, figure in value.items()
            if metric in BUILT_IN or _present(lacking.get(key), metric)
        }
    return value


def _present(held: Any, metric: str) -> bool:
    value = held.get(metric) if isinstance(held, Mapping) else None
    return value is not None and value != [None, None]


def _first_difference(key: str, recorded: Any, wanted: Any) -> str | None:
    """The figure of a block's field `key` where `recorded` is not `wanted`, in words (None: none)."""
    if isinstance(wanted, Mapping):  # intervals, standard errors: per metric
        what = {"intervals": "the interval of", "standard_errors": "the standard error of"}.get(key, key)
        for metric, value in wanted.items():
            held = recorded.get(metric) if isinstance(recorded, Mapping) else None
            if not _same(held, value):
                return f"{what} {metric}"
        return None
    if key == "A_t" and isinstance(recorded, list) and len(recorded) == len(wanted):
        for t, (held, value) in enumerate(zip(recorded, wanted, strict=True)):
            if not _same(held, value):
                return f"A_t after task {t}"
        return None
    if not _same(recorded, wanted):
        return {
            "accuracy_matrix": "the accuracy matrix",
            "routing_accuracy_t": "the routing curve",
            "images": "the image count",
        }.get(key, key)
    return None


def _same(recorded: Any, wanted: Any) -> bool:
    """A figure, a list of them or a list of lists as a file keeps it, within `TOLERANCE`."""
    if isinstance(wanted, list):
        return (
            isinstance(recorded, list)
            and len(recorded) == len(wanted)
            and all(_same(a, b) for a, b in zip(recorded, wanted, strict=True))
        )
    return _same_number(recorded, wanted)


def _same_number(recorded: Any, wanted: Any) -> bool:
    """Two figures as a file keeps them: None or NaN alike, numbers within `TOLERANCE`."""
    missing = wanted is None or (isinstance(wanted, float) and math.isnan(wanted))
    if missing:
        return recorded is None or (isinstance(recorded, float) and math.isnan(recorded))
    if isinstance(recorded, bool) or not isinstance(recorded, (int, float)):
        return False
    return math.isfinite(recorded) and abs(float(recorded) - float(wanted)) <= TOLERANCE
