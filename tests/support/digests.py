"""The figures tosca promises to be the same bits on any thread count, computed and digested: run
as `python digests.py OUT AREA...` in a subprocess (tests/tosca_heads/test_thread_independence.py
does, under OMP_NUM_THREADS, MKL_NUM_THREADS, TOSCA_LINALG_THREADS, TOSCA_STEP_THREADS,
TOSCA_OVERLAP_EVAL and instruction-set caps); it prints one JSON line {area: sha256 of its
arrays} and writes each area's arrays to OUT/<area>.npz, so that a test can also measure how far
two instruction sets' figures lie apart.

Areas: `statistics` (the routers' class statistics under every shrinkage), `ranpac` (RanPAC, its
ridge choice on both paths, its eigendecomposition fallback, and the joint probe), `field` (every
frozen-feature baseline of `method.baselines`, scores after each task, and ridge, KLDA and
RanDumb also in the other form of their ridge system), `engine` (a
whole fit: the compiled step's threads, the evaluation thread, every router's figures and the
task files), `estimators` (TOSCAClassifier and BaselineClassifier), `suite` (a small suite, then
each cell rerun alone from the manifest's command).
"""

from __future__ import annotations

import hashlib
import json
import shlex
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from support.stores import synthetic_store  # noqa: E402

Arrays = dict[str, np.ndarray]
M = 1100  # RanPAC's projection: three tiles (512, 512, 76)


