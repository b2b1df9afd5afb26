"""No stored figure is believed that its kept answers give (issue 47, point 1; issue 54): a run and a
baseline are cells whose figures are computed from their answers when read, so an A_last, A_bar,
forgetting, interval, standard error, image count or routing confusion edited in their
metrics.json or confusion.json views changes nothing shown, and an edited answer is one line,
never a number; an edited figure in a sweep's results.csv is one line naming the file and the
figure."""

from __future__ import annotations

import csv
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from support.stores import synthetic_store

import tosca_heads
from featcache import open_store
from tosca_foundation.errors import UserError
from tosca_heads.applied.predict import default_router
from tosca_heads.records.baselines_folder import baseline_result
from tosca_heads.records.derived import curves_of
from tosca_heads.records.run_cell import confusion_of, read_run
from tosca_heads.records.sweep_points import read_points
from tosca_heads.studies.report import routers_report
from tosca_heads.studies.suite.cells import Cell, read_result

SPLIT = {"init_cls": 2, "increment": 2, "epochs": 1, "batch_size": 8}


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A store, a finished run with a validation split, its baselines and a sweep (read-only)."""
    root = tmp_path_factory.mktemp("derived")
    store = synthetic_store(root / "s.zarr", classes=4, per_class=12, test_per_class=6)
    tosca_heads.fit(store, run=root / "run", val_fraction=0.25, **SPLIT)
    tosca_heads.baselines(store, ["simplecil"], out=root / "baselines", init_cls=2, increment=2)
    tosca_heads.sweep(store, {"r": [2, 4]}, root / "sweep", jobs=1, **SPLIT)
    return {
        "run": root / "run",
        "baselines": root / "baselines",
        "sweep": root / "sweep",
        "store": store.path,
    }


def _copy(source: Path, tmp_path: Path) -> Path:
    target = tmp_path / source.name
    shutil.copytree(source, target)
    return target


def _no_number(message: str) -> None:
    """The refusal shows no figure: no decimal number at all (a path or key may hold digits)."""
    assert not re.search(r"\d\.\d", message), message


def _nudged(value: float) -> float:
    """Another valid fraction, near enough to pass every bounds check."""
    return value - 0.0625 if value > 0.5 else value + 0.0625


def _widened(block: dict, metric: str) -> None:
    """Another interval of `metric`, still within its bounds and around its figure."""
    low, high = block["intervals"][metric]
    block["intervals"][metric] = [low - 0.0625, high] if low >= 0.0625 else [low, min(1.0, high + 0.0625)]
    assert block["intervals"][metric] != [low, high]


EDITS: dict[str, tuple[Callable[[dict], None], str]] = {
    "A_last": (lambda b: b.update(A_last=_nudged(b["A_last"])), "A_last of entropy"),
    "A_bar": (lambda b: b.update(A_bar=_nudged(b["A_bar"])), "A_bar of entropy"),
    "forgetting": (lambda b: b.update(forgetting=b["forgetting"] + 0.0625), "forgetting of entropy"),
    "A_t": (lambda b: b["A_t"].__setitem__(0, _nudged(b["A_t"][0])), "A_t after task 0 of entropy"),
    "matrix": (
        lambda b: b["accuracy_matrix"][1].__setitem__(0, _nudged(b["accuracy_matrix"][1][0])),
        "the accuracy matrix of entropy",
    ),
    "A_last interval": (lambda b: _widened(b, "A_last"), "the interval of A_last of entropy"),
    "A_bar interval": (lambda b: _widened(b, "A_bar"), "the interval of A_bar of entropy"),
    "forgetting interval": (lambda b: _widened(b, "forgetting"), "the interval of forgetting of entropy"),
    "standard error": (
        lambda b: b["standard_errors"].update(A_bar=b["standard_errors"]["A_bar"] + 0.01),
        "the standard error of A_bar of entropy",
    ),
    "images": (lambda b: b.update(images=b["images"] + 1), "the image count of entropy"),
    "routing accuracy": (
        lambda b: b.update(routing_accuracy=_nudged(b["routing_accuracy"])),
        "routing_accuracy of entropy",  # not the last of its routing curve
    ),
    "routing accuracy and curve": (
        lambda b: b.update(
            routing_accuracy=_nudged(b["routing_accuracy"]),
            routing_accuracy_t=[*b["routing_accuracy_t"][:-1], _nudged(b["routing_accuracy"])],
        ),
        "the routing curve of entropy",  # worked out from the kept routes
    ),
    "routing interval": (
        lambda b: _widened(b, "routing_accuracy"),
        "the interval of routing_accuracy of entropy",
    ),
}


def test_a_run_as_written_reads_and_its_figures_follow_from_its_answers(made: dict[str, Path]) -> None:
    run = read_run(made["run"])
    block, answers = run.metrics["validation"]["entropy"], run.answers["validation"]["entropy"]
    curve, matrix = curves_of(answers)
    assert curve == pytest.approx(block["A_t"], abs=1e-9)
    assert matrix[-1] == pytest.approx(block["accuracy_matrix"][-1], abs=1e-9)
    assert block["A_last"] == pytest.approx(answers.right() / answers.images, abs=1e-12)
    matrix = confusion_of(answers)  # the routing confusion, counted from the route kept
    assert sum(map(sum, matrix)) == answers.images
    assert block["routing_accuracy"] == pytest.approx(sum(matrix[t][t] for t in range(2)) / answers.images)


def _shown(folder: Path) -> tuple[object, ...]:
    """What the readers show of a run: its figures, `tosca routers`' rows and misrouting, the
    router predict takes by default."""
    report = routers_report(folder)
    return read_run(folder).metrics, report.rows, report.misrouting, default_router(read_run(folder).metrics)


@pytest.mark.parametrize("split", ["routers", "validation"])
@pytest.mark.parametrize("edit", sorted(EDITS))
def test_an_edited_figure_in_a_run_s_view_changes_nothing_shown(
    made: dict[str, Path], tmp_path: Path, split: str, edit: str
) -> None:
    """metrics.json is a view written for people, never read back: no reader (the figures, `tosca
    routers`, predict's router) shows an edit there."""
    run = _copy(made["run"], tmp_path)
    shown = _shown(run)
    metrics = json.loads((run / "metrics.json").read_text())
    change, _ = EDITS[edit]
    change(metrics[split]["entropy"])
    metrics["finished_tasks"] = 7  # a finished_tasks edited: no reader reads one (issue 54)
    (run / "metrics.json").write_text(json.dumps(metrics))
    assert _shown(run) == shown


def test_an_edited_validation_a_last_never_picks_predicts_router(
    made: dict[str, Path], tmp_path: Path
) -> None:
    """The probe: the router `predict` takes by default is the best on validation, computed from
    the answers; an edit of the view that would make another best if believed changes nothing."""
    run = _copy(made["run"], tmp_path)
    metrics = json.loads((run / "metrics.json").read_text())
    chosen, _ = default_router(metrics)
    other = next(n for n in ("ncm", "lda", "energy") if n != chosen)
    metrics["validation"][other]["A_last"], metrics["validation"][chosen]["A_last"] = 1.0, 0.0
    (run / "metrics.json").write_text(json.dumps(metrics))
    assert default_router(metrics)[0] != chosen  # the edit would change the choice if believed
    assert default_router(read_run(run).metrics)[0] == chosen
    features = open_store(made["store"]).features("test")
    assert tosca_heads.predict(run, features).router == chosen


def test_an_edited_routing_confusion_view_changes_nothing_shown(
    made: dict[str, Path], tmp_path: Path
) -> None:
    """confusion.json is a view: the misrouting of `tosca routers` is counted from the routes kept."""
    run = _copy(made["run"], tmp_path)
    shown = _shown(run)
    confusion = json.loads((run / "confusion.json").read_text())
    assert confusion["test"] == read_run(run).confusion["test"]  # the view says what is read
    matrix = confusion["test"]["entropy"]
    matrix[0][0], matrix[0][1] = matrix[0][0] - 1, matrix[0][1] + 1
    (run / "confusion.json").write_text(json.dumps(confusion))
    assert _shown(run) == shown


def test_routes_dropped_from_the_answers_are_one_line(made: dict[str, Path], tmp_path: Path) -> None:
    """The routes are answers: an outcomes file without them (a tensor removed after the run
    finished) is one line naming it, never figures without routes."""
    run = _copy(made["run"], tmp_path)
    tensors = load_file(run / "outcomes.safetensors")
    with safe_open(run / "outcomes.safetensors", "pt") as fh:
        meta = fh.metadata()
    del tensors["test/routed/entropy"]
    save_file(tensors, run / "outcomes.safetensors", meta)
    for reader in (read_run, routers_report):
        with pytest.raises(
            UserError, match=re.escape("outcomes.safetensors is not the file that was written")
        ) as caught:
            reader(run)
        _no_number(str(caught.value))


def test_a_baseline_cell_holds_no_figure_to_edit(made: dict[str, Path], tmp_path: Path) -> None:
    """A baseline's figures are computed from its kept answers when read: its metrics.json is a
    view, never read back, so an A_last edited there changes nothing shown; answers edited are one
    line, never a number."""
    folder = _copy(made["baselines"], tmp_path) / "simplecil"
    kept = baseline_result(folder)
    right = load_file(folder / "outcomes.safetensors")["test/right/simplecil"]
    assert kept.metrics["A_t"] == pytest.approx(curves_of(baseline_result(folder).outcomes["test"])[0])
    assert kept.metrics["A_last"] == kept.metrics["A_t"][-1] and 0 < kept.metrics["A_last"] <= 1
    assert right.shape[0] == len(kept.metrics["A_t"])  # one row of answers per finished task
    view = json.loads((folder / "metrics.json").read_text())
    view["routers"]["none"]["A_last"] = _nudged(view["routers"]["none"]["A_last"])
    (folder / "metrics.json").write_text(json.dumps(view))
    assert baseline_result(folder).metrics == kept.metrics  # the view is never read
    tensors = load_file(folder / "outcomes.safetensors")
    with safe_open(folder / "outcomes.safetensors", "pt") as fh:
        meta = fh.metadata()
    tensors["test/right/simplecil"] = 255 - tensors["test/right/simplecil"]
    save_file(tensors, folder / "outcomes.safetensors", meta)
    with pytest.raises(
        UserError, match=re.escape("outcomes.safetensors is not the file that was written")
    ) as caught:
        baseline_result(folder)
    _no_number(str(caught.value))


def test_an_edited_suite_cell_is_one_line(made: dict[str, Path], tmp_path: Path) -> None:
    """A suite's table is built from its cells' folders (`cells.read_result`): a TOSCA cell's view
    edited changes nothing, its answers edited are refused there, never a changed table."""
    run = _copy(made["run"], tmp_path)
    cell = Cell(store="s", kind="tosca", seed=0, order_seed=0)
    read = read_result(cell, run)
    metrics = json.loads((run / "metrics.json").read_text())
    metrics["routers"]["entropy"]["A_bar"] = _nudged(metrics["routers"]["entropy"]["A_bar"])
    (run / "metrics.json").write_text(json.dumps(metrics))
    assert read_result(cell, run)["routers"] == read["routers"]
    tensors = load_file(run / "outcomes.safetensors")
    with safe_open(run / "outcomes.safetensors", "pt") as fh:
        meta = fh.metadata()
    tensors["test/right/entropy"] = 255 - tensors["test/right/entropy"]
    save_file(tensors, run / "outcomes.safetensors", meta)
    with pytest.raises(UserError, match=re.escape("outcomes.safetensors is not the file that was written")):
        read_result(cell, run)


@pytest.mark.parametrize(
    "column", ["A_last", "A_bar", "forgetting", "A_last_low", "forgetting_high", "images"]
)
def test_an_edited_sweep_figure_changes_nothing_it_says(
    made: dict[str, Path], tmp_path: Path, column: str
) -> None:
    """results.csv is a view of the points (issue 54): a figure edited there is never read back;
    the rerun writes the figures the answers give again, and chooses as before."""
    out = _copy(made["sweep"], tmp_path)
    path = out / "results.csv"
    written = path.read_bytes()
    rows = list(csv.DictReader(path.open(newline="")))
    row = next(r for r in rows if r["split"] == "validation" and r["router"] == "entropy")
    value = float(row[column])
    row[column] = (
        str(value + 1) if column == "images" else repr(_nudged(value) if value > 0.1 else value + 0.05)
    )
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    chosen = json.loads((out / "sweep.json").read_text())["chosen"]
    store = json.loads((out / "sweep.json").read_text())["store"]
    tosca_heads.sweep(store, {"r": [2, 4]}, out, jobs=1, **SPLIT)
    assert path.read_bytes() == written
    assert json.loads((out / "sweep.json").read_text())["chosen"] == chosen


def test_a_sweep_as_written_reads(made: dict[str, Path]) -> None:
    points = read_points(made["sweep"])
    assert len(points) == 2 and all(set(p.answers) == {"test", "validation"} for p in points)
