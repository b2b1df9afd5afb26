"""A solve that fails (issue 57, point 2: features x1e8 in ACIL and DS-AL, a gamma of 1e-300) is
one line naming the baseline and the task, exit 2, never a LinAlgError traceback and no figure:
`baseline_runs.solvable`, the edge around every baseline's fit. A baseline whose solve fails as
numpy's or torch's does stands in for the solver (the cure of the solve is the solver's)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from support.stores import synthetic_store
from typer.testing import CliRunner

from cli import app
from tosca_heads.method.baseline_registry import BASELINES, register_baseline

RUNNER = CliRunner()


@pytest.fixture(params=["numpy", "torch"])
def failing_solve(request: pytest.FixtureRequest) -> Iterator[str]:
    """A registered baseline whose second task's solve fails as numpy's or torch's Cholesky does."""
    name = f"test_failing_solve_{request.param}"

    @register_baseline(name)
    class FailingSolve:
        incremental = True

        def __init__(self, device: str = "cpu") -> None:
            self.device, self.tasks_ = device, 0

        def partial_fit(self, features: torch.Tensor, labels: np.ndarray) -> FailingSolve:
            self.tasks_ += 1
            if self.tasks_ == 2 and request.param == "numpy":
                np.linalg.cholesky(-np.eye(3))
            if self.tasks_ == 2:
                torch.linalg.cholesky(-torch.eye(3, dtype=torch.float64))
            self.first_ = int(np.asarray(labels).min())
            return self

        def predict(self, features: torch.Tensor) -> np.ndarray:
            return np.full(len(features), self.first_)

        def num_parameters(self) -> int:
            return 1

    yield name
    del BASELINES[name]


def test_a_solve_that_fails_is_one_line(tmp_path: Path, failing_solve: str) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=4)
    out = tmp_path / "out"
    result = RUNNER.invoke(
        app,
        [
            "baselines",
            "--store",
            str(store.path),
            "--out",
            str(out),
            "--no-tosca",
            "--device",
            "cpu",
            "--init-cls",
            "2",
            "--increment",
            "2",
            "--methods",
            failing_solve,
        ],
    )
    assert result.exit_code == 2, result.output
    line = result.output.strip().splitlines()[-1]
    assert line.startswith(f"error: {failing_solve} cannot solve its linear system at task 1 (")
    assert "raise its regularisation" in line and "Traceback" not in result.output
    assert not (out / failing_solve / "metrics.json").exists()


def scaled_store(path: Path, scale: float) -> Path:
    """`synthetic_store`'s features times `scale`, as a store holds them (float32)."""
    store = synthetic_store(path, classes=4, per_class=8, test_per_class=4, dim=16)
    for split in ("train", "test"):
        for chunk in range(store.layout(split).n_chunks):
            rows = store.layout(split).chunk_slice(chunk)
            x = np.asarray(store.features(split, np.arange(rows.start, rows.stop)), dtype=np.float64)
            store.write_chunk(split, chunk, (x * scale).astype(np.float32), None)
    return store.path


@pytest.mark.parametrize(
    "scale,flags,said",
    [
        (1e8, ["--methods", "acil", "--acil-buffer-size", "64"], "ACIL's gamma (--acil-gamma) = 0.1"),
        (1e30, ["--methods", "gacl", "--gacl-buffer-size", "64"], "GACL's gamma (--gacl-gamma) = 100.0"),
        # a gamma of 1e-300 at x1 (ACIL, DS-AL's two, GACL): rows of tests/cli/test_bad_input.py
    ],
)
def test_a_regularisation_float64_cannot_solve_with_is_one_line(
    tmp_path: Path, scale: float, flags: list[str], said: str
) -> None:
    """Issue 57, point 2, through the command: features x1e8 in ACIL, x1e30 in GACL are
    one line naming the flag and the least value that solves, exit 2, no figure (they printed 16.67
    or a Cholesky traceback)."""
    out = tmp_path / "out"
    store = scaled_store(tmp_path / "s.zarr", scale)
    args = ["baselines", "--store", str(store), "--out", str(out), "--no-tosca", "--device", "cpu"]
    result = RUNNER.invoke(app, [*args, "--init-cls", "2", "--increment", "2", *flags])
    assert result.exit_code == 2, result.output
    line = result.output.strip().splitlines()[-1]
    assert line.startswith(f"error: {said} is too small beside the features' scale"), line
    assert "Traceback" not in result.output and "A_last" not in result.output
    assert not out.exists()  # the folder claimed new is given back (`records.claim`)


