"""Long jobs speak, plans tell, names are found (issue 29): progress lines off a terminal at a
steady interval with rate and the time taken, never a guess of the time left (a fake clock; a
real extraction paused half-way by the crash harness), switches shown as switches, `tosca --version`, `tosca list`, "did you mean"."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.crash_harness import PauseAt, start
from support.images import FAST_CNN, make_image_tree
from typer.testing import CliRunner

from cli import app
from tosca_cli.progress import Board


@pytest.fixture(autouse=True)
def _environment_restored() -> Iterator[None]:
    """`tosca --progress ...` sets its settings in the process's environment (as it must, for the
    workers it starts); a test that runs it in-process must not leave them to the next test."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_at_a_steady_interval_with_rate_and_time_taken() -> None:
    clock, stream = FakeClock(), io.StringIO()
    board = Board("lines", interval=10, stream=stream, clock=clock)
    task = board.task("extract train", 1000, "img")
    assert stream.getvalue() == ""  # nothing to say yet: a job that fails now is one line, its error
    clock.now += 4
    board.update(task, advance=200)  # 4 s after the start: no line yet
    assert stream.getvalue() == ""
    clock.now += 6
    board.update(task, advance=300)  # 10 s: 500 done at 50 img/s
    assert (
        stream.getvalue().splitlines()[-1] == "extract train: 500/1,000 (50%) img, 50.0 img/s, 0:10 elapsed"
    )
    clock.now += 10
    board.update(task, advance=500)
    assert (
        stream.getvalue().splitlines()[-1]
        == "extract train: 1,000/1,000 (100%) img, 50.0 img/s, done in 0:20"
    )


def test_units_said_at_once_and_no_line_guesses_the_time_left() -> None:
    """Issue 54, point 5: the "time left" lines were 0.02 to 2.2 of the time really left
    (docs/benchmarks.md "What earns its lines"): gone. A sweep's first line comes as it starts,
    and every line says the time taken since then; a resumed job's rate counts only its own units."""
    clock, stream = FakeClock(), io.StringIO()
    board = Board("lines", interval=10, stream=stream, clock=clock)
    task = board.task("sweep", 4, "points", completed=1, at_once=True)  # one point from an earlier run
    assert stream.getvalue().splitlines() == ["sweep: 1/4 (25%) points, 0:00 elapsed"]
    clock.now += 30
    board._tick_once()
    clock.now += 30
    board.update(task, completed=2)  # 60 s for this run's first point, start-up included
    clock.now += 40
    board.update(task, completed=3)
    clock.now += 40
    board.update(task, completed=4)
    assert stream.getvalue().splitlines() == [
        "sweep: 1/4 (25%) points, 0:00 elapsed",
        "sweep: 1/4 (25%) points, 0:30 elapsed",
        "sweep: 2/4 (50%) points, 60.0 s each, 1:00 elapsed",
        "sweep: 3/4 (75%) points, 50.0 s each, 1:40 elapsed",
        "sweep: 4/4 (100%) points, 46.7 s each, done in 2:20",
    ]
    assert not any("left" in line or "plan" in line for line in stream.getvalue().splitlines())


def test_a_baselines_progress_counts_from_its_start_as_its_table_does() -> None:
    """Issue 57, point 14: KLDA's progress said "done in 0:23" where its table said 66.3 s: the
    piece of work began at its first task's end (KLDA's first task, its sigma chosen on the
    validation split, is most of its time). It begins when the baseline starts (`task` -1), so its
    "done in" is the wall time its seconds count."""
    from tosca_cli.views import baseline_progress

    clock, stream = FakeClock(), io.StringIO()
    board = Board("lines", interval=0, stream=stream, clock=clock)
    on_task = baseline_progress(board)
    on_task("klda", -1, 3)  # started
    clock.now += 43
    on_task("klda", 0, 3)  # the first task, its knob tuned: 43 s
    clock.now += 11
    on_task("klda", 1, 3)
    clock.now += 12
    on_task("klda", 2, 3)
    assert stream.getvalue().splitlines()[-1] == "baseline klda: 3/3 (100%) tasks, 22.0 s each, done in 1:06"


def test_off_says_nothing() -> None:
    stream = io.StringIO()
    board = Board("off", interval=0, stream=stream)
    board.update(board.task("x", 3), advance=3)
    assert stream.getvalue() == ""


