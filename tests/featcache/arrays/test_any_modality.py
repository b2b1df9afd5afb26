"""Any modality: a made-up text-like store (a sentence encoder's 384 dimensions, 150 intent
classes) imported from arrays runs `fit`, the baselines and a sweep as an image store does, and
what they say names no image backbone."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.arrays import made_up_columns, write_as
from typer.testing import CliRunner

from cli import app
from featcache.arrays.importer import import_arrays
from featcache.arrays.requests import ImportRequest

CLASSES, DIM = 150, 384


@pytest.fixture(scope="module")
def text_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("text")
    columns = made_up_columns(CLASSES, per_class=8, dim=DIM, seed=1)
    columns.pop("split")  # the stratified rule splits it
    names = [f"intent_{c:03d}" for c in range(CLASSES)]
    sources = write_as("parquet", columns, names, folder / "in")
    request = ImportRequest(
        sources=tuple(sources),
        store=folder / "clinc-like.zarr",
        encoder="sentence-transformers/all-MiniLM-L6-v2",
        modality="text",
        name="clinc-like",
        test_fraction=0.25,
    )
    return import_arrays(request).store


@pytest.mark.slow
def test_fit_baselines_and_a_sweep_run_on_a_text_store(text_store: Path, tmp_path: Path) -> None:
    from tosca_heads import baselines, fit, sweep

    result = fit(text_store, write=False, epochs=1, batch_size=32, device="cpu")
    metrics = result.metrics()
    assert metrics["finished_tasks"] == 10  # 150 classes: ten tasks of 15 (no paper split for this name)
    lda = metrics["routers"]["lda"]
    assert 0.5 < lda["A_last"] <= 1.0 and lda["images"] == CLASSES * 2  # 2 test rows of 8 per class
    frame = baselines(
        text_store, ["simplecil", "ranpac"], with_tosca=False, out=tmp_path / "base", device="cpu"
    )
    assert list(frame["method"]) == ["simplecil", "ranpac"]
    assert (frame["A_last"] > 0.5).all()
    grid = sweep(text_store, {"r": [2, 4]}, tmp_path / "sweep", jobs=1, epochs=1, device="cpu")
    assert sorted(grid["r"].unique().tolist()) == [2, 4]


def test_the_commands_say_samples_and_the_encoder(text_store: Path, tmp_path: Path) -> None:
    shown = CliRunner().invoke(
        app,
        [
            *("fit", "--store", str(text_store), "--device", "cpu", "--epochs", "1"),
            *("--run", str(tmp_path / "run"), "--init-cls", "75", "--increment", "75"),
        ],
    )
    assert shown.exit_code == 0, shown.output
    assert "image" not in shown.output, shown.output  # nothing says images of a text store
    assert "samples of the split" in shown.output
    config = (tmp_path / "run" / "config.json").read_text()
    assert "all-MiniLM-L6-v2" in config or "sentence-transformers-all-MiniLM-L6-v2" in config
