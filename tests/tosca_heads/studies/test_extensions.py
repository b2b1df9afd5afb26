"""Each extension in one place (issue 37), done from outside the package: a baseline whose
parameter is declared on its class gets its command-line option, suite key, API keyword, time
estimate and table label from that one declaration, and a bad value is one line; a per-router
metric registered once reaches results.csv/.parquet, the summaries, the console tables, the
comparison, a suite's table and the trackers (MLflow, TensorBoard)."""

from __future__ import annotations

import csv
import importlib.util
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support.stores import synthetic_store
from typer.testing import CliRunner

import tosca_heads
from cli import app
from featcache.store import FeatureStore
from tosca_foundation.errors import UserError, UserValueError
from tosca_heads.method.baseline_registry import BASELINES, Param, described, label, register_baseline
from tosca_heads.method.metrics import METRICS, register_metric
from tosca_heads.method.protocol import StreamConfig
from tosca_heads.running import cost_models as est
from tosca_heads.studies.suite import parse_suite, run_suite
from tosca_heads.studies.suite.cells import cell_params, command, plan_cells
from tosca_heads.trackers import LOGGERS

RUNNER = CliRunner()
SPLIT = ["--init-cls", "2", "--increment", "2"]
SWEPT = {"init_cls": 2, "increment": 2, "epochs": 1, "batch_size": 8, "jobs": 1, "device": "cpu"}
QUICK = ["--epochs", "1", "--batch-size", "8", "--device", "cpu"]


@dataclass(frozen=True)
class OddFromOne:
    """A plug-in's own rule (beside `Interval` and `Options`): its check and its words in one place."""

    def holds(self, k: int) -> bool:
        return k >= 1 and k % 2 == 1

    def __str__(self) -> str:
        return "an odd number of at least 1"


class PoweredMeans:
    """Nearest class mean of the features raised to an odd power k (a plug-in of the tests)."""

    incremental = True
    deterministic = True
    label = "powered means"
    params = (
        Param(
            "k",
            int,
            "The odd power the features are raised to.",
            valid=OddFromOne(),
            said="k = {}",
        ),
    )

    def __init__(self, k: int = 1, device: str = "cpu"):
        self.k = k
        self.device = device

    @staticmethod
    def work(shape: est.TaskShape, k: int = 1, **_: object) -> tuple[float, str]:
        return float(k * sum(shape.train) * shape.dim), "float32"

    def _powered(self, features: object) -> np.ndarray:
        return np.asarray(features, dtype=np.float64) ** self.k

    def partial_fit(self, features: object, labels: object) -> PoweredMeans:
        x, y = self._powered(features), np.asarray(labels)
        means = getattr(self, "means_", np.zeros((0, x.shape[1])))
        grown = np.zeros((max(len(means), int(y.max()) + 1), x.shape[1]))
        grown[: len(means)] = means
        for c in np.unique(y):
            grown[c] = x[y == c].mean(0)
        self.means_ = grown
        return self

    def predict(self, features: object) -> np.ndarray:
        x = self._powered(features)
        return ((x[:, None, :] - self.means_[None]) ** 2).sum(-1).argmin(1)

    def num_parameters(self) -> int:
        return int(self.means_.size)


@pytest.fixture
def powered() -> Iterator[str]:
    """The plug-in, registered as code outside the package registers it, and removed after."""
    register_baseline("powered_means")(PoweredMeans)
    try:
        yield "powered_means"
    finally:
        del BASELINES["powered_means"]


@pytest.fixture
def store(tmp_path: Path) -> FeatureStore:
    return synthetic_store(tmp_path / "s.zarr", classes=4, per_class=12, test_per_class=6, dim=8)


def _baselines(store: FeatureStore, out: Path, *extra: str) -> tuple[int, str]:
    args = ["baselines", "--store", str(store.path), "--no-tosca", "--methods", "powered_means", *SPLIT]
    result = RUNNER.invoke(app, [*args, "--device", "cpu", "--out", str(out), *extra])
    return result.exit_code, result.output


def _baselines_of(store: FeatureStore, out: Path, run: Path) -> tuple[int, str]:
    args = ["baselines", "--store", str(store.path), "--run", str(run), "--methods", "simplecil"]
    result = RUNNER.invoke(app, [*args, "--device", "cpu", "--out", str(out)])
    return result.exit_code, result.output