@pytest.mark.heavy  # 4-5 s: an extraction through the command line
def test_a_redirected_extraction_prints_progress_while_it_runs(tmp_path: Path) -> None:
    tree = make_image_tree(tmp_path / "imgs", classes=2, train=4, test=2)
    args = [
        *("--progress", "lines", "--progress-every", "0", "extract", "--model", FAST_CNN),
        *("--dataset", "imagefolder", "--data-root", str(tree), "--store", str(tmp_path / "s.zarr")),
        *("--cache-dir", str(tmp_path / "cache"), "--random-init", "--chunk-size", "2"),
        *("--batch-size", "2", "--workers", "0", "--device", "cpu"),
    ]
    # paused before the third train chunk is marked done: the run is half-way
    child = start(args, tmp_path / "child", PauseAt(r"\.zarr/train/done/c/", 3, resumable=True))
    child.wait_paused()
    during = child.text("stderr")
    assert "extract train: 2/8 (25%) img" in during and "extract train: 4/8 (50%) img" in during
    assert "img/s, " in during and " elapsed" in during and " left" not in during  # rate and time, mid-run
    child.resume()
    assert child.finish() == 0
    after = child.text("stderr")
    assert "extract train: 8/8 (100%) img" in after and "done in" in after and "extract test: 4/4" in after


def test_switches_are_shown_as_switches_and_refuse_a_value() -> None:
    shown = CliRunner().invoke(app, ["cache", "verify", "--help"], terminal_width=200).output
    line = next(x for x in shown.splitlines() if "--fix" in x)
    assert "<bool>" not in line and "<bool>" not in shown
    assert "<bool>" not in CliRunner().invoke(app, ["suite", "--help"], terminal_width=200).output


def test_version_and_list(tmp_path: Path) -> None:
    version = CliRunner().invoke(app, ["--version"])
    assert version.exit_code == 0 and version.output.startswith("tosca 0.1.0, python ")
    listed = json.loads(CliRunner().invoke(app, ["list", "--json"]).output)
    assert set(listed) == {"backbones", "datasets", "routers", "baselines", "trackers", "decoders", "presets"}
    routers = {r["name"]: r["what"] for r in listed["routers"]}
    assert {r["name"]: r["aliases"] for r in listed["routers"]}["entropy"] == "sample"
    assert {"mlflow", "tensorboard"} <= {t["name"] for t in listed["trackers"]}
    assert [d["name"] for d in listed["decoders"]] == ["pil", "torch"]
    assert routers["entropy"].startswith("honest") and routers["oracle"].startswith("reference")
    assert {"simplecil", "ranpac", "joint_probe"} <= {b["name"] for b in listed["baselines"]}
    assert {"local", "paper"} <= {p["name"] for p in listed["presets"]}
    assert "effnet_lite0" in {b["name"] for b in listed["backbones"]}


def test_a_plugin_router_is_listed_as_a_plugin() -> None:
    from tosca_heads.routers import ROUTERS
    from tosca_heads.routers.routing_rules import Router, register_router

    class Psychic(Router):
        name = "psychic_test"
        summary = "guesses"

    Psychic.__module__ = "my_lab.routers"
    register_router(Psychic)
    try:
        listed = json.loads(CliRunner().invoke(app, ["list", "--json"]).output)
        row = next(r for r in listed["routers"] if r["name"] == "psychic_test")
        assert row["from"] == "plug-in my_lab.routers" and row["what"].startswith("honest")
    finally:
        del ROUTERS["psychic_test"]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["fitt"], "Did you mean 'fit'?"),
        (["fit", "--store", "x", "--router", "entropi"], "(did you mean 'entropy'?)"),
        (["suite", "--preset", "lokal"], "(did you mean 'local'?)"),
        (["extract", "-m", "effnet_lit0", "-d", "eurosat"], "(did you mean 'effnet_lite0'?)"),
    ],
)
def test_did_you_mean(args: list[str], said: str) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and said in result.output


def _sweep_args(store: Path, out: Path, *extra: str) -> list[str]:
    return [
        *("--progress", "lines", "sweep", "--store", str(store), "--r", "2,4", "--epochs", "2"),
        *("--batch-size", "8", "--init-cls", "2", "--increment", "2", "--jobs", "1"),
        *("--device", "cpu", "--out", str(out), *extra),
    ]


