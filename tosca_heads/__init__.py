"""Stage 2: one LuCA module per task, the shared cosine classifier and the routers, trained on a
store's cached features, and the experiments built on them.

Floors, each importing only those below it (tests/test_import_boundary.py checks):
`method` (what TOSCA is: LuCA, the classifier, the protocol, the recipe, metrics, feature
sources, baselines), `routers` (which module answers a sample), `engine` (how many
configurations train as one program, on a CPU or a GPU), `experiments` (runs, sweeps, results,
comparison, predict, demo: what the commands ask for). Beneath them all, `featcache.foundation`
and `featcache.store`; never the backbone side (backbones, datasets, decoding, the extraction
pipeline), so a machine that only fits heads never loads a backbone. `predict` gets its
image embedder handed in by the caller.

The Python API (tosca_heads.api) is re-exported here, loaded on first use: `fit`, `evaluate`,
`sweep`, `load_run`, `predict`, `baselines`, `run_suite`, `load_suite`, `register_router`,
`register_baseline`, the types they return, and the scikit-learn estimators (`TOSCAClassifier`,
`BaselineClassifier`, `validation_split`).
"""

from __future__ import annotations

from typing import Any

API = (
    "BASELINES",
    "ROUTERS",
    "BaselineClassifier",
    "Predictions",
    "ProtocolWarning",
    "ReferenceView",
    "Router",
    "RunPredictor",
    "RunResult",
    "StageView",
    "SuiteResult",
    "SuiteSpec",
    "TOSCAClassifier",
    "baselines",
    "evaluate",
    "fit",
    "load_run",
    "load_suite",
    "parse_suite",
    "predict",
    "register_baseline",
    "register_router",
    "run_suite",
    "sweep",
    "validation_split",
)


def __getattr__(name: str) -> Any:
    if name in API:
        from tosca_heads import api

        return getattr(api, name)
    raise AttributeError(f"module 'tosca_heads' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *API])
