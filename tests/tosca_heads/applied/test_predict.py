"""`tosca predict`: a trained run on new images gives what evaluation gives on the same images'
cached features; backbones or weights that cannot be had are refused with one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support.cells import edit_asked
from support.images import TINY_VIT
from typer.testing import CliRunner

from cli import app
from featcache.extraction import ExtractRequest, plan_extraction, run_extraction
from featcache.store import FeatureStore
from tosca_heads.applied.predict import RunPredictor

RUNNER = CliRunner()


def _store(tmp_path: Path, image_tree: Path) -> FeatureStore:
    request = ExtractRequest(
        model=TINY_VIT,
        dataset="imagefolder",
        data_root=image_tree,
        cache_dir=tmp_path / "c",
        store=tmp_path / "s.zarr",
        random_init=True,
        workers=0,
        batch_size=4,
        chunk_size=4,
        device="cpu",
    )
    return FeatureStore.open(run_extraction(plan_extraction(request)).store)


@pytest.mark.heavy
def test_predict_on_images_equals_the_run_on_their_cached_features(
    tmp_path: Path, image_tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOSCA_PROGRESS_EVERY", "0")  # a line at every batch, however quick
    store = _store(tmp_path, image_tree)
    run = tmp_path / "run"
    fit = RUNNER.invoke(
        app,
        [
            "fit",
            "--store",
            str(store.path),
            "--run",
            str(run),
            "--init-cls",
            "1",
            "--increment",
            "1",
            "--epochs",
            "3",
            "--r",
            "8",
            "--s",
            "8",
            "--batch-size",
            "4",
            "--device",
            "cpu",
        ],
    )
    assert fit.exit_code == 0, fit.output
    for router in ("entropy", "lda"):
        result = RUNNER.invoke(
            app,
            ["predict", str(run), str(image_tree / "test"), "--router", router, "--json", "--device", "cpu"],
        )
        assert result.exit_code == 0, result.output
        rows = {Path(r["image"]).resolve(): r for r in json.loads(result.stdout)}  # progress: stderr
        assert len(rows) == 6 and {r["router"] for r in rows.values()} == {router}
        names = store.identity["dataset"]["class_names"]
        predictor = RunPredictor(run, 3, class_names=names).load()
        expected = predictor.predict(store.features("test"), router)
        for i, sample_id in enumerate(store.ids("test")):
            row = rows[(image_tree / sample_id).resolve()]
            assert row["class"] == expected.class_names[i] == names[int(expected.classes[i])]
            assert row["class_id"] == int(expected.classes[i]) and row["task"] == int(expected.tasks[i])
            np.testing.assert_allclose(row["probability"], expected.probabilities[i], rtol=1e-4)
    default = RUNNER.invoke(
        app, ["predict", str(run), str(image_tree / "test" / "class_0"), "--device", "cpu"]
    )
    assert default.exit_code == 0 and "router" in default.output
    # not on a terminal, predict's embedding speaks in plain lines on stderr, and ends with one
    assert "embed: 2/2 (100%) img" in default.stderr and "done in" in default.stderr, default.stderr
    oracle = RUNNER.invoke(app, ["predict", str(run), str(image_tree / "test"), "--router", "oracle"])
    assert oracle.exit_code == 2 and "pick an honest router" in oracle.output


def test_predict_refuses_weights_it_cannot_have(tmp_path: Path, image_tree: Path) -> None:
    store = _store(tmp_path, image_tree)
    run = tmp_path / "run"
    cmd = ["fit", "--store", str(store.path), "--run", str(run), "--init-cls", "1", "--increment", "1"]
    assert RUNNER.invoke(app, [*cmd, "--epochs", "1", "--device", "cpu"]).exit_code == 0
    identity = store.identity
    identity["backbone"]["weights_source"] = "file"  # as if made from a weights file that is gone
    writable = FeatureStore.open(store.path, mode="r+")
    writable.group.attrs["identity"] = identity
    writable.group.attrs["backbone_weights_file"] = str(tmp_path / "gone.safetensors")
    from tosca_foundation.fingerprints import fingerprint

    writable.group.attrs["fingerprint"] = fingerprint(identity)
    edit_asked(run, store_fingerprint=fingerprint(identity))
    result = RUNNER.invoke(app, ["predict", str(run), str(image_tree / "test"), "--device", "cpu"])
    assert result.exit_code == 2, result.output
    assert "gone.safetensors, which is not there any more" in result.output
    assert len(result.output.strip().splitlines()) == 1
    missing = RUNNER.invoke(app, ["predict", str(run), str(tmp_path / "nothing.png")])
    assert missing.exit_code == 2 and "no such image or folder" in missing.output


@pytest.mark.heavy
def test_predict_with_a_scenario_run_equals_its_kept_model_on_the_cached_features(
    tmp_path: Path, image_tree: Path
) -> None:
    import tosca_heads

    store = _store(tmp_path, image_tree)
    run = tmp_path / "run"
    args = ["fit", "--store", str(store.path), "--run", str(run), "--scenario", "blurry", "--epochs", "2"]
    args += ["--set", "tasks=2", "--set", "eval_period=2", "--batch-size", "4", "--r", "8", "--s", "8"]
    fit = RUNNER.invoke(app, args)
    assert fit.exit_code == 0, fit.output
    result = RUNNER.invoke(app, ["predict", str(run), str(image_tree / "test"), "--json", "--router", "ncm"])
    assert result.exit_code == 0, result.output
    rows = {Path(r["image"]).resolve(): r for r in json.loads(result.stdout)}
    expected = tosca_heads.predict(run, store.features("test"), router="ncm", device="cpu")
    names = store.identity["dataset"]["class_names"]
    for i, sample_id in enumerate(store.ids("test")):
        row = rows[(image_tree / sample_id).resolve()]
        assert row["class_id"] == int(expected.classes[i]) and row["class"] == names[row["class_id"]]
    default = RUNNER.invoke(app, ["predict", str(run), str(image_tree / "test" / "class_0")])
    assert default.exit_code == 0 and "TEST split" in default.output, default.output
