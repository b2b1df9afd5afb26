"""The records of stage 2: every file it writes, each with its schema, version, reader and writer in
one module, so a format changes in one place and every reader sees the change.

- `run`: a run folder (`tosca fit`): config.json, validation.json, task files, the classifier and
  the routers' statistics, metrics.json, results.csv;
- `sweep`: a sweep folder's sweep.json and its append-only results.csv;
- `baseline`: a baselines folder (`tosca baselines`): each baseline's metrics.json and results.csv,
  and the comparison files;
- `suite`: a suite's manifest.json (its cells are run and baselines folders).

Versions: files written before versions existed (tosca 0.1) are format 1; format 2 added the
`format` field and the long results.csv; format 3 the validation split; format 4 a run's training
loss as its parts and their sum (ce, l1_term, loss: `run`). Every file here is format
`FORMAT` when written; older ones are read (and rewritten when resumed); a newer one is refused in
one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from featcache.foundation.errors import UserError

FORMAT = 4


def check_format(path: Path, written: Any, what: str = "") -> int:
    """The format a file says it has (1 when it says none), refused when this tosca cannot read it."""
    name = f"{what} {path}" if what else str(path)
    if isinstance(written, bool) or not isinstance(written, int) or written < 1:
        raise UserError(f"{name} records format {written!r}; the file was edited or damaged")
    if written > FORMAT:
        raise UserError(
            f"{name} was written by a newer tosca (format {written}; this one reads up to {FORMAT}): upgrade tosca"
        )
    return written


def store_block(store: Any, described: bool = True) -> dict[str, Any]:
    """The store a record was made from, as every stage-2 file opens: the format, the store's
    absolute path and fingerprint (what a resume or a rerun is checked against) and, when
    `described`, its dataset and backbone for a reader of the file."""
    block: dict[str, Any] = {
        "format": FORMAT,
        "store": str(store.path.resolve()),
        "store_fingerprint": store.fingerprint,
    }
    if described:
        ident = store.identity
        block.update(dataset=ident["dataset"]["name"], backbone=ident["backbone"]["alias"])
    return block


def _fraction(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value <= 1.0


def valid_metrics_block(block: Any) -> bool:
    """One router's (or a baseline's) metrics as tosca writes them: accuracies are fractions in
    [0, 1], forgetting a finite difference of two, A_t a list of fractions; anything else was edited
    (a NaN, 7.5 or `true` would be shown as a percentage and even ranked)."""
    if not isinstance(block, dict):
        return False
    forgetting = block.get("forgetting")
    routing = block.get("routing_accuracy")
    curve = block.get("A_t", [])
    return (
        _fraction(block.get("A_bar"))
        and _fraction(block.get("A_last"))
        and isinstance(forgetting, (int, float))
        and not isinstance(forgetting, bool)
        and -1.0 <= forgetting <= 1.0
        and (routing is None or _fraction(routing))
        and isinstance(curve, list)
        and all(_fraction(a) for a in curve)
    )
