"""One point of a sweep under a scenario (`studies.scenario_sweep`): TOSCA with one recipe learns
the scenario's stream on a store's kept training rows and answers, at each step, the held-out
validation rows and the test rows, for every router asked (one training).

`ScenarioPoint` is what the executor runs (`running.executor`: here, or as a Dask task on any
worker): plain values only, so it travels to a worker, and it reads the store itself there. The
store's arrays are read once per process and kept for the next point on the same store (a sweep's
points all read one store), the plan made again from the store's labels (cheap, and the same on any
worker: a scenario's draws are seeded).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from featcache.store import FeatureStore, open_unchanged, read_split
from tosca_heads.applied.scenario_runs import store_labels
from tosca_heads.applied.scenario_validation import HeldOutReading, held_out_reading
from tosca_heads.applied.tosca_scenario import tosca_answers
from tosca_heads.method.protocol import ValidationConfig
from tosca_heads.method.scenarios import scenario
from tosca_heads.records.sweep_points import point_key
from tosca_heads.requests.plan import held_out

_ARRAYS: dict[tuple[str, str], tuple[np.ndarray, np.ndarray | None, np.ndarray]] = {}
_ARRAYS_LOCK = threading.Lock()


def point_identity(
    train: Any, name: str, values: Mapping[str, Any], read_as: str, validation: ValidationConfig
) -> str:
    """A scenario point's identity, what a sweep's cells and a fit's default folder are named by:
    its recipe, the scenario with its values and reading, and the validation split, each under its
    own name (the recipe's `seed` and the split's are two values: sharing one name, two seeds were
    one point)."""
    return point_key(
        {
            **asdict(train),
            "scenario": name,
            **{f"scenario.{k}": v for k, v in sorted(values.items())},
            "read_as": read_as,
            **{f"validation.{k}": v for k, v in validation.record().items()},
        }
    )


@dataclass(frozen=True)
class ScenarioPoint:
    """A scenario point as the executor runs it: the store (its path and the fingerprint it was
    planned on), the scenario with its values and reading, the validation split, and TOSCA's
    parameters (`tosca_scenario.tosca_options`: its routers and choices, the preset and the recipe's
    numbers), as sorted pairs."""

    store_path: str
    fingerprint: str
    scenario: str
    values: tuple[tuple[str, Any], ...]
    read_as: str
    validation: ValidationConfig
    params: tuple[tuple[str, Any], ...]

    def run(self) -> dict[str, list[np.ndarray]]:
        """The answers of the joined reading at each step, per router (`reading`'s `split` makes
        them the validation's and the test's)."""
        return self.run_keeping(None)

    def run_keeping(self, keep: dict[str, Any] | None) -> dict[str, list[np.ndarray]]:
        """`run`, `keep` receiving the fitted estimator and its rows' classes (`tosca_answers`)."""
        store = open_unchanged(
            self.store_path,
            self.fingerprint,
            "the sweep was planned",
            "run the same sweep against the store as it is now",
        )
        reading = self.reading(store)
        train_x, views, test_x = _arrays(store)
        kept_x, kept_views = reading.train_features(train_x, views)
        kind = scenario(self.scenario)
        return tosca_answers(
            reading.joined,
            kept_x,
            reading.eval_features(train_x, test_x),
            kind.told_task,
            dict(self.params),
            kept_views,
            keep,
        )

    def reading(self, store: FeatureStore) -> HeldOutReading:
        """The scenario's plan on the store with this point's validation rows held out."""
        return held_out_reading(
            scenario(self.scenario),
            store_labels(store, self.read_as),
            held_out(store, self.validation),
            dict(self.values),
        )


def _arrays(store: FeatureStore) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """The store's training features, views and test features, read (and every chunk checked) once
    per process; a process that moves on to another store lets the previous one's go."""
    key = (str(store.path.resolve()), store.fingerprint)
    with _ARRAYS_LOCK:
        if key not in _ARRAYS:
            _ARRAYS.clear()
            (train_x, views), (test_x, _) = read_split(store, "train"), read_split(store, "test")
            _ARRAYS[key] = (train_x, views, test_x)
        return _ARRAYS[key]