def test_its_option_and_api_keyword_come_from_its_declaration(
    powered: str, store: FeatureStore, tmp_path: Path
) -> None:
    code, output = _baselines(store, tmp_path / "cli", "--powered-means-k", "3")
    assert code == 0, output
    written = json.loads((tmp_path / "cli" / "powered_means" / "metrics.json").read_text())
    assert written["params"] == {"k": 3}
    frame = tosca_heads.baselines(
        store, [powered], init_cls=2, increment=2, powered_means_k=3, with_tosca=False, out=tmp_path / "api"
    )
    again = json.loads((tmp_path / "api" / "powered_means" / "metrics.json").read_text())
    assert again["params"] == {"k": 3} and again["routers"] == written["routers"]
    assert frame["A_last"].iloc[0] == pytest.approx(written["routers"]["none"]["A_last"])
    # the default, where nothing is given: the declaration's
    code, output = _baselines(store, tmp_path / "default")
    assert code == 0, output
    assert json.loads((tmp_path / "default" / "powered_means" / "metrics.json").read_text())["params"] == {
        "k": 1
    }


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (["--powered-means-k", "2"], "--powered-means-k must be an odd number of at least 1, got 2"),
        (["--powered-means-k", "three"], "--powered-means-k must be an integer, got 'three'"),
        (["--powered-means-kk", "3"], "unknown --powered-means-kk (did you mean '--powered-means-k'?)"),
    ],
    ids=["its check", "its type", "a misspelling"],
)
def test_a_bad_value_is_one_line(
    powered: str, store: FeatureStore, tmp_path: Path, given: list[str], said: str
) -> None:
    code, output = _baselines(store, tmp_path / "out", *given)
    assert code == 2 and output.strip().startswith(f"error: {said}"), output
    assert len(output.strip().splitlines()) == 1 and not (tmp_path / "out").exists()
    with pytest.raises(
        UserValueError, match=r"^powered_means_k must be an odd number"
    ):  # in Python, its keyword
        tosca_heads.baselines(store, [powered], init_cls=2, increment=2, powered_means_k=4, with_tosca=False)


def test_its_suite_key_estimate_and_label_come_from_its_declaration(powered: str, tmp_path: Path) -> None:
    toml = {
        "seeds": [0, 1],
        "tosca": {"routers": ["lda"]},
        "baselines": {"methods": [powered], "powered_means_k": 5},
        "stores": [{"name": "A", "path": "a.zarr", "init_cls": 2, "increment": 2}],
    }
    spec = parse_suite(toml, tmp_path)
    (cell,) = [c for c in plan_cells(spec) if c.kind == "baseline"]  # deterministic: one cell, not two
    assert cell_params(spec, cell) == {"k": 5}
    said = command(spec, cell, tmp_path / "cell", tmp_path / "a.zarr", StreamConfig(2, 2, 1993))
    assert "--methods powered_means" in said and said.endswith("--powered-means-k 5")
    shape = est.TaskShape((24, 24), (12, 12), 8, 4)
    rate = est.flops_per_second("float32")
    assert est.baseline_seconds(powered, shape, {"k": 5}) == pytest.approx(5 * 48 * 8 / rate)
    assert (
        label(powered) == "powered means"
        and described(powered, {"powered_means_k": 5}) == "powered means (k = 5)"
    )
    with pytest.raises(
        UserError, match=r"baselines\.powered_means_k must be an odd number of at least 1, got 4"
    ):
        parse_suite({**toml, "baselines": {"methods": [powered], "powered_means_k": 4}}, tmp_path)


@pytest.mark.heavy
def test_its_label_heads_its_row_of_a_suite_table(powered: str, tmp_path: Path) -> None:
    synthetic_store(tmp_path / "a.zarr", classes=4, per_class=12, test_per_class=6, dim=8)
    toml = {
        "seeds": [0],
        "tosca": {"routers": ["lda"], "flags": {"epochs": 1, "batch_size": 8}},
        "baselines": {"methods": [powered], "powered_means_k": 3},
        "stores": [{"name": "A", "path": "a.zarr", "init_cls": 2, "increment": 2}],
    }
    result = run_suite(parse_suite(toml, tmp_path), tmp_path / "out", device="cpu")
    assert not result.missing
    assert "| powered means |" in (tmp_path / "out" / "table.md").read_text()
    (cell,) = [s for s in result.cells if s.cell.kind == "baseline"]
    assert json.loads((cell.folder / "metrics.json").read_text())["params"] == {"k": 3}


# ------------------------------------------------------------------------------------------ a metric


def worst_task(curve: list[float], matrix: list[list[float]]) -> float:
    """The lowest accuracy on one task's classes after the last task (a plug-in's metric)."""
    return float(min(matrix[-1]))