def test_a_sweep_knows_its_total_and_an_estimate_from_its_start(tmp_path: Path) -> None:
    from support.stores import synthetic_store

    store = synthetic_store(tmp_path / "s.zarr", classes=4)
    plan = CliRunner().invoke(app, _sweep_args(store.path, tmp_path / "sw", "--dry-run", "--json"))
    planned = json.loads(plan.output)
    assert plan.exit_code == 0 and planned["points"] == 2 and planned["to_run"] == 2
    assert planned["estimate_seconds"] > 0 and not (tmp_path / "sw").exists()  # nothing written
    result = CliRunner().invoke(app, _sweep_args(store.path, tmp_path / "sw"))
    assert result.exit_code == 0, result.output
    lines = [x for x in result.output.splitlines() if x.startswith("sweep: ")]
    assert lines[1] == "sweep: 0/2 (0%) points, 0:00 elapsed"  # said as it starts, no guess of what is left
    assert lines[-1].startswith("sweep: 2/2 (100%) points") and "done in" in lines[-1]
    again = CliRunner().invoke(app, _sweep_args(store.path, tmp_path / "sw", "--dry-run"))
    assert "sweep 2 r on" in again.output and "0 point(s) to run, 2 in the folder already" in again.output


def test_a_small_suite_dry_run_opens_with_its_summary(tmp_path: Path) -> None:
    from support.stores import synthetic_store

    store = synthetic_store(tmp_path / "s.zarr", classes=4)
    suite = tmp_path / "SUITE.toml"
    suite.write_text(
        'seeds = [0]\n[tosca.flags]\nepochs = 1\n[baselines]\nmethods = ["simplecil", "ranpac"]\nranpac_projection_dim = 64\n'
        f'[[stores]]\nname = "tiny"\npath = "{store.path}"\ninit_cls = 2\nincrement = 2\n'
        '[[stores]]\nname = "later"\nmodel = "effnet_lite0"\ndataset = "cifar10"\n'
        f'data_root = "{tmp_path / "nowhere"}"\npath = "{tmp_path / "later.zarr"}"\n'
    )
    result = CliRunner().invoke(app, ["suite", str(suite), "--dry-run", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[:2]
    assert first[0].startswith("suite ") and "cell(s) to run" in first[0] and "reused or done" in first[0]
    assert first[1].startswith("estimated: about ") and "train" in first[1] and "baselines" in first[1]
    assert f"missing store later: data for cifar10: {tmp_path / 'nowhere'} does not exist" in " ".join(
        result.output.split()
    )


def test_cache_verify_says_each_chunk_it_checks(tmp_path: Path) -> None:
    from support.stores import synthetic_store

    store = synthetic_store(tmp_path / "s.zarr", classes=4)
    chunks = {split: store.layout(split).n_chunks for split in ("train", "test")}
    result = CliRunner().invoke(
        app, ["--progress", "lines", "--progress-every", "0", "cache", "verify", str(store.path)]
    )
    assert result.exit_code == 0, result.output
    for split, n in chunks.items():
        assert f"verify {split}: {n}/{n} (100%) chunks" in result.stderr, result.stderr


def test_fits_times_each_say_what_they_time_and_sit_within_its_wall(tmp_path: Path) -> None:
    """Issue 57, point 14: a randumb router's run said "evaluation 4.0 s" after 167 s of wall. Its
    last line names what each figure times (the SGD steps, the heads' and routers' answers after
    each task) and the wall from the command's start, which holds them both."""
    import re

    from support.stores import synthetic_store

    store = synthetic_store(tmp_path / "s.zarr", classes=4)
    args = ["fit", "--store", str(store.path), "--run", str(tmp_path / "run"), "--device", "cpu"]
    result = CliRunner().invoke(app, [*args, "--epochs", "1", "--init-cls", "2", "--increment", "2"])
    assert result.exit_code == 0, result.output
    said = " ".join(result.stdout.split())
    found = re.search(
        r"2 task\(s\) trained in ([\d.]+) s \(SGD steps\), evaluation ([\d.]+) s \(heads and routers on the "
        r"test split after each task\); ([\d.]+) s wall from the command's start",
        said,
    )
    assert found, said
    train, evaluation, wall = map(float, found.groups())
    assert wall > 0 and train + evaluation <= wall + 0.1  # the parts within the whole (each rounded)
