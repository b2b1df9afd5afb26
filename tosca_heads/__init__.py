"""Stage 2: one LuCA module per task, the shared cosine classifier and the routers, trained on a
store's cached features, and the runs and studies built on them.

Floors, each importing only those below it (tests/test_import_boundary.py checks):
`method` (what TOSCA is: LuCA, the classifier, the protocol, the recipe, metrics, feature
sources, baselines), `routers` (which module answers a sample), `engine` (how many
configurations train as one program, on a CPU or a GPU), `records` (each file a run, sweep or
suite writes: schema, version, reader, writer, figures), `trackers` (MLflow, TensorBoard and
plug-in loggers, fed from the records), `requests` (what the commands ask for, and a fit's plan
checked once), `running` (units that run: one engine run, one baseline, the executor, what each
costs here), `applied` (a trained run or the method applied: predict, the scikit-learn
estimators, scenarios) beside `conformance` (the built-ins' contract run on a plug-in), `studies`
(lists of units and views over them: sweeps, results, comparison, report, demo, suites). Beneath them all, `tosca_foundation`
and `featcache.store`; never the backbone side (backbones, datasets, decoding, the extraction
pipeline), so a machine that only fits heads never loads a backbone. `predict` gets its
image embedder handed in by the caller.

The Python API is re-exported here, loaded on first use: the names of `tosca_heads.stage2_api.__all__`
(`fit`, `evaluate`, `sweep`, `predict`, `baselines`, the suites, the registries, the types they
return, the scikit-learn estimators and the error classes `UserError`, `UserValueError`,
`UserTypeError`; `tosca_heads.API` lists them).
"""

from __future__ import annotations

from tosca_foundation.lazy import lazy_face

__getattr__, __dir__ = lazy_face(__name__, "stage2_api")
