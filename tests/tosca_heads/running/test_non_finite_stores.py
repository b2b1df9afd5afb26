"""A store holding NaN or inf whose checksums vouch for them (written by a writer without the
finite check) is refused by every reader of features, as `cache verify` refuses it (issue 57,
point 4): one check of a chunk's values (`featcache.store.verify.value_fault`), never a figure
computed on it (simplecil, klda and randumb printed A_last 16.67, six others a LinAlgError)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support.stores import synthetic_store
from typer.testing import CliRunner

from cli import app
from featcache.store import FeatureStore, chunk_checksum, read_split
from featcache.store.verify import StoreDamaged

RUNNER = CliRunner()
SPLIT = ["--init-cls", "2", "--increment", "2", "--device", "cpu"]


def _poisoned(path: Path, split: str, value: float) -> FeatureStore:
    """A 4-class store with one `value` in `split`, its chunk's checksum recomputed to vouch for it."""
    store = synthetic_store(path, classes=4)
    features = np.asarray(store.group[f"{split}/features"][:])
    row = 21
    features[row, 3] = value
    store.group[f"{split}/features"][:] = features
    chunk = row // store.chunk_size
    store.group[f"{split}/checksums"][chunk] = chunk_checksum(
        features[store.layout(split).chunk_slice(chunk)]
    )
    return FeatureStore.open(path)


COMMANDS = {
    "fit": lambda s, out: ["fit", "--store", s, "--run", out, "--epochs", "1", *SPLIT],
    "baselines": lambda s, out: [
        "baselines",
        "--store",
        s,
        "--out",
        out,
        "--no-tosca",
        "--methods",
        "all",  # every one of the 13 reads through the same checked reader
        *SPLIT,
    ],
    "sweep": lambda s, out: ["sweep", "--store", s, "--out", out, "--r", "2", "--epochs", "1", *SPLIT],
    # the scenario runs read the store whole: they computed on NaN (simplecil A_last 0.00, exit 0)
    "scenario": lambda s, out: ["scenario", "--store", s, "--methods", "simplecil"],
}


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("split", ["train", "test"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_refuses_a_store_with_non_finite_features(
    tmp_path: Path, command: str, split: str, value: float
) -> None:
    store = _poisoned(tmp_path / "s.zarr", split, value)
    out = tmp_path / "out"
    result = RUNNER.invoke(app, COMMANDS[command](str(store.path), str(out)))
    assert result.exit_code == 2, result.output
    assert f"{split} chunk 1: NaN or inf in a chunk marked done" in result.output
    assert "Traceback" not in result.output and "A_last" not in result.output
    assert not list(out.rglob("metrics.json")) and not list(out.rglob("*.csv"))


def test_read_split_refuses_it_and_cache_verify_agrees(tmp_path: Path) -> None:
    store = _poisoned(tmp_path / "s.zarr", "test", np.inf)
    with pytest.raises(StoreDamaged, match="test chunk 1: NaN or inf in a chunk marked done"):
        read_split(store, "test")
    result = RUNNER.invoke(app, ["cache", "verify", str(store.path)])
    assert result.exit_code != 0 and "test chunk 1: NaN or inf in a chunk marked done" in result.output
