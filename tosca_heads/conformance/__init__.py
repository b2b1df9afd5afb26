"""The conformance check for plug-in authors, as scikit-learn's `check_estimator`:
`check_baseline(cls)` and `check_router(cls)` run on a plug-in the contract every built-in passes
(tests/tosca_heads/conformance/test_conformance.py holds them to it), before a run would meet a
broken one halfway through a suite. Each check is one file; the first check a class fails stops it
with a `NonConforming` error, one line naming the class and what is wrong; a class that passes gets
its `Conformance`: which checks ran, which were skipped and why.
"""

from __future__ import annotations

from tosca_heads.conformance.baseline_check import check_baseline
from tosca_heads.conformance.outcome import Conformance, NonConforming
from tosca_heads.conformance.router_check import check_router

__all__ = ["Conformance", "NonConforming", "check_baseline", "check_router"]
