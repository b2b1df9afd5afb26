"""The demo's numbers hold, on the demo's real store.

The store is `make demo`'s: EfficientNet-Lite0 (packaged ImageNet weights) on the real EuroSAT
archive, 300 images per class and split, extracted on the CPU. The reference curves are those of
a plain autograd trainer of the reference modules on that store, paper preset, B0 Inc2, and the
numbers the README's demo table quotes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from featcache.store import FeatureStore
from tosca_heads.method.protocol import StreamConfig
from tosca_heads.method.recipe import PRESETS
from tosca_heads.running.group import fit_run

pytestmark = pytest.mark.realdata

REFERENCE_A_T = {  # per routing mode, after each of the 5 tasks
    "entropy": [0.998333, 0.9275, 0.873333, 0.82625, 0.820333],
    "batch": [0.998333, 0.971667, 0.969444, 0.959583, 0.964667],
    "batch_shuffled": [0.998333, 0.528333, 0.348889, 0.279583, 0.340333],
    "oracle": [0.998333, 0.991667, 0.982778, 0.979583, 0.980667],
}


@pytest.fixture(scope="module")
def demo_store(demo_cache: Path) -> FeatureStore:
    from tosca_heads.requests.command_requests import DEMO_PER_CLASS

    return FeatureStore.open(demo_cache / "eurosat" / f"effnet_lite0-demo{DEMO_PER_CLASS}.zarr")


def test_fit_on_the_demo_store_keeps_its_numbers(demo_store: FeatureStore, tmp_path: Path) -> None:
    result = fit_run(demo_store, StreamConfig(2, 2), PRESETS["paper"], None, tmp_path / "run", device="cpu")
    modes = result.metrics()["routers"]
    for mode, curve in REFERENCE_A_T.items():
        np.testing.assert_allclose(modes[mode]["A_t"], curve, atol=1e-3, err_msg=mode)  # within 0.1 points
