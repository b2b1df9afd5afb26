"""The baselines by name (`BASELINES`), light: `tosca list` and a refused name read it without
torch. The built-in estimators live in `method.baselines` and are imported when one is first used;
`register_baseline` there adds one from outside the package. Each description is the first line
of its class's docstring, and `reference` its class's declaration (tests/tosca_heads/method/
test_baselines.py holds them to it)."""

from __future__ import annotations

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
