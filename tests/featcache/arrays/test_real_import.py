"""The real EuroSAT subset's EfficientNet-Lite0 features, written by `tosca export` to each format
and read back by `tosca import`, give exactly the figures of the store `tosca extract` made: every
router's figures of a fit and the baselines', to the last digit (the same float32 values, labels,
ids, class names and dataset name: the same split, class order and validation rows)."""

from __future__ import annotations

from pathlib import Path

import pytest

from featcache.arrays.exporter import export_store
from featcache.arrays.importer import import_arrays
from featcache.arrays.requests import ExportRequest, ImportRequest
from featcache.store import FeatureStore

pytestmark = pytest.mark.realdata
FORMATS = {"npz": "x.npz", "parquet": "x.parquet", "datasets": "x-datasets"}


def _figures(store: Path, out: Path) -> tuple[dict[str, object], list[tuple[str, float, float]]]:
    from tosca_heads import baselines, fit

    routers = fit(store, write=False, device="cpu", epochs=3).metrics()["routers"]
    frame = baselines(store, ["simplecil", "ranpac"], with_tosca=False, out=out, device="cpu")
    return routers, [
        (m, a, b) for m, a, b in zip(frame["method"], frame["A_last"], frame["A_bar"], strict=True)
    ]


@pytest.mark.parametrize("kind", list(FORMATS))
def test_exported_and_imported_real_features_give_the_extracted_store_s_figures(
    kind: str, eurosat_store: Path, tmp_path: Path
) -> None:
    if kind == "datasets":
        pytest.importorskip("datasets")
    to = tmp_path / FORMATS[kind]
    export_store(ExportRequest(store=eurosat_store, to=to, format=kind))
    imported = import_arrays(ImportRequest(sources=(to,), store=tmp_path / "imported.zarr")).store
    ident = FeatureStore.open(imported).identity
    assert ident["backbone"]["encoder"] == "effnet_lite0" and ident["modality"] == "image"
    assert ident["dataset"]["name"] == "eurosat" and ident["dataset"]["samples"] == {
        "train": 300,
        "test": 300,
    }
    extracted = _figures(eurosat_store, tmp_path / "base-extracted")
    assert _figures(imported, tmp_path / "base-imported") == extracted
    assert 0.5 < extracted[0]["lda"]["A_last"] <= 1.0  # type: ignore[index]
