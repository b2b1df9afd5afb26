"""The `small` suite preset (issue 57, point 15): the demo's one store, one seed, the default
baselines and every ablation flow, so that a first suite runs in minutes (docs/suite.md has its
planned and measured time) where `local` needs three stores and hours."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from support.stores import synthetic_store

from tosca_foundation.dataset_names import DATASETS
from tosca_heads.method.baseline_registry import default_baselines
from tosca_heads.requests.command_requests import DEMO_PER_CLASS, DemoRequest
from tosca_heads.studies.suite import parse_suite, run_suite
from tosca_heads.studies.suite.cells import plan_cells
from tosca_heads.studies.suite.presets import preset
from tosca_heads.studies.suite.spec import with_stores


def test_the_small_preset_is_the_demos_store_at_one_seed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its one store is where `tosca demo` leaves its store (so `make demo` has extracted it), made
    from the same archive and subset when missing; one seed; the default baselines; all four flows
    and L1 off: eight cells."""
    monkeypatch.setenv("TOSCA_DATA", str(tmp_path / "data"))
    spec = parse_suite(preset("small"), tmp_path)
    (store,) = spec.stores
    demo = DemoRequest()
    assert store.path == (demo.cache_dir / "eurosat" / f"effnet_lite0-demo{demo.per_class}.zarr").resolve()
    assert (store.model, store.dataset, store.limit_per_class) == ("effnet_lite0", "eurosat", DEMO_PER_CLASS)
    assert store.data_root == tmp_path / "data" / "eurosat" / "EuroSAT-RGB.tar.gz"
    split = DATASETS["eurosat"].split
    assert (store.init_cls, store.increment) == (split.init_cls, split.increment)
    assert spec.seeds == (0,) and spec.baselines == default_baselines()
    assert set(spec.flows) == {"tosca", "tosca_r", "adapter", "calibrator"} and spec.l1_off
    cells = plan_cells(spec)
    assert len(cells) == 4 + 1 + len(default_baselines())  # the four flows, L1 off, each baseline


@pytest.mark.heavy
def test_the_small_preset_runs_on_a_stand_in_store(tmp_path: Path) -> None:
    """Every cell of the preset finishes on a tiny store of EuroSAT's ten classes, and the tables
    name its one store."""
    spec = parse_suite(preset("small"), tmp_path)
    stand_in = synthetic_store(tmp_path / "eurosat.zarr", classes=10, per_class=4, test_per_class=2, dim=16)
    quick = dataclasses.replace(
        with_stores(spec, {"EuroSAT": stand_in.path}),
        baseline_params={"ranpac_projection_dim": 32},
        flags={"epochs": 1},
    )
    result = run_suite(quick, tmp_path / "out", device="cpu")
    assert not result.missing and len(result.cells) == 8
    table = result.tables.table
    assert set(table.store) == {"EuroSAT"} and (table.n == table.expected).all()
    tosca = [c for c in result.cells if c.cell.kind == "tosca"]
    assert {json.loads((c.folder / "metrics.json").read_text())["finished_tasks"] for c in tosca} == {5}