@pytest.fixture
def metric() -> Iterator[str]:
    """A per-router metric, registered once as code outside the package registers it."""
    register_metric("worst_task", label="worst task")(worst_task)
    try:
        yield "worst_task"
    finally:
        del METRICS["worst_task"]


# a lab's plug-in, one file as docs/contributing.md shows: a per-router metric, and a tracker that
# writes every figure it is sent as a line of the file named after --log recorded=
PLUGIN = """
from tosca_heads import Logger, register_logger, register_metric


@register_metric("worst_task", label="worst task", summary="the lowest per-task accuracy at the end")
def worst_task(curve, matrix):
    return float(min(matrix[-1]))


@register_logger
class Recorded(Logger):
    name = "recorded"
    summary = "every figure as a line of the file WHERE"

    def start(self, name, parent):
        return name

    def params(self, run, params):
        pass

    def metrics(self, run, metrics):
        with open(self.where, "a") as out:
            out.writelines(f"{m.key} {m.step} {m.value!r}\\n" for m in metrics)

    def artifacts(self, run, files):
        pass

    def end(self, run, ok):
        pass
"""


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The plug-in, loaded by the command line ($TOSCA_PLUGINS), removed after: its metric's name."""
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "lab_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path / "lab"))
    monkeypatch.setenv("TOSCA_PLUGINS", "lab_plugin")
    try:
        yield "worst_task"
    finally:
        for registry, name in ((METRICS, "worst_task"), (LOGGERS, "recorded")):
            if name in registry:
                del registry[name]
        sys.modules.pop("lab_plugin", None)


def _row_of(output: str, name: str) -> str:
    """The line of a console table whose first cell is `name`."""
    (line,) = [line for line in output.splitlines() if _cells(line)[:1] == [name]]
    return line


def _cells(line: str) -> list[str]:
    """A console table line's words, its borders left out."""
    return line.replace("│", " ").replace("┃", " ").replace("|", " ").split()


def test_a_metric_registered_by_a_plugin_reaches_the_results_the_tables_the_console_and_trackers(
    plugin: str, store: FeatureStore, tmp_path: Path
) -> None:
    metric, events = plugin, tmp_path / "events.txt"
    fit = ["fit", "--store", str(store.path), "--run", str(tmp_path / "run"), *SPLIT, *QUICK]
    result = RUNNER.invoke(app, [*fit, "--log", f"recorded={events}"])
    assert result.exit_code == 0, result.output
    written = json.loads((tmp_path / "run" / "metrics.json").read_text())["routers"]
    for block in written.values():  # computed from the block's own accuracy matrix
        assert block[metric] == pytest.approx(min(block["accuracy_matrix"][-1]))
    lda = f"{100 * written['lda'][metric]:.2f}"
    assert "worst task" in result.output and lda in _row_of(result.output, "lda")  # fit's console table
    logged = [line.split() for line in events.read_text().splitlines()]  # the tracker's events
    (value,) = [float(v) for key, _, v in logged if key == f"{metric}/test/lda"]
    assert value == pytest.approx(written["lda"][metric])

    listed = RUNNER.invoke(app, ["routers", str(tmp_path / "run")])  # `tosca routers`
    assert listed.exit_code == 0, listed.output
    assert "worst task" in listed.output and lda in _row_of(listed.output, "lda")
    rows = json.loads(RUNNER.invoke(app, ["routers", str(tmp_path / "run"), "--json"]).output)
    # in % as every figure of the rows shown in % (the built-ins' too)
    assert {r["router"]: r[metric] for r in rows} == {name: 100 * b[metric] for name, b in written.items()}

    sweep = ["sweep", "--store", str(store.path), "--r", "2,4", "--out", str(tmp_path / "sweep"), *SPLIT]
    swept = RUNNER.invoke(app, [*sweep, *QUICK, "--jobs", "1"])
    assert swept.exit_code == 0, swept.output
    results = pd.read_csv(tmp_path / "sweep" / "results.csv")
    assert results[metric].between(0, 1).all() and results[metric].notna().all()
    if importlib.util.find_spec("pyarrow") is not None:
        parquet = pd.read_parquet(tmp_path / "sweep" / "results.parquet")
        assert parquet[metric].tolist() == results[metric].tolist()
    summary = pd.read_csv(tmp_path / "sweep" / "summary.csv")
    assert {f"{metric}_lda_mean", f"{metric}_lda_std"} <= set(summary)
    assert "worst task (entropy)" in swept.output  # the sweep's console table, for the ranked router
    for r, mean in zip(summary["r"], summary[f"{metric}_entropy_mean"], strict=True):
        rows = [
            line
            for line in swept.output.splitlines()
            if [c for c in _cells(line)[:2] if c not in "*="][:1] == [str(r)]
        ]
        assert any(f"{100 * mean:.2f}" in line for line in rows), rows

    code, output = _baselines_of(store, tmp_path / "base", tmp_path / "run")
    assert code == 0, output
    comparison = pd.read_csv(tmp_path / "base" / "comparison.csv")
    assert comparison[metric].notna().all()
    assert "| worst task |" in (tmp_path / "base" / "comparison.md").read_text()
    assert "worst task" in output


