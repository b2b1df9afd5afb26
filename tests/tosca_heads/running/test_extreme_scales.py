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
