"""Every console table fits the terminal it is printed on (issue 49, point 3): at COLUMNS=80, 100
and 200 no line of any command's table is wider, the intervals folded under their figure and the
columns dealt into further tables before anything is cut; the files and `--json` still hold every
column. And the smaller faults of issue 49, point 5: fit's per-task columns stand in the registry's
order whatever routers ran, a resumed sweep draws no `0/0` bar, a sweep's grid names exactly the
flags at fault, and `tosca routers` says why it shows no baseline and how to make them."""

from __future__ import annotations

import io
import json
import re
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest
from support.stores import synthetic_store
from typer.testing import CliRunner

from cli import app
from tosca_cli import terminal, views
from tosca_cli.progress import Board
from tosca_cli.widths import Rows

WIDTHS = (80, 100, 200)
BOX = re.compile("[\u2500-\u257f]")  # the box-drawing characters a table is drawn with
FIT_ROW = re.compile(r"^(task |\s*\d+ (trained|reused) )")


def table_lines(output: str) -> list[str]:
    """The lines of a command's output that tables make: boxed lines, lines indented 4 or more (a
    table's centred title, a folded row's further lines) and fit's per-task rows. The rest is prose,
    one line each (the terminal wraps it; a command said there stays whole to copy)."""
    return [
        line
        for line in output.splitlines()
        if BOX.search(line) or line.startswith(" " * 4) or FIT_ROW.match(line)
    ]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A store, a run of it with a validation split, a finished sweep of it and a suite file."""
    tmp = tmp_path_factory.mktemp("widths")
    store = synthetic_store(tmp / "cache" / "s.zarr", classes=6, per_class=16, test_per_class=8, spread=2.5)
    common = ["--store", str(store.path), "--init-cls", "2", "--increment", "2", "--device", "cpu"]
    common += ["--epochs", "1", "--batch-size", "8"]
    run, sweep = tmp / "runs" / "run", tmp / "sweep"
    for args in (
        ["fit", *common, "--val-fraction", "0.25", "--run", str(run)],
        ["sweep", *common, "--r", "2,4", "--jobs", "1", "--out", str(sweep)],
    ):
        done = CliRunner().invoke(app, args)
        assert done.exit_code == 0, done.output
    suite = tmp / "SUITE.toml"
    suite.write_text(
        'name = "tiny"\nseeds = [0]\n[tosca]\nflags = { epochs = 1, batch_size = 8 }\n[baselines]\nmethods = ["simplecil"]\n'
        f'[[stores]]\nname = "A"\npath = "{store.path}"\ninit_cls = 2\nincrement = 2\n'
    )
    return {"store": store.path, "run": run, "sweep": sweep, "suite": suite, "root": tmp}


def commands(f: dict[str, Path]) -> dict[str, list[str]]:
    common = ["--store", str(f["store"]), "--init-cls", "2", "--increment", "2", "--device", "cpu"]
    common += ["--epochs", "1", "--batch-size", "8"]
    return {
        "fit": ["fit", *common, "--val-fraction", "0.25", "--run", str(f["run"])],  # every task reused
        "eval": ["eval", str(f["run"]), "--device", "cpu"],
        "routers": ["routers", str(f["run"])],
        "list": ["list"],
        "cache ls": ["cache", "ls", "--cache-dir", str(f["store"].parent)],
        "cache info": ["cache", "info", str(f["store"])],
        "sweep": [
            "sweep",
            *common,
            "--r",
            "2,4",
            "--jobs",
            "1",
            "--out",
            str(f["sweep"]),
        ],  # every point done
        "baselines": [
            "baselines",
            *common[:8],
            "--methods",
            "simplecil",
            "--no-tosca",
            "--out",
            str(f["root"] / "b"),
        ],
        "suite dry run": ["suite", str(f["suite"]), "--out", str(f["root"] / "suite"), "--dry-run"],
    }


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize(
    "name",
    ["fit", "eval", "routers", "list", "cache ls", "cache info", "sweep", "baselines", "suite dry run"],
)
def test_every_commands_tables_fit_the_terminal(
    name: str, width: int, folder: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    result = CliRunner().invoke(app, commands(folder)[name])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines() if name == "cache info" else table_lines(result.stdout)
    assert lines, result.stdout  # each of these commands prints a table
    wide = [line for line in lines if len(line) > width]
    assert not wide, "\n".join(wide)


def test_the_routers_table_at_80_columns_keeps_every_column_and_every_figure(
    folder: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Folded and dealt into tables, never cut: every head and every figure with its interval is on
    the screen, and `--json` holds every column, intervals and descriptions included."""
    rows = json.loads(CliRunner().invoke(app, ["routers", str(folder["run"]), "--json"]).stdout)
    monkeypatch.setenv("COLUMNS", "80")
    shown = CliRunner().invoke(app, ["routers", str(folder["run"])]).stdout
    for head in (
        "router",
        "A_bar",
        "A_last",
        "val A_last",
        "forgetting",
        "routing acc",
        "reference",
        "what it is",
    ):
        assert head in shown, head
    entropy = next(r for r in rows if r["router"] == "entropy")
    for figure in ("A_bar", "A_last", "forgetting"):
        assert f"{entropy[figure]:.2f}" in shown
        assert f"[{entropy[figure + '_low']:.1f}, {entropy[figure + '_high']:.1f}]" in shown
    assert entropy["summary"] and {"reference", "val_A_last", "images"} <= set(entropy)
    assert "(1 of 3)" in shown and "(continued, 3 of 3)" in shown
    for part in shown.split("(continued")[1:]:  # each further table repeats the row's name
        assert "router" in part and "entropy" in part