def test_a_metric_registered_since_reaches_every_point_of_a_resumed_sweep(
    store: FeatureStore, tmp_path: Path
) -> None:
    """Figures are computed from each point's kept answers when the view is drawn (issue 54): a
    metric registered after a point was computed has its value there too; unregistered again, the
    view is drawn without its columns (results.csv is never read back, so an edit changes nothing)."""
    results = tmp_path / "sweep" / "results.csv"
    tosca_heads.sweep(store, {"r": [2]}, out=tmp_path / "sweep", **SWEPT)
    register_metric("worst_task", label="worst task")(worst_task)
    try:
        tosca_heads.sweep(store, {"r": [2, 4]}, out=tmp_path / "sweep", **SWEPT)
        grown = pd.read_csv(results)
        assert grown["worst_task"].between(0, 1).all() and set(grown["r"]) == {2, 4}
        assert (grown["worst_task"] <= grown["A_last"] + 1e-12).all()  # no task below the lowest one
        lines = list(csv.reader(results.open()))
        lines[-1][lines[0].index("worst_task")] = "7.5"  # edited: the view is drawn again over it
        with results.open("w", newline="") as fh:
            csv.writer(fh).writerows(lines)
        tosca_heads.sweep(store, {"r": [2, 4]}, out=tmp_path / "sweep", **SWEPT)
        assert pd.read_csv(results)["worst_task"].tolist() == grown["worst_task"].tolist()
    finally:
        del METRICS["worst_task"]
    tosca_heads.sweep(store, {"r": [2]}, out=tmp_path / "sweep", **SWEPT)
    assert "worst_task" not in pd.read_csv(results)


