"""The baselines by name (`BASELINES`), light: `tosca list`, a refused name and a plug-in's
`register_baseline` need no torch. The built-in estimators live in `method.baselines` and are
imported when one is first used; each is declared here with the first line of its class's
docstring and its `reference` (tests/cli/test_startup.py holds them to their classes)."""

from __future__ import annotations

from collections.abc import Callable

from featcache.foundation.registry import Registry

BASELINES: Registry[type] = Registry("baseline", "tosca_heads.method.baseline_names:BASELINES")

_HOME = "tosca_heads.method.baselines"
BASELINES.declare(
    "simplecil", f"{_HOME}:SimpleCIL", "Prototype classifier: cosine similarity to each class's mean feature."
)
BASELINES.declare(
    "ranpac",
    f"{_HOME}:RanPAC",
    "Random-projection ridge classifier with Gram matrices G = H^T H and Q = H^T Y kept across tasks.",
)
BASELINES.declare(
    "joint_probe",
    f"{_HOME}:JointProbe",
    "Softmax regression on standardised features, full-batch L-BFGS, warm-started stage to stage.",
    reference="sees every task at once",
)

ESTIMATOR_METHODS = ("predict", "num_parameters")


def register_baseline(name: str, aliases: tuple[str, ...] = ()) -> Callable[[type], type]:
    """A class decorator adding a baseline under `name` (and other names, `aliases`). The class follows the estimators of
    `method.baselines`: `__init__(device=...)` stores arguments; `incremental = True` with
    `partial_fit(x, y)` (one task's data at a time) or `False` with `fit(x, y)` (every seen class
    at once); `predict(x)` returns incremental class ids; `num_parameters()` counts what it learned.
    `reference = True` (or words saying why) marks one that is no continual method, such as a joint
    upper bound: it is reported beside the others, never as an honest result.

    >>> import numpy as np
    >>> @register_baseline("doc_nearest_first")
    ... class NearestFirst:
    ...     incremental = True
    ...     def __init__(self, device="cpu"):
    ...         self.device = device
    ...     def partial_fit(self, features, labels):
    ...         self.first_ = int(np.asarray(labels).min())
    ...         return self
    ...     def predict(self, features):
    ...         return np.full(len(features), self.first_)
    ...     def num_parameters(self):
    ...         return 1
    >>> "doc_nearest_first" in BASELINES
    True
    >>> del BASELINES["doc_nearest_first"]  # (a doctest leaves the registry as it found it)
    """

    def decorate(cls: type) -> type:
        learn = "partial_fit" if getattr(cls, "incremental", None) else "fit"
        missing = [m for m in (learn, *ESTIMATOR_METHODS) if not callable(getattr(cls, m, None))]
        if not hasattr(cls, "incremental") or missing:
            raise ValueError(f"baseline {name!r} lacks {', '.join(missing) or 'incremental'}")
        what = (cls.__doc__ or "").strip().partition("\n")[0]
        BASELINES.add(name, cls, what, getattr(cls, "reference", False), cls.__module__, aliases)
        return cls

    return decorate