def test_off_a_terminal_without_columns_a_table_keeps_its_natural_width(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    heads = ["name", *(f"figure {i}" for i in range(12))]
    terminal.table("wide", heads, [["a", *(["62.50 [50.3, 74.0]"] * 12)]], ("name",))
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) > 200 and sum("figure 11" in line for line in lines) == 1  # one table


@pytest.mark.parametrize("width", WIDTHS)
def test_a_table_wider_than_the_terminal_is_folded_then_dealt(
    width: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    heads = ["name", *(f"figure {i}" for i in range(12)), "what it is"]
    words = "a description far longer than any terminal is wide, " * 4
    rows = [[f"row{r}", *(f"{r}2.50 [5{i}.3, 7{i}.0]" for i in range(12)), words] for r in range(3)]
    terminal.table("a wide table", heads, rows, ("name", "what it is"))
    shown = capsys.readouterr().out
    assert max(map(len, shown.splitlines())) <= width
    for head in heads:
        assert head in shown, head
    for i in range(12):  # each figure, and its interval folded under it
        assert "02.50" in shown and f"[5{i}.3, 7{i}.0]" in shown
    tables = shown.count("┏")
    assert tables == len([line for line in shown.splitlines() if "row2" in line])  # the name in each


def test_rows_fold_under_their_heads() -> None:
    heads = ["task", "status", "ce", "route", *(f"router{i}" for i in range(9))]
    sizes = [4, 7, 8, 6, *([7] * 9)]
    rows = Rows(heads, sizes, keys=2, limit=80)
    cells = ["3", "trained", "0.1234", "99.5", *(f"{i}0.00" for i in range(9))]
    header, row = rows.header(), rows.lines(cells)
    assert len(header) == len(row) > 1 and max(map(len, header + row)) <= 80
    for head_line, row_line in zip(header, row, strict=True):
        ends = [m.end() for m in re.finditer(r"\S+", head_line)]
        assert ends == [m.end() for m in re.finditer(r"\S+", row_line)]  # each cell under its head
    assert Rows(heads, sizes, keys=2).lines(cells) == [
        " ".join(c.rjust(w) for c, w in zip(cells, sizes, strict=True))
    ]


def _stage(task: int) -> SimpleNamespace:
    routers = {name: {"A_t": 0.5, "routing": 0.75} for name in ("entropy", "ncm", "lda", "oracle")}
    stats = {"ce": 0.5, "l1_term": 0.01, "loss": 0.51, "train_acc": 0.9, "seconds": 1.0}
    return SimpleNamespace(task=task, stats=stats, routers=routers, eval_seconds=0.5)


def test_fits_per_task_columns_stand_in_the_registrys_order(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 49, point 5: whatever routers ran and in whatever order they were asked, the per-task
    columns stand in the order of the registry (`tosca list`)."""
    headers = []
    for asked in (["lda", "entropy"], ["entropy", "lda"], ["ncm", "lda", "oracle", "entropy"]):
        views.stage_printer(asked)(_stage(0), True)
        header = capsys.readouterr().out.splitlines()[0].split()
        headers.append([h for h in header if h in ("entropy", "oracle", "ncm", "lda")])
    assert headers == [["entropy", "lda"], ["entropy", "lda"], ["entropy", "oracle", "ncm", "lda"]]


def test_a_fully_resumed_sweep_draws_no_empty_bar(folder: dict[str, Path]) -> None:
    """Issue 49, point 5: every point in the folder already: no `0/0` bar nor line, the reason said."""
    result = CliRunner().invoke(app, commands(folder)["sweep"])
    assert result.exit_code == 0, result.output
    assert "0/0" not in result.output
    assert "sweep: every point is in the folder already; nothing to run" in result.output
    stream = io.StringIO()
    with Board("lines", interval=0, stream=stream) as board:
        nothing = board.task("sweep", 0, "points", at_once=True)
        board.update(nothing, completed=0)
    assert stream.getvalue() == ""
    with Board("bar") as board:
        board.task("sweep", 0, "points")
        assert not board._bar.tasks  # no bar drawn for work of nothing


def test_a_sweep_names_exactly_the_flags_at_fault(folder: dict[str, Path]) -> None:
    """Issue 49, point 5: `--r 16,0 --l1 0,-5e-4` named `--lr`, which was not given, and not r = 0."""
    args = [
        "sweep",
        "--store",
        str(folder["store"]),
        "--device",
        "cpu",
        "--init-cls",
        "2",
        "--increment",
        "2",
    ]
    result = CliRunner().invoke(app, [*args, "--r", "16,0", "--l1", "0,-5e-4"])
    assert result.exit_code == 2
    assert result.output.strip() == "error: --r must be at least 1, got 0; --l1 must be >= 0, got -0.0005"
    result = CliRunner().invoke(app, [*args, "--seeds", "0,-3", "--momentum", "0.9,1"])
    assert result.output.strip() == (
        "error: --momentum must be in [0, 1), got 1.0; --seeds must be in [0, 2**32), got -3"
    )


def test_routers_says_why_it_shows_no_baseline_and_the_command(folder: dict[str, Path]) -> None:
    """Issue 49, point 5: no baseline on the run's protocol beside it: said, with the command that
    writes them where `tosca routers` looks."""
    shown = CliRunner().invoke(app, ["routers", str(folder["run"])]).stdout
    line = next(line for line in shown.splitlines() if line.startswith("no baselines beside"))
    command = shlex.split(line.split("to set them beside it: ", 1)[1])
    run = folder["run"]
    assert command == [
        "tosca", "baselines", "--store", str(folder["store"]), "--run", str(run),
        "--out", str(run.parent / "baselines-run"),
    ]  # fmt: skip


@pytest.mark.heavy  # the default baselines on the run's protocol
def test_the_baselines_command_routers_gives_sets_them_beside(
    folder: dict[str, Path], tmp_path: Path
) -> None:
    run = tmp_path / "runs" / "run"
    import shutil

    shutil.copytree(folder["run"], run)
    shown = CliRunner().invoke(app, ["routers", str(run)]).stdout
    line = next(line for line in shown.splitlines() if line.startswith("no baselines beside"))
    command = shlex.split(line.split("to set them beside it: ", 1)[1])
    done = CliRunner().invoke(app, [*command[1:], "--device", "cpu"])
    assert done.exit_code == 0, done.output
    rows = json.loads(CliRunner().invoke(app, ["routers", str(run), "--json"]).stdout)
    assert {"simplecil", "ranpac", "joint_probe"} <= {r["router"] for r in rows if r["kind"] == "baseline"}
    assert "no baselines beside" not in CliRunner().invoke(app, ["routers", str(run)]).stdout


def test_a_finished_suites_tables_fit_the_terminal(
    folder: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A suite's tables, printed from the `records.table.Table`s its files are written from: every
    column and bold cell on the screen (off a terminal marked `**56.25**`), within 80 columns."""
    args = ["suite", str(folder["suite"]), "--out", str(tmp_path / "suite"), "--device", "cpu", "--jobs", "1"]
    monkeypatch.setenv("COLUMNS", "80")
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    lines = table_lines(result.stdout)
    assert lines and not [line for line in lines if len(line) > 80]
    header = (tmp_path / "suite" / "table.md").read_text().split("\n| ", 1)[1].split("\n")[0]
    for head in (h.strip() for h in header.strip(" |").split(" | ")):
        assert head in result.stdout, head
    bold = re.findall(r"\*\*([\d.]+)", (tmp_path / "suite" / "table.md").read_text())
    assert bold and bold == re.findall(r"\*\*([\d.]+)", result.stdout)  # marked as the file marks them


@pytest.mark.heavy  # a tiny backbone's extraction, a fit and a prediction
def test_predicts_table_fits_the_terminal(
    tmp_path: Path, image_tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Image paths wider than the terminal are wrapped within their cell, whole."""
    from support.commands import extract_request

    from featcache.runner import extract

    store = extract(extract_request(tmp_path, image_tree, "s")).store
    run = tmp_path / "run"
    args = ["fit", "--store", str(store), "--run", str(run), "--init-cls", "1", "--increment", "1"]
    done = CliRunner().invoke(app, [*args, "--epochs", "1", "--batch-size", "4", "--device", "cpu"])
    assert done.exit_code == 0, done.output
    deep = tmp_path / ("a-folder-with-a-long-name-" * 3) / "more"
    deep.mkdir(parents=True)
    image = next(p for p in sorted(image_tree.rglob("*")) if p.is_file())
    (deep / image.name).write_bytes(image.read_bytes())
    monkeypatch.setenv("COLUMNS", "80")
    result = CliRunner().invoke(app, ["predict", str(run), str(deep), "--device", "cpu"])
    assert result.exit_code == 0, result.output
    lines = table_lines(result.stdout)
    assert lines and not [line for line in lines if len(line) > 80], result.stdout
    first = "".join(line.split("│")[1].strip() for line in lines if line.startswith("│"))
    assert first == str(deep / image.name)  # the path whole, wrapped within its cell


def _comparison() -> SimpleNamespace:
    """A comparison as `tosca baselines` gives one beside a run: TOSCA's rows (one per router, the
    same method), two baselines, every figure with its interval and a validation block."""
    import numpy as np

    from tosca_heads.method.metrics import summarise
    from tosca_heads.method.uncertainty import Outcomes, intervals
    from tosca_heads.records import with_intervals

    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(6), 10)
    task_of = labels // 2
    outcome = Outcomes(rng.random((3, 60)) < 0.8, labels, task_of, np.arange(60))
    block = with_intervals(
        summarise([0.9, 0.8, 0.7], [[0.9], [0.85, 0.75], [0.8, 0.7, 0.6]]), intervals([outcome])
    )

    def row(method: str, routing: str, reference: str = "") -> SimpleNamespace:
        return SimpleNamespace(
            method=method, routing=routing, metrics=dict(block), validation=dict(block),
            parameters=123_456, seconds=66.3, reference=reference,
        )  # fmt: skip

    routers = ["entropy", "energy", "logit_margin", "ncm_cosine", "fecam", "randumb", "oracle", "told"]
    rows = [row("tosca", name, "told the task" if name in ("oracle", "told") else "") for name in routers]
    rows += [row("simplecil", "none"), row("klda", "none")]
    rows[-1].metrics.update(knob="klda_sigma", klda_sigma=1.5, chosen_by="the validation split's "
                            "accuracy after the first task, over a grid of eleven values from 0.1 to 10")  # fmt: skip
    return SimpleNamespace(title="EuroSAT / effnet_lite0 (3 tasks of 2 classes)", results=rows)


@pytest.mark.parametrize("width", [80, 200])
def test_a_split_baselines_table_names_each_row_by_method_and_routing_and_its_notes_fit(
    width: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 57, point 12: where the comparison is dealt into several tables ("(2 of 3)"), each
    repeats `method` and `routing`, so TOSCA's eight rows (one per router) stay told apart in every
    part; the lines under it (what the brackets are, the knob a baseline chose) are wrapped to the
    width, at spaces, never a word cut."""
    monkeypatch.setenv("COLUMNS", str(width))
    views.comparison_table(_comparison())
    shown = capsys.readouterr().out
    lines = shown.splitlines()
    assert not [line for line in lines if len(line) > width], shown
    heads = [line for line in lines if "method" in line and BOX.search(line)]
    parts = len(heads)
    if width == 80:
        assert parts >= 2 and "(1 of " in shown, shown  # dealt at 80
    for head in heads:
        assert "routing" in head, head
    named: list[list[tuple[str, str]]] = [[]]  # per part: each row's (method, routing)
    for line in lines:
        if re.search(r"\d+ of \d+\)\s*$", line) and named[-1]:
            named.append([])
        cells = [cell.strip() for cell in line.split("\u2502")[1:3]]
        if line.startswith("\u2502") and cells[0]:  # a row's first line (its interval's is blank)
            named[-1].append((cells[0], cells[1]))
    assert len(named) == max(parts, 1)
    for part in named:
        tosca = [routing for method, routing in part if method == "tosca"]
        assert len(tosca) == 8 and len(set(tosca)) == 8, part  # told apart in every part
    prose = [line for line in lines if not BOX.search(line) and line.strip()]
    words = " ".join(line.strip() for line in prose)
    assert "klda: klda_sigma 1.5, chosen by the validation split's accuracy after the first task" in words
    assert "[low, high]: 95% interval over the 60 samples of the split" in words
