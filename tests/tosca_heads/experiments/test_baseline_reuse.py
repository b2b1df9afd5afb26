"""A baselines folder rerun reuses each baseline made from the same store, task split, parameters
and validation split (issue 49, point 5: the demo's rerun computed RanPAC again, 107 s of 166 s),
its figures checked against its kept answers; anything else asked is computed again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from support.stores import synthetic_store

import tosca_heads
from tosca_foundation.errors import UserError
from tosca_heads.experiments import executor

ASKED: dict[str, Any] = {"init_cls": 2, "increment": 2, "val_fraction": 0.2, "with_tosca": False}
RANPAC = {"ranpac_projection_dim": 64}


@pytest.mark.heavy  # five baselines commands
def test_a_rerun_reuses_what_was_made_the_same_way_and_computes_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=6, per_class=20, spread=1.5)
    out = tmp_path / "base"
    first = tosca_heads.baselines(store.path, ["simplecil", "ranpac"], out=out, **ASKED, **RANPAC)
    kept = {m: (out / m / "metrics.json").read_bytes() for m in ("simplecil", "ranpac")}

    computed: list[str] = []
    real = executor.run_baseline

    def counted(name: str, *args: Any, **kwargs: Any) -> Any:
        computed.append(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(executor, "run_baseline", counted)
    again = tosca_heads.baselines(store.path, ["simplecil", "ranpac"], out=out, **ASKED, **RANPAC)
    assert computed == []  # nothing computed again
    pd.testing.assert_frame_equal(again, first)  # the same table, seconds included (those it took)
    assert {m: (out / m / "metrics.json").read_bytes() for m in kept} == kept

    # another RanPAC seed: RanPAC computed again, SimpleCIL (no such parameter) reused
    tosca_heads.baselines(store.path, ["simplecil", "ranpac"], out=out, **ASKED, **RANPAC, ranpac_seed=7)
    assert computed == ["ranpac"]
    assert json.loads((out / "ranpac" / "metrics.json").read_text())["params"]["seed"] == 7

    # another validation split: both computed again
    computed.clear()
    tosca_heads.baselines(
        store.path,
        ["simplecil", "ranpac"],
        out=out,
        **{**ASKED, "val_fraction": 0.3},
        **RANPAC,
        ranpac_seed=7,
    )
    assert sorted(computed) == ["ranpac", "simplecil"]

    # a store made again at the same path (another fingerprint): computed again
    computed.clear()
    synthetic_store(tmp_path / "s.zarr", classes=6, per_class=20, spread=1.5, seed=5)
    tosca_heads.baselines(store.path, ["simplecil"], out=out, **{**ASKED, "val_fraction": 0.3})
    assert computed == ["simplecil"]


def test_a_kept_baseline_whose_figures_were_edited_is_refused_not_reused(tmp_path: Path) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=6, per_class=20, spread=1.5)
    out = tmp_path / "base"
    tosca_heads.baselines(store.path, ["simplecil"], out=out, **ASKED)
    path = out / "simplecil" / "metrics.json"
    payload = json.loads(path.read_text())
    payload["routers"]["none"]["A_last"] = 0.999
    path.write_text(json.dumps(payload))
    with pytest.raises(UserError, match=r"metrics\.json") as refused:
        tosca_heads.baselines(store.path, ["simplecil"], out=out, **ASKED)
    assert "\n" not in str(refused.value)