def _tasks(seed: int, tasks: int, classes: int, rows: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Non-negative features (as a CNN's after ReLU) of `tasks` x `classes` Gaussian classes."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(tasks * classes), rows)
    centres = rng.gamma(2.0, 1.0, size=(tasks * classes, dim))
    x = np.abs(centres[labels] + rng.normal(size=(len(labels), dim)))
    return x.astype(np.float32), labels


def _correlated(seed: int, dim: int, per_class: int) -> tuple[np.ndarray, np.ndarray]:
    """Correlated features (a shrinkage strictly between 0 and 1), 6 classes."""
    rng = np.random.default_rng(seed)
    mixing = rng.normal(size=(dim, dim)) * np.linspace(0.1, 2.0, dim)
    labels = np.repeat(np.arange(6), per_class)
    x = rng.normal(size=(len(labels), dim)) @ mixing + rng.normal(size=(6, dim))[labels] * 3
    return x.astype(np.float32), labels


def statistics() -> Arrays:
    from tosca_heads.method.class_statistics import SHRINKAGES, ClassStatistics

    x, y = _correlated(1, 96, 200)
    out = {}
    for kind in SHRINKAGES:
        kept = ClassStatistics(96, shrinkage=kind)
        for task in range(3):
            rows = (y >= 2 * task) & (y < 2 * task + 2)
            kept.partial_fit(torch.from_numpy(x[rows]), y[rows], range(2 * task, 2 * task + 2))
            model = kept.model()
            out[f"{kind}/{task}/scatter"] = kept.scatter_.numpy()
            out[f"{kind}/{task}/lda_weight"] = model.lda_weight.numpy()
            out[f"{kind}/{task}/lda_bias"] = model.lda_bias.numpy()
            out[f"{kind}/{task}/posterior"] = model.lda_log_posterior(torch.from_numpy(x[:50])).numpy()
            out[f"{kind}/{task}/shrinkage"] = np.array([*kept.shrinkage_, kept.fourth_])
    return out


def ranpac() -> Arrays:
    from tosca_heads.method.baseline_estimators import JointProbe, RanPAC, ridge_solve

    # the first task has more rows than M (the ridge path's eigendecomposition) and than one row
    # block (two partial Gram sums); M = 1,100 is three tiles, the last one narrower
    x, y = _tasks(2, 3, 3, 700, 64)
    firsts = [np.flatnonzero(y < 3), *(np.flatnonzero(y == c)[:50] for c in range(3, 9))]
    tasks = [firsts[0], np.concatenate(firsts[1:4]), np.concatenate(firsts[4:])]
    model = RanPAC(projection_dim=M, seed=3)
    out = {}
    for t, rows in enumerate(tasks):
        model.partial_fit(x[rows], y[rows])
        out[f"{t}/weights"] = model.weights_.numpy()
        out[f"{t}/scores"] = model.decision_function(x[::7])
    out["gram"] = model.system_.gram.numpy()
    out["ridge"] = np.array([*model.ridges_, *model.ridge_losses_.values()])
    small = RanPAC(projection_dim=M, seed=4).partial_fit(x[tasks[1]], y[tasks[1]])  # the rows form
    out["rows/ridge"] = np.array([small.ridge_, *small.ridge_losses_.values()])
    out["rows/weights"] = small.weights_.numpy()
    # a Gram that is not positive definite with its ridge (as one whose ridge drowns in its
    # rounding): the Cholesky fails and an LU solve of the same system answers
    h = small.project(x[tasks[1]][:40])
    gram = h.T @ h - 2e-3 * torch.eye(M, dtype=torch.float64)
    fallback = ridge_solve(gram, h.T @ torch.ones(len(h), 2, dtype=torch.float64), 1e-3)
    out["fallback"] = fallback.numpy()
    probe = JointProbe(max_iter=30).fit(x[tasks[0]], y[tasks[0]])
    out["probe"] = probe.weight_.numpy()
    return out


FIELD_SIZES = {  # each new baseline's widths, small but wider than a tile where it tiles (three tiles)
    "klda": {"dim": M},
    "klda_ensemble": {"dim": 600, "members": 2},
    "randumb": {"dim": M},
    "acil": {"buffer_size": M},
    "gacl": {"buffer_size": M},
    "ds_al": {"buffer_size": M},
    "loranpac": {"embedding_dim": M, "rank": 900},
}


def field() -> Arrays:
    """Every baseline of `tosca_heads.method.baselines` (ridge, SLDA both ways, FeCAM, KLDA and its
    ensemble, RanDumb, ACIL, DS-AL, LoRanPAC), learned over three tasks: each one's scores after
    each task."""
    from tosca_heads.method.baseline_registry import BASELINES, arguments

    x, y = _tasks(5, 3, 3, 240, 64)
    out = {}
    runs = {
        name: {}
        for name in BASELINES
        if BASELINES[name].__module__.startswith("tosca_heads.method.baselines.")
    }
    runs["slda_exact"] = {"update": "exact"}
    for name, sizes in runs.items():
        method = "slda" if name == "slda_exact" else name
        model = BASELINES[method](**{**arguments(method, {}), **FIELD_SIZES.get(name, {}), **sizes})
        for task in range(3):
            rows = (y >= 3 * task) & (y < 3 * task + 3)
            model.partial_fit(x[rows], y[rows])
            out[f"{name}/{task}/scores"] = np.asarray(model.decision_function(x[::5]), dtype=np.float64)
    # the smaller forms' other side: ridge on fewer rows than its 64 features (the n x n kernel,
    # its validation path too), KLDA and RanDumb on more centred rows than D (the D x D scatter)
    wide = {"ridge": {}, "klda": {"dim": 500}, "randumb": {"dim": 500}}
    for name, sizes in wide.items():
        model = BASELINES[name](**{**arguments(name, {}), **sizes})
        for task in range(3):
            rows = np.flatnonzero((y >= 3 * task) & (y < 3 * task + 3))
            rows = rows[::40] if name == "ridge" else rows  # 18 rows a task, under 64 for ridge
            model.partial_fit(x[rows], y[rows])
            out[f"{name}/other_form/{task}/scores"] = np.asarray(
                model.decision_function(x[::5]), dtype=np.float64
            )
        if name == "ridge":
            model.tune(x[1::7], y[1::7])
            out["ridge/other_form/tuned"] = np.asarray(model.decision_function(x[::5]), dtype=np.float64)
    return out


def engine() -> Arrays:
    from safetensors.numpy import load_file

    from tosca_heads.method.protocol import StreamConfig, ValidationConfig
    from tosca_heads.method.recipe import TrainConfig
    from tosca_heads.running.group import fit_run

    with tempfile.TemporaryDirectory() as tmp:
        store = synthetic_store(Path(tmp) / "s.zarr", classes=6, per_class=40, dim=64, views=2, spread=1.0)
        train = TrainConfig(r=8, s=8, epochs=3, batch_size=16)
        run = Path(tmp) / "run"
        fit_run(store, StreamConfig(2, 2), train, None, run, validation=ValidationConfig(0.2))
        out = _figures(run / "metrics.json")
        for task_file in sorted(run.glob("task_*.safetensors")):
            out.update({f"{task_file.stem}/{k}": v for k, v in load_file(task_file).items()})
    return out


def estimators() -> Arrays:
    from tosca_heads.applied.estimators import BaselineClassifier, TOSCAClassifier

    x, y = _tasks(5, 3, 2, 60, 48)
    rng = np.random.default_rng(0)
    test = rng.permutation(len(y))[:90]
    tosca = TOSCAClassifier(preset="paper", init_cls=2, increment=2, epochs=2, r=8, s=8).fit(x, y)
    ranpac = BaselineClassifier("ranpac", {"projection_dim": M}, init_cls=2, increment=2).fit(x, y)
    probe = BaselineClassifier("joint_probe", init_cls=2, increment=2).fit(x, y)
    return {
        "tosca/proba": tosca.predict_proba(x[test]),
        "tosca/predict": tosca.predict(x[test]),
        "ranpac/weights": ranpac.estimator_.weights_.numpy(),
        "ranpac/predict": ranpac.predict(x[test]),
        "probe/weight": probe.estimator_.weight_.numpy(),
    }


def suite() -> Arrays:
    from cli import app
    from tosca_heads.records.suite import read_manifest
    from tosca_heads.studies.suite.spec import parse_suite
    from tosca_heads.studies.suite.suite_runner import run_suite

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = synthetic_store(Path(tmp) / "s.zarr", classes=6, per_class=30, dim=48, spread=2.0)
        spec = parse_suite(
            {
                "seeds": [0],
                "val_fraction": 0.2,
                "tosca": {"flags": {"epochs": 2, "batch_size": 16, "r": 8, "s": 8}},
                "baselines": {"methods": ["ranpac", "joint_probe"], "ranpac_projection_dim": M},
                "stores": [{"name": "s", "path": str(store.path), "init_cls": 2, "increment": 2}],
            },
            Path(tmp),
        )
        done = run_suite(spec, Path(tmp) / "suite", device="cpu", jobs=1)
        table = done.tables.table
        out["table"] = table.select_dtypes("number").to_numpy(dtype=np.float64)
        for n, cell in enumerate(read_manifest(Path(tmp) / "suite")["cells"]):
            command = shlex.split(cell["command"])[1:]
            folder = Path(tmp) / "alone" / str(n)
            flag = "--run" if cell["kind"] == "tosca" else "--out"
            command[command.index(flag) + 1] = str(folder)
            try:
                app(command, standalone_mode=False)
            except SystemExit as stop:  # typer's own exit on success
                assert not stop.code, stop.code
            made = (
                folder / "metrics.json"
                if cell["kind"] == "tosca"
                else folder / cell["method"] / "metrics.json"
            )
            out.update({f"{cell['key']}/{k}": v for k, v in _figures(made).items()})
    return out


def _figures(metrics: Path) -> Arrays:
    """Every number a metrics.json holds of its results (each router's and split's blocks)."""
    data = json.loads(metrics.read_text())
    found: Arrays = {}

    def walk(value: object, key: str) -> None:
        if isinstance(value, dict):
            for name, inner in value.items():
                walk(inner, f"{key}/{name}")
        elif isinstance(value, list):
            for i, inner in enumerate(value):
                walk(inner, f"{key}/{i}")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            found[key] = np.array([value], dtype=np.float64)

    walk({"routers": data["routers"], "validation": data.get("validation")}, "")
    return found


AREAS: dict[str, Callable[[], Arrays]] = {
    "statistics": statistics,
    "ranpac": ranpac,
    "field": field,
    "engine": engine,
    "estimators": estimators,
    "suite": suite,
}


def digest(arrays: Arrays) -> str:
    total = hashlib.sha256()
    for key in sorted(arrays):
        value = np.ascontiguousarray(arrays[key])
        total.update(key.encode() + str(value.dtype).encode() + str(value.shape).encode() + value.tobytes())
    return total.hexdigest()


def main(out: str, *areas: str) -> None:
    digests = {}
    for area in areas:
        arrays = AREAS[area]()
        np.savez(Path(out) / f"{area}.npz", **{k.replace("/", "|"): v for k, v in arrays.items()})
        digests[area] = digest(arrays)
    print(json.dumps(digests))


if __name__ == "__main__":
    main(*sys.argv[1:])
