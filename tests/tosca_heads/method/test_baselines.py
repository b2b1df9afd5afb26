"""Baselines: SimpleCIL, RanPAC's ridge algebra, the joint probe, and the comparison they make."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from support.stores import synthetic_store
from typer.testing import CliRunner

from cli import app
from featcache.store import FeatureStore
from tosca_heads.method.baseline_estimators import RanPAC, SimpleCIL, ridge_path, ridge_solve
from tosca_heads.method.protocol import StreamConfig
from tosca_heads.method.recipe import TrainConfig
from tosca_heads.requests.plan import FitPlan
from tosca_heads.routers import ROUTERS
from tosca_heads.running.baseline_runs import run_baseline
from tosca_heads.running.group import fit_run

RUNNER = CliRunner()


def test_simplecil_is_perfect_on_well_separated_classes(tmp_path: Path) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=8, spread=0.05)
    result = run_baseline("simplecil", FitPlan.build(store, StreamConfig(2, 2)))
    assert result.metrics["A_t"] == [1.0, 1.0, 1.0, 1.0]
    assert result.metrics["forgetting"] == 0.0 and result.metrics["routing_accuracy"] is None


def test_simplecil_prototypes_are_class_means() -> None:
    x = np.array([[1, 0], [3, 0], [0, 2], [0, 4]], dtype=np.float32)
    model = SimpleCIL().partial_fit(x[:2], np.array([0, 0])).partial_fit(x[2:], np.array([1, 1]))
    np.testing.assert_allclose(model.prototypes_, [[2, 0], [0, 3]])
    assert model.predict(np.array([[5, 1], [1, 5]], dtype=np.float32)).tolist() == [0, 1]


def _task_data(seed: int, n: int, dim: int, classes: range) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(classes.start, classes.stop, n)
    return rng.normal(size=(n, dim)).astype(np.float32) + labels[:, None], labels


def test_ranpac_accumulated_ridge_equals_direct_least_squares() -> None:
    """Gram matrices summed over two tasks give the ridge solution over all rows at once, and that
    solution is the least-squares solve of [H; sqrt(l) I] W = [Y; 0]."""
    (x0, y0), (x1, y1) = _task_data(0, 60, 12, range(0, 3)), _task_data(1, 50, 12, range(3, 5))
    model = RanPAC(projection_dim=40, ridge=0.3, seed=7).partial_fit(x0, y0).partial_fit(x1, y1)
    h = model.project(np.concatenate([x0, x1]))
    y = torch.nn.functional.one_hot(torch.from_numpy(np.concatenate([y0, y1])), 5).double()
    augmented_h = torch.cat([h, (0.3**0.5) * torch.eye(40, dtype=torch.float64)])
    augmented_y = torch.cat([y, torch.zeros(40, 5, dtype=torch.float64)])
    direct = torch.linalg.lstsq(augmented_h, augmented_y, driver="gelsd").solution
    torch.testing.assert_close(model.weights_, direct, rtol=1e-8, atol=1e-9)
    assert model.predict(x1).shape == (50,)


@pytest.mark.parametrize("rows", [30, 90])  # fewer rows than columns (SVD path), more (eigh path)
def test_ridge_path_equals_one_solve_per_ridge(rows: int) -> None:
    gen = torch.Generator().manual_seed(0)
    h = torch.relu(torch.randn(rows, 50, generator=gen, dtype=torch.float64))
    y = torch.randn(rows, 4, generator=gen, dtype=torch.float64)
    for ridge, w in ridge_path(h, y, (1e-3, 1.0, 1e3)).items():
        torch.testing.assert_close(w, ridge_solve(h.T @ h, h.T @ y, ridge), rtol=1e-6, atol=1e-8)


def test_comparison_cli_puts_tosca_modes_beside_the_baselines(tmp_path: Path) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=6, views=2, spread=1.0)
    stream = ["--init-cls", "2", "--increment", "2"]
    fit = RUNNER.invoke(
        app,
        [
            "fit",
            "--store",
            str(store.path),
            *stream,
            "--epochs",
            "2",
            "--device",
            "cpu",
            "--run",
            str(tmp_path / "run"),
        ],
    )
    assert fit.exit_code == 0, fit.output
    out = tmp_path / "cmp"
    result = RUNNER.invoke(
        app,
        [
            "baselines",
            "--store",
            str(store.path),
            *stream,
            "--run",
            str(tmp_path / "run"),
            "--ranpac-projection-dim",
            "200",
            "--device",
            "cpu",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out / "comparison.csv")
    computed = [n for n in ROUTERS if not ROUTERS[n].on_request]  # an on-request router: where named
    routers = len(computed)
    assert list(frame["method"]) == ["tosca"] * routers + ["simplecil", "ranpac", "joint_probe"]
    assert list(frame["routing"][:routers]) == computed
    tosca = json.loads((tmp_path / "run" / "metrics.json").read_text())
    oracle = computed.index("oracle")
    assert frame["A_last"][oracle] == pytest.approx(tosca["routers"]["oracle"]["A_last"])
    ranpac = json.loads((out / "ranpac" / "metrics.json").read_text())
    assert set(ranpac["routers"]["none"]) >= set(tosca["routers"]["oracle"])  # the same metrics block
    assert ranpac["routers"]["none"]["A_t"] == pytest.approx(json.loads(frame["A_t"][routers + 1]))
    assert {"comparison.md", "comparison.png"} <= {p.name for p in out.iterdir()}
    other_stream = RUNNER.invoke(
        app, ["baselines", "--store", str(store.path), "--init-cls", "4", "--run", str(tmp_path / "run")]
    )
    assert other_stream.exit_code == 2 and "was fitted on split" in other_stream.output
    assert "the baselines asked for split B4 Inc" in other_stream.output
    bad = RUNNER.invoke(app, ["baselines", "--store", str(store.path), "--methods", "simplecil,lwf"])
    assert bad.exit_code == 2 and "unknown --methods 'lwf'" in bad.output


def test_default_tosca_row_is_the_paper_preset_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    store = synthetic_store(tmp_path / "s.zarr", classes=4, spread=0.3)
    result = RUNNER.invoke(
        app,
        [
            "baselines",
            "--store",
            str(store.path),
            "--init-cls",
            "2",
            "--increment",
            "2",
            "--methods",
            "simplecil",
            "--device",
            "cpu",
        ],
    )
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(next((tmp_path / "runs").glob("baselines-*")) / "comparison.csv")
    paper = fit_run(store, StreamConfig(2, 2), TrainConfig(), None, tmp_path / "again")
    assert frame["A_last"][0] == pytest.approx(paper.metrics()["routers"]["entropy"]["A_last"])


@pytest.mark.realdata
@pytest.mark.parametrize("dataset", ["eurosat", "cifar10"])
def test_baselines_on_real_stores(dataset: str, request: pytest.FixtureRequest) -> None:
    from support.real_data import nearest_class_mean_accuracy

    store = FeatureStore.open(request.getfixturevalue(f"{dataset}_store"))
    stream = StreamConfig(2, 2)
    params = {
        "simplecil": {},
        "ranpac": {"projection_dim": 3000},
        "joint_probe": {},
    }  # M = 3000 keeps CI quick
    results = {name: run_baseline(name, FitPlan.build(store, stream), **kw) for name, kw in params.items()}
    last = {name: r.metrics["A_last"] for name, r in results.items()}
    print(f"\n{dataset} baselines A_last (EfficientNet-Lite0, 30/class, B0 Inc2): {last}")
    # the product's SimpleCIL agrees with the independent NCM check at the last task (all classes)
    assert last["simplecil"] == pytest.approx(nearest_class_mean_accuracy(store.path))
    assert last["joint_probe"] > 3 * 0.1  # ten classes: far above chance
    assert last["ranpac"] > 3 * 0.1


def test_baselines_of_a_run_with_a_validation_split_take_its_split(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's own-images flow (issue 35): `fit --val-fraction 0.2`, then `baselines --run RUN`
    with no split flags compares on the run's split and validation split, and `routers RUN` shows
    them; a flag that differs from the run's is one line in words (no Python repr)."""
    monkeypatch.chdir(tmp_path)  # the baselines folder goes under runs/ of the working folder
    store = synthetic_store(tmp_path / "s.zarr", classes=4, per_class=20, spread=1.0)
    run = tmp_path / "runs" / "run"
    split = ["--val-fraction", "0.2", "--init-cls", "2", "--epochs", "2", "--device", "cpu"]
    fitted = RUNNER.invoke(app, ["fit", "--store", str(store.path), "--run", str(run), *split])
    assert fitted.exit_code == 0, fitted.output
    common = ["baselines", "--store", str(store.path), "--run", str(run), "--methods", "simplecil"]
    done = RUNNER.invoke(app, [*common, "--device", "cpu"])
    assert done.exit_code == 0, done.output
    assert "validation: 16 training images held out (4 of 20 in each class, 20%; seed 0)" in done.output
    folder = tmp_path / "runs" / "baselines-synthetic-none-B0Inc2-val0.2-seed0"
    config = json.loads((run / "asked.json").read_text())
    simplecil = json.loads((folder / "simplecil" / "asked.json").read_text())
    assert simplecil["validation_split"] == config["validation"] and simplecil["stream"] == config["stream"]
    frame = pd.read_csv(folder / "comparison.csv")
    assert frame["val_A_last"].notna().all()  # TOSCA's routers and SimpleCIL, on the same held-out images
    shown = RUNNER.invoke(app, ["routers", str(run), "--json"])
    assert shown.exit_code == 0 and "simplecil" in {r["router"] for r in json.loads(shown.output)}

    other = RUNNER.invoke(app, [*common, "--val-fraction", "0"])
    assert other.exit_code == 2
    line = other.output.strip().splitlines()[-1]
    assert line.endswith(
        "was fitted with 20% of each class held out for validation (seed 0), the baselines asked for no "
        "validation split; leave out --val-fraction and --val-seed to take the run's"
    )
    other = RUNNER.invoke(app, [*common, "--order-seed", "7"])
    assert (
        other.exit_code == 2
        and "was fitted on split B0 Inc2, class order seed 1993, the baselines asked" in (other.output)
    )
    assert "{" not in other.output and "'init_cls'" not in other.output


def test_baselines_json_is_data_only(tmp_path: Path) -> None:
    """`tosca baselines --json` carries data or leaves a field out, never a Python repr (each row's
    per-image answers are its folder's outcomes.safetensors, not a string)."""
    store = synthetic_store(tmp_path / "s.zarr", classes=4)
    args = ["baselines", "--store", str(store.path), "--no-tosca", "--methods", "simplecil,ridge"]
    result = RUNNER.invoke(
        app, [*args, "--init-cls", "2", "--increment", "2", "--out", str(tmp_path / "b"), "--json"]
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["method"] for r in rows] == ["simplecil", "ridge"]
    assert all("outcomes" not in r for r in rows)
    assert (
        rows[1]["metrics"]["chosen_by"].startswith("RanPAC's rule") and rows[1]["metrics"]["knob"] == "ridge"
    )

    def strings(value: object) -> list[str]:
        if isinstance(value, dict):
            return [s for v in value.values() for s in strings(v)]
        if isinstance(value, list):
            return [s for v in value for s in strings(v)]
        return [value] if isinstance(value, str) else []

    reprs = [s for s in strings(rows) if "(" in s and s.split("(")[0].isidentifier() and s.endswith(")")]
    assert not reprs, reprs[:3]
