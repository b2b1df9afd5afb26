"""`tosca import` and `tosca export` on made-up arrays: every format reads into the same store
(the same fingerprint, the same rows), an import -> export -> import round trip gives back the store
it started from, the stratified rule splits as it says, `cache info` names the provenance, and an
imported store is read by stage 2 as an extracted one but never embedded with a backbone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support.arrays import KINDS, class_names, made_up_columns, write_as
from typer.testing import CliRunner

from cli import app
from featcache.arrays.exporter import export_store
from featcache.arrays.importer import import_arrays
from featcache.arrays.requests import ExportRequest, ImportRequest
from featcache.arrays.split_rule import stratified_test_rows
from featcache.store import FeatureStore, verify_store
from tosca_foundation.errors import UserError

runner = CliRunner()
CLASSES, PER_CLASS, DIM = 6, 8, 16


def _import(sources: list[Path], store: Path, **asked: object) -> FeatureStore:
    defaults: dict[str, object] = {"encoder": "made-up/encoder v1", "modality": "text", "name": "intents"}
    request = ImportRequest(sources=tuple(sources), store=store, chunk_size=10, **{**defaults, **asked})
    import_arrays(request)
    return FeatureStore.open(store)


def _rows(store: FeatureStore) -> dict[str, object]:
    return {
        split: (store.features(split), store.labels(split), list(store.ids(split)))
        for split in ("train", "test")
    } | {"views": store.view(0) if store.views else None, "names": store.identity["dataset"]["class_names"]}


@pytest.fixture
def columns() -> dict[str, np.ndarray]:
    return made_up_columns(CLASSES, PER_CLASS, DIM, views=2)


def test_the_npz_import_holds_the_rows_as_given(tmp_path: Path, columns: dict[str, np.ndarray]) -> None:
    sources = write_as("npz", columns, class_names(CLASSES), tmp_path / "in")
    store = _import(sources, tmp_path / "s.zarr")
    assert verify_store(store) == []
    train = columns["split"] == "train"
    np.testing.assert_array_equal(store.features("train"), columns["features"][train])
    np.testing.assert_array_equal(store.labels("test"), columns["labels"][~train])
    np.testing.assert_array_equal(store.view(1), columns["views"][train][:, 1])
    assert list(store.ids("test")) == [str(i) for i in np.flatnonzero(~train)]  # row numbers of the file
    ident = store.identity
    assert ident["backbone"] == {
        "alias": "made-up-encoder-v1",
        "encoder": "made-up/encoder v1",
        "feature_dim": DIM,
        "imported": True,
    }
    assert "timm_name" not in ident["backbone"] and "weights_source" not in ident["backbone"]
    assert ident["modality"] == "text" and ident["dataset"]["samples"] == {"train": 36, "test": 12}
    assert ident["dataset"]["class_names"] == class_names(CLASSES)
    files = store.attrs["provenance"]["files"]
    assert [Path(f["file"]).name for f in files] == ["arrays.npz"] and len(files[0]["sha256"]) == 64


@pytest.mark.parametrize("kind", KINDS[1:])
def test_every_format_makes_the_store_the_npz_makes(
    kind: str, tmp_path: Path, columns: dict[str, np.ndarray]
) -> None:
    names = class_names(CLASSES)
    reference = _import(write_as("npz", columns, names, tmp_path / "npz"), tmp_path / "npz.zarr")
    sources = write_as(kind, columns, names, tmp_path / kind)
    extra = {"class_names": tmp_path / kind / "classes.txt"} if kind == "npy" else {}
    store = _import(sources, tmp_path / f"{kind}.zarr", **extra)
    assert store.fingerprint == reference.fingerprint
    got, want = _rows(store), _rows(reference)
    for key in ("train", "test"):
        for a, b in zip(got[key], want[key], strict=True):  # type: ignore[call-overload]
            np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(got["views"], want["views"])
    assert got["names"] == want["names"]


@pytest.mark.parametrize("kind", ["npz", "parquet", "datasets"])
def test_import_export_import_gives_back_the_same_store(
    kind: str, tmp_path: Path, columns: dict[str, np.ndarray]
) -> None:
    if kind == "datasets":
        pytest.importorskip("datasets")
    first = _import(write_as("npz", columns, class_names(CLASSES), tmp_path / "in"), tmp_path / "a.zarr")
    out = tmp_path / ("out" if kind == "datasets" else f"out.{kind}")
    export_store(ExportRequest(store=first.path, to=out, format=kind))
    again = import_arrays(ImportRequest(sources=(out,), store=tmp_path / "b.zarr", chunk_size=10))
    second = FeatureStore.open(again.store)
    assert second.fingerprint == first.fingerprint and second.identity == first.identity
    for key, value in _rows(first).items():
        if isinstance(value, tuple):
            for a, b in zip(value, _rows(second)[key], strict=True):  # type: ignore[call-overload]
                np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(second.view(1), first.view(1))


def test_an_export_reads_in_one_call(tmp_path: Path, columns: dict[str, np.ndarray]) -> None:
    import pandas as pd

    store = _import(write_as("npz", columns, class_names(CLASSES), tmp_path / "in"), tmp_path / "s.zarr")
    export_store(ExportRequest(store=store.path, to=tmp_path / "x.npz"))
    export_store(ExportRequest(store=store.path, to=tmp_path / "x.parquet"))
    with np.load(tmp_path / "x.npz") as data:
        assert data["features"].shape == (48, DIM) and data["views"].shape == (48, 2, DIM)
        assert list(data["split"][:36]) == ["train"] * 36 and list(data["class_names"]) == class_names(
            CLASSES
        )
        np.testing.assert_array_equal(data["features"][36:], store.features("test"))
    frame = pd.read_parquet(tmp_path / "x.parquet")
    assert list(frame.columns) == ["ids", "split", "labels", "features", "views"]
    assert len(frame) == 48 and frame["views"].isna().sum() == 12  # a test row has no views
    np.testing.assert_array_equal(np.stack(frame["features"].to_numpy())[:36], store.features("train"))


def test_the_same_import_again_does_nothing_and_other_arrays_are_refused(
    tmp_path: Path, columns: dict[str, np.ndarray]
) -> None:
    sources = write_as("npz", columns, class_names(CLASSES), tmp_path / "in")
    _import(sources, tmp_path / "s.zarr")
    again = import_arrays(
        ImportRequest(
            sources=tuple(sources),
            store=tmp_path / "s.zarr",
            encoder="made-up/encoder v1",
            modality="text",
            name="intents",
            chunk_size=10,
        )
    )
    assert again.already_done and again.chunks_kept == 6
    with pytest.raises(UserError, match=r"holds other features \(backbone.alias: .*pass --overwrite"):
        _import(sources, tmp_path / "s.zarr", encoder="another")
    replaced = _import(sources, tmp_path / "s.zarr", encoder="another", overwrite=True)
    assert replaced.identity["backbone"]["encoder"] == "another"


def test_the_stratified_rule_splits_each_class_by_itself() -> None:
    labels = np.repeat(np.arange(5), [10, 7, 3, 2, 40])
    test = stratified_test_rows(labels, 0.2, seed=3)
    assert [int(test[labels == c].sum()) for c in range(5)] == [2, 1, 1, 1, 8]
    np.testing.assert_array_equal(test, stratified_test_rows(labels, 0.2, seed=3))
    assert not np.array_equal(test, stratified_test_rows(labels, 0.2, seed=4))
    kept = labels != 1  # a class's split does not depend on the other classes
    np.testing.assert_array_equal(test[kept], stratified_test_rows(labels[kept], 0.2, seed=3))


def test_cache_info_names_the_encoder_and_the_files_and_predict_refuses(
    tmp_path: Path, columns: dict[str, np.ndarray]
) -> None:
    sources = write_as("parquet", columns, class_names(CLASSES), tmp_path / "in")
    store = _import(sources, tmp_path / "s.zarr")
    shown = runner.invoke(app, ["cache", "info", str(store.path)])
    assert shown.exit_code == 0, shown.output
    assert "made-up/encoder v1 (dim 16; imported: computed outside tosca, never run here)" in shown.output
    assert "modality" in shown.output and "arrays.parquet (sha256 " in shown.output
    assert "timm" not in shown.output and "weights" not in shown.output
    from featcache.embedding import backbone_of_store

    with pytest.raises(UserError, match=r"was imported .* tosca has no backbone to embed new inputs with"):
        backbone_of_store(store)


def test_the_commands_import_and_export(tmp_path: Path, columns: dict[str, np.ndarray]) -> None:
    sources = write_as("npz", columns, class_names(CLASSES), tmp_path / "in")
    made = runner.invoke(
        app,
        [
            "import",
            *map(str, sources),
            "--store",
            str(tmp_path / "s.zarr"),
            "--encoder",
            "e5",
            "--modality",
            "text",
        ],
    )
    assert made.exit_code == 0, made.output
    assert (
        "import: s (6 classes, text, encoder e5): train 36, test 12 rows of 16 features, 2 views"
        in made.output
    )
    out = runner.invoke(app, ["export", str(tmp_path / "s.zarr"), "--to", str(tmp_path / "s.parquet")])
    assert out.exit_code == 0 and "exported 48 rows of 16 features (2 views) as parquet" in out.output


def test_a_saved_dataset_dict_s_train_and_test_make_the_split(
    tmp_path: Path, columns: dict[str, np.ndarray]
) -> None:
    import json

    names = class_names(CLASSES)
    folder = tmp_path / "dict"
    folder.mkdir()
    for split in ("train", "test"):
        rows = columns["split"] == split
        part = {k: v[rows] for k, v in columns.items() if k != "split"}
        (saved,) = write_as("datasets", part, names, tmp_path / f"part-{split}")
        saved.rename(folder / split)
    (folder / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "test"]}))
    store = _import([folder], tmp_path / "dict.zarr")
    train = columns["split"] == "train"
    np.testing.assert_array_equal(store.features("train"), columns["features"][train])
    np.testing.assert_array_equal(store.labels("test"), columns["labels"][~train])
    np.testing.assert_array_equal(store.view(0), columns["views"][train][:, 0])
    assert store.identity["dataset"]["class_names"] == names  # from the ClassLabel


def test_an_hdf5_group_s_dataset_is_a_column_named_by_its_path(
    tmp_path: Path, columns: dict[str, np.ndarray]
) -> None:
    import h5py

    names = class_names(CLASSES)
    reference = _import(write_as("npz", columns, names, tmp_path / "npz"), tmp_path / "npz.zarr")
    with h5py.File(tmp_path / "nested.h5", "w") as handle:
        handle["feats/clip"] = columns["features"]
        handle["labels"], handle["split"] = columns["labels"], columns["split"].astype(object)
        handle["views"] = columns["views"]
        handle["class_names"] = np.asarray(names, dtype=object)
    store = _import([tmp_path / "nested.h5"], tmp_path / "h5.zarr", features="feats/clip")
    assert store.fingerprint == reference.fingerprint