@pytest.mark.heavy
def test_a_registered_metric_reaches_mlflow_tensorboard_and_a_suite_table(
    metric: str, tmp_path: Path
) -> None:
    mlflow_tracking = pytest.importorskip("mlflow.tracking")
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    synthetic_store(tmp_path / "a.zarr", classes=4, per_class=12, test_per_class=6, dim=8)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run = tosca_heads.fit(
        tmp_path / "a.zarr", run=tmp_path / "run", log=[f"mlflow={uri}", f"tensorboard={tmp_path / 'tb'}"],
        init_cls=2, increment=2, epochs=1, batch_size=8,
    )  # fmt: skip
    value = run.metrics()["routers"]["lda"][metric]
    client = mlflow_tracking.MlflowClient(tracking_uri=uri)
    (logged,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert logged.data.metrics[f"{metric}/test/lda"] == pytest.approx(value)
    board = event_accumulator.EventAccumulator(str(tmp_path / "tb" / "run"))
    board.Reload()
    assert board.Scalars(f"{metric}/test/lda")[-1].value == pytest.approx(value, rel=1e-6)

    toml = {
        "seeds": [0],
        "tosca": {"routers": ["lda"], "flags": {"epochs": 1, "batch_size": 8}},
        "baselines": {"methods": ["simplecil"]},
        "stores": [{"name": "A", "path": "a.zarr", "init_cls": 2, "increment": 2}],
    }
    done = run_suite(parse_suite(toml, tmp_path), tmp_path / "suite", device="cpu")
    assert not done.missing
    assert "A worst task" in (tmp_path / "suite" / "table.md").read_text().splitlines()[4]
    entries = pd.read_csv(tmp_path / "suite" / "table.csv")
    mine = entries[entries["metric"] == metric]
    assert len(mine) == 2 and not mine["bold"].any() and mine["mean"].between(0, 1).all()


# two plug-in metrics that declare an interval and are, in disguise, built-in figures: the mean of
# the curve (A_bar, higher is better) and forgetting (lower is better). Computed once per bootstrap
# replicate through their plain function, they must get the very intervals, bold entries and
# verdicts the built-ins get through their vectorised forms (declaring the built-ins' weights, they
# get their floors too: issue 47, point 5).
DISGUISED = {"mean_again": "A_bar", "forgetting_again": "forgetting"}


@pytest.fixture
def disguised() -> Iterator[None]:
    from tosca_heads.method.metrics import a_bar_weights, forgetting, forgetting_weights

    register_metric("mean_again", label="mean again", interval="bootstrap", weights=a_bar_weights)(
        lambda curve, matrix: float(np.mean(curve))
    )
    register_metric(
        "forgetting_again",
        label="forgetting again",
        low=-1.0,
        interval="bootstrap",
        better="lower",
        weights=forgetting_weights,
    )(lambda curve, matrix: forgetting(matrix))
    try:
        yield
    finally:
        for name in DISGUISED:
            del METRICS[name]


def test_a_plugin_metric_with_an_interval_gets_it_as_a_built_in_does(
    disguised: None, store: FeatureStore, tmp_path: Path
) -> None:
    fit = ["fit", "--store", str(store.path), "--run", str(tmp_path / "run"), *SPLIT, *QUICK]
    result = RUNNER.invoke(app, fit)
    assert result.exit_code == 0, result.output
    written = json.loads((tmp_path / "run" / "metrics.json").read_text())["routers"]
    for block in written.values():
        for mine, built_in in DISGUISED.items():
            assert block[mine] == pytest.approx(block[built_in], abs=1e-12)
            assert block["intervals"][mine] == block["intervals"][built_in]  # the same draws, the same bounds
            assert block["standard_errors"][mine] == block["standard_errors"][built_in]
    # fit's console table and `tosca routers`: the cell with its interval, as the built-in's
    for output in (result.output, RUNNER.invoke(app, ["routers", str(tmp_path / "run")]).output):
        cells = " ".join(_cells(_row_of(output, "lda")))
        low, high = written["lda"]["intervals"]["mean_again"]
        said = f"{100 * written['lda']['mean_again']:.2f} [{100 * low:.1f}, {100 * high:.1f}]"
        assert cells.count(said) >= 2, (said, cells)  # A_bar's cell and its own
    assert (
        "mean again and" in result.output or "mean again: " in result.output
    )  # the intervals' note names it

    code, output = _baselines_of(store, tmp_path / "base", tmp_path / "run")
    assert code == 0, output
    comparison = pd.read_csv(tmp_path / "base" / "comparison.csv")
    for mine, built_in in DISGUISED.items():
        for end in ("low", "high"):
            assert comparison[f"{mine}_{end}"].tolist() == comparison[f"{built_in}_{end}"].tolist()

    sweep = ["sweep", "--store", str(store.path), "--r", "2,4", "--out", str(tmp_path / "sweep"), *SPLIT]
    assert RUNNER.invoke(app, [*sweep, *QUICK, "--jobs", "1"]).exit_code == 0
    results = pd.read_csv(tmp_path / "sweep" / "results.csv")
    for mine, built_in in DISGUISED.items():
        assert results[f"{mine}_low"].notna().all()
        assert results[f"{mine}_low"].tolist() == results[f"{built_in}_low"].tolist()


@pytest.mark.heavy
def test_a_plugin_metric_with_an_interval_is_bold_in_a_suite_as_a_built_in_is(
    disguised: None, store: FeatureStore, tmp_path: Path
) -> None:
    toml = {
        "seeds": [0, 1],
        "tosca": {"routers": ["entropy", "lda"], "flags": {"epochs": 1, "batch_size": 8}},
        "baselines": {"methods": ["simplecil", "ranpac"], "ranpac_projection_dim": 64},
        "stores": [{"name": "A", "path": str(store.path), "init_cls": 2, "increment": 2}],
    }
    done = run_suite(parse_suite(toml, tmp_path), tmp_path / "suite", device="cpu")
    assert not done.missing
    entries = pd.read_csv(tmp_path / "suite" / "table.csv", keep_default_na=False, na_values=[""])
    for mine, built_in in DISGUISED.items():
        ours = entries[entries["metric"] == mine].reset_index(drop=True)
        theirs = entries[entries["metric"] == built_in].reset_index(drop=True)
        assert len(ours) == len(theirs) > 0
        for column in ("ci_low", "ci_high", "bold", "bold_verdict", "bold_low", "bold_high"):
            assert ours[column].equals(theirs[column]), column  # (NaN where the other's is NaN)
        assert (
            ours["bold_verdict"] == "the best"
        ).sum() == 1  # decided by the paired test, as the built-in's
    header = (tmp_path / "suite" / "table.md").read_text()
    assert "A mean again" in header and "A forgetting again" in header
