"""A scenario read with a validation split held out of the training rows, so that a sweep under a
scenario chooses its point on images it never trains on and never on test (the class-incremental
sweep's rule, `--val-fraction`).

The held-out rows (the house's one carve: `requests.plan.held_out`, per class by store label) leave
the stream: the scenario reads the rows kept for training as its training split (a few-shot
session's shots are drawn among them, a blurry stream is made of them), and answers at each of its
steps the held-out rows as it answers test rows. One training serves both: the stream is read once
with the held-out rows and the test rows side by side as what it evaluates (`joined`), and each
step's answers are split back into the validation reading's and the test reading's (`split`). That
the three readings make the same stream, and that the joined one evaluates exactly the rows of the
other two, is checked each time (a scenario whose stream depended on its test rows would be a bug).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tosca_heads.method.scenarios import Scenario, ScenarioPlan, StoreLabels


@dataclass(frozen=True)
class HeldOutReading:
    """A scenario's plan on a store with validation rows held out of training.

    - `kept`, `held`: the store's training rows the stream learns from, and those answered as
      validation (sorted; `held` empty without a validation split);
    - `joined`: the stream on the kept rows; its evaluation rows index the held-out rows first,
      then the test rows (`eval_features` lays the features out so);
    - `validation`, `test`: the same stream read against the held-out rows alone (None without
      any), and against the test rows: what each split's figures are worked out on.
    """

    kept: np.ndarray
    held: np.ndarray
    joined: ScenarioPlan
    validation: ScenarioPlan | None
    test: ScenarioPlan

    def train_features(
        self, train_x: np.ndarray, views: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """The kept rows' features and augmented views [V, n, d] (views None where the store has none)."""
        if not len(self.held):
            return train_x, views
        return train_x[self.kept], None if views is None else views[:, self.kept]

    def eval_features(self, train_x: np.ndarray, test_x: np.ndarray) -> np.ndarray:
        """What `joined` evaluates: the held-out training rows, then the test rows."""
        return test_x if not len(self.held) else np.concatenate([train_x[self.held], test_x])

    def split(self, answers: Sequence[np.ndarray]) -> tuple[list[np.ndarray] | None, list[np.ndarray]]:
        """The joined plan's answers at each step as (validation's, test's): each step's first
        answers are the held-out rows' (None without a validation split)."""
        if self.validation is None:
            return None, list(answers)
        cut = [len(step.eval_rows) for step in self.validation.steps]
        return [a[:c] for a, c in zip(answers, cut, strict=True)], [
            a[c:] for a, c in zip(answers, cut, strict=True)
        ]


def held_out_reading(
    kind: type[Scenario], labels: StoreLabels, held: np.ndarray, values: Mapping[str, Any]
) -> HeldOutReading:
    """The scenario `kind` with its `values` on `labels`, the training rows `held` answered as
    validation (module docstring). Each plan's refusals are the scenario's (a 5-shot session with a
    class left with 3 images once its validation rows are held out: one line)."""
    n = len(labels.train_labels)
    if not len(held):
        plan = kind.plan(labels, **values)
        return HeldOutReading(np.arange(n), np.zeros(0, dtype=np.int64), plan, None, plan)
    kept = np.setdiff1d(np.arange(n), held)

    def against(test_labels: np.ndarray, test_domains: np.ndarray | None) -> ScenarioPlan:
        domains = labels.train_domains
        read = replace(
            labels,
            train_labels=labels.train_labels[kept],
            train_domains=None if domains is None else domains[kept],
            test_labels=test_labels,
            test_domains=test_domains,
        )
        return kind.plan(read, **values)

    train_domains, test_domains = labels.train_domains, labels.test_domains
    both = (
        None
        if train_domains is None or test_domains is None
        else np.concatenate([train_domains[held], test_domains])
    )
    validation = against(labels.train_labels[held], None if train_domains is None else train_domains[held])
    test = against(labels.test_labels, test_domains)
    joined = against(np.concatenate([labels.train_labels[held], labels.test_labels]), both)
    _check_same_stream(joined, validation, test, len(held))
    return HeldOutReading(kept, np.asarray(held, dtype=np.int64), joined, validation, test)


def _check_same_stream(joined: ScenarioPlan, validation: ScenarioPlan, test: ScenarioPlan, held: int) -> None:
    """The three readings learn the same rows at each step, and the joined one evaluates the
    validation reading's rows then the test reading's: else the split of its answers would be wrong."""
    same = len(joined.steps) == len(validation.steps) == len(test.steps) and all(
        a.task == b.task == c.task
        and np.array_equal(a.train_rows, b.train_rows)
        and np.array_equal(a.train_rows, c.train_rows)
        and np.array_equal(a.eval_rows, np.concatenate([b.eval_rows, held + c.eval_rows]))
        for a, b, c in zip(joined.steps, validation.steps, test.steps, strict=False)
    )
    if not same:
        raise RuntimeError(f"scenario {joined.scenario}'s stream depends on its evaluation rows")  # a bug
