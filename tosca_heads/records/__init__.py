"""The records of stage 2: every file it writes, each with its schema, version, reader and writer in
one module, so a format changes in one place and every reader sees the change.

- `run_folder`: a run folder (`tosca fit`), a cell: its state (task files, the classifier, the
  routers' statistics, validation.json under state/) read back with checks, and its views
  (metrics.json, results.csv, confusion.json, curves.csv, the plots), never read back;
- `run_config`: what a run was asked (its asked.json): what a plan writes there, its reader and
  comparison, and the refusal of a run written before cells;
- `run_cell`: a run's measured.json and done.json written last, and the one reader of a finished
  run (`read_run`): every figure, the confusion and the parameter count computed when read;
- `claim`: the one claim of every folder above (checked, locked, marked, its config compared);
- `sweep`: a sweep folder: sweep.json (the study) and results.csv, a view of its points;
- `sweep_points`: a sweep's points, each a cell in points/KEY/, and their one reader;
- `cell`: the cell, one folder format for every unit that runs (asked.json, measured.json, the
  kept answers, state/, done.json written last with every file's digest) and its one reuse rule;
- `baselines_folder`: a baselines folder (`tosca baselines`): one cell per baseline, its
  metrics.json and results.csv as views never read back, and the comparison files;
- `suite`: a suite's manifest.json (its cells are run and baselines folders);
- `outcomes`: which images each router or baseline answered right after each task (what every
  interval and paired test is computed from).
- `derived`: every figure a file keeps that its kept answers give, worked out again on read and
  compared (a figure edited is one line, never a number).

Format: every file here records `FORMAT`, the format of tosca's first release. No reader of an
unreleased format is kept: a file that records none, or one of the numbers the builds before the
release wrote (`PRE_RELEASE`: 2 to 4), is refused in one line as written before tosca's first
release, one of a higher number as written by a newer tosca (`check_format`). The next format is
therefore 5, never 2.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tosca_foundation.errors import UserError
from tosca_foundation.fingerprints import canonical_json
from tosca_heads.method.metrics import resampled, with_interval

FORMAT = 1  # the first release's; no earlier format is read
# the numbers the builds before the first release wrote (none at all before them): a later format is 5
PRE_RELEASE = (2, 3, 4)
# a run's asked.json keys that do not decide its numbers
INFORMATIONAL = ("store", "format", "protocol")


def check_format(path: Path, written: Any, what: str = "") -> int:
    """The format a file records (`written`; None when it records none), refused in one line unless
    it is this tosca's: none, or one of `PRE_RELEASE`, is a file written before tosca's first
    release; a higher number a file of a newer tosca; anything else an edited file."""
    name = f"{what} {path}" if what else str(path)
    if written is None or (written in PRE_RELEASE and not isinstance(written, bool)):
        said = "no format" if written is None else f"format {written}"
        raise UserError(
            f"{name} was written before tosca's first release ({said}; this tosca reads format {FORMAT} "
            "only): make it again with this tosca"
        )
    if isinstance(written, bool) or not isinstance(written, int) or written < 1:
        raise UserError(f"{name} records format {written!r}; the file was edited or damaged")
    if written != FORMAT:
        raise UserError(
            f"{name} was written by a newer tosca (format {written}; this one reads format {FORMAT}): upgrade tosca"
        )
    return written


def default_run_dir(config: dict[str, Any], runs_root: Path = Path("runs")) -> Path:
    """A run's folder when none is given: its dataset, backbone and recipe, and a digest of the
    config.json keys that decide its numbers."""
    train = config["train"]
    digest = hashlib.sha256(
        canonical_json({k: v for k, v in config.items() if k not in INFORMATIONAL}).encode()
    ).hexdigest()
    name = f"{config['dataset']}-{config['backbone']}-{train['flow']}-r{train['r']}-l1{train['l1']:g}-{digest[:8]}"
    return runs_root / name


def config_digest(config: dict[str, Any]) -> str:
    """A digest of the split and recipe of a run's config, recorded in each task file: a config.json
    edited afterwards (another class order, flow or split) no longer matches its files."""
    decisive = {"stream": config.get("stream"), "train": config.get("train")}
    if "validation" in config:  # a run without validation keeps the digest it had before
        decisive["validation"] = config["validation"]
    text = canonical_json(decisive)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def validation_record(validation: Any, ids: Sequence[str]) -> dict[str, Any]:
    """A validation split as config.json, sweep.json and a baseline's metrics.json record it:
    fraction, seed, how many training images it holds and a digest of their store ids."""
    digest = hashlib.sha256("\n".join(ids).encode()).hexdigest()
    return {**validation.record(), "samples": len(ids), "ids_sha256": digest}


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


def with_intervals(
    block: dict[str, Any], found: dict[str, Any] | None, routing: Any = None
) -> dict[str, Any]:
    """A metrics block with what makes it a figure with its uncertainty: "images" (the images after
    the last task), "intervals" ([low, high] at `uncertainty.LEVEL` of every metric that declares
    one, `metrics.with_interval()`) and "standard_errors" (of those recomputed from the answers);
    `found` is `uncertainty.intervals`' answer for it (None: nothing kept, the block as it is),
    `routing` the routing accuracy's interval."""
    if not found:
        return block
    intervals: dict[str, Any] = {}
    for metric in with_interval():
        if metric.from_routing:
            if routing is not None:
                intervals[metric.name] = [None if v != v else round(v, 6) for v in routing]
        elif metric.name in found:
            intervals[metric.name] = found[metric.name].record()
    return {
        **block,
        "images": next(iter(found.values())).images,
        "intervals": intervals,
        "standard_errors": {
            m.name: None if math.isnan(found[m.name].se) else round(found[m.name].se, 6)
            for m in resampled()
            if m.name in found
        },
    }