@pytest.mark.parametrize("scale", [1e30, 1e-30])
def test_kldas_absolute_sigma_far_from_the_features_scale_is_one_line(tmp_path: Path, scale: float) -> None:
    """Issue 57, point 2: KLDA's sigma is absolute (the authors'), so at x1e30 its default printed
    16.67 (RBF noise) and at x1e-30 every row's features were one vector: refused in one line that
    names the flag and the range that fits these features, the claimed folder given back."""
    out = tmp_path / "out"
    store = scaled_store(tmp_path / "s.zarr", scale)
    args = ["baselines", "--store", str(store), "--out", str(out), "--no-tosca", "--device", "cpu"]
    flags = ["--init-cls", "2", "--increment", "2", "--methods", "klda", "--klda-dim", "64"]
    result = RUNNER.invoke(app, [*args, *flags])
    assert result.exit_code == 2, result.output
    line = result.output.strip().splitlines()[-1]
    assert line.startswith("error: KLDA's sigma (--klda-sigma) = 0.0001 is far from the features' scale"), (
        line
    )
    assert "A_last" not in result.output and not out.exists()


def test_kldas_sigma_in_reach_gives_the_same_answers_at_any_scale(tmp_path: Path) -> None:
    """The same kernel at x1e30, x1 and x1e-30 (sigma / scale**2, as the refusal suggests): the
    same predictions (the random phases x W are the same up to float32 rounding)."""
    from featcache.store import FeatureStore, read_split
    from tosca_heads.method.baselines.klda import KLDA
    from tosca_heads.method.scale import mean_squared_distance

    answers = []
    for scale in (1e30, 1.0, 1e-30):
        store = FeatureStore.open(scaled_store(tmp_path / f"s{scale:g}.zarr", scale))
        x, y = read_split(store, "train")[0], store.labels("train")
        sigma = 1.0 / mean_squared_distance(x)  # typical rows at kernel exp(-1)
        model = KLDA(dim=256, sigma=sigma).partial_fit(x, y)
        answers.append(model.predict(read_split(store, "test")[0]))
        accuracy = float((answers[-1] == store.labels("test")).mean())
        assert accuracy > 0.9, (scale, accuracy)
    np.testing.assert_array_equal(answers[0], answers[1])
    np.testing.assert_array_equal(answers[2], answers[1])


@pytest.mark.parametrize("scale", [1e30, 1e20, 1e-30])
def test_tosca_at_a_scale_its_float32_cosine_cannot_hold_is_one_line(tmp_path: Path, scale: float) -> None:
    """TOSCA's modules and cosine classifier are float32 at the features' own scale: at x1e20 and
    beyond the squared norms overflow, at x1e-30 they fall below the normaliser's floor, and every
    answer tied (a table of 0.00 with a note under it, exit 0). Now one line naming the reach,
    before any training; x1e8 is still within it and fits."""
    store = scaled_store(tmp_path / "s.zarr", scale)
    run = tmp_path / "run"
    args = ["fit", "--store", str(store), "--run", str(run), "--epochs", "1", "--device", "cpu"]
    result = RUNNER.invoke(app, [*args, "--init-cls", "2", "--increment", "2"])
    assert result.exit_code == 2, result.output
    line = result.output.strip().splitlines()[-1]
    assert (
        line.startswith("error: the test features reach ") and "outside [1e-12, 2.5e+17]" in line
    )  # dim 16, line
    assert "A_last" not in result.output and "Traceback" not in result.output
    assert not (run / "task_0.safetensors").exists()


def test_tosca_within_its_reach_fits_at_x1e8(tmp_path: Path) -> None:
    store = scaled_store(tmp_path / "s.zarr", 1e8)
    args = ["fit", "--store", str(store), "--run", str(tmp_path / "run"), "--epochs", "1", "--device", "cpu"]
    result = RUNNER.invoke(app, [*args, "--init-cls", "2", "--increment", "2"])
    assert result.exit_code == 0, result.output
    assert "A_last" in result.output and "tied" not in result.output


def test_the_cosine_reach_is_checked_on_every_rows_largest_entry() -> None:
    from tosca_heads.method.scale import cosine_reach, outside_cosine_reach

    low, high = cosine_reach(100)
    assert (low, high) == (1e-12, 1e17)
    x = torch.ones(4, 100)
    assert outside_cosine_reach(x) is None
    x[2] = 0  # a zero row is no scale: its answer is a tie, said as one
    assert outside_cosine_reach(x) is None
    x[3, 7] = 2e17
    assert outside_cosine_reach(x) == pytest.approx(2e17)
    x[1] = 1e-13
    assert outside_cosine_reach(x) == pytest.approx(1e-13)  # the first row outside
