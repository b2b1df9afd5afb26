"""What trackers are told, without a tracker: figures read off the records (a column the records
gain reaches every logger with no tracker code), a (key, step) sent once, and a sweep's or suite's
parent continued across commands through its folder's ledger (a resumable in-memory logger)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tosca_heads.records.sweep import point_rows
from tosca_heads.trackers import LOGGERS, Logger, Metric, Tracking, register_logger
from tosca_heads.trackers.events import record_metrics, rows_record
from tosca_heads.trackers.ledger import LEDGER, Ledger

BLOCK = {
    "A_t": [0.9, 0.8, 0.7],
    "A_bar": 0.8,
    "A_last": 0.7,
    "forgetting": 0.1,
    "accuracy_matrix": [[0.9], [0.8, 0.8], [0.7, 0.7, 0.7]],
    "routing_accuracy_t": [1.0, 0.9, 0.8],
    "routing_accuracy": 0.8,
}


def _series(metrics: Sequence[Metric]) -> dict[str, list[tuple[int, float]]]:
    found: dict[str, list[tuple[int, float]]] = {}
    for m in metrics:
        found.setdefault(m.key, []).append((m.step, m.value))
    return found


def test_a_figure_the_records_gain_reaches_the_trackers_with_no_tracker_code() -> None:
    gained = {**BLOCK, "A_last_low": 0.61, "interval": {"low": 0.6, "high": 0.8}, "note": "text"}
    record = {
        "tasks": [{"task": t, "loss": 1.0 - t / 10, "ce": 0.9 - t / 10, "train_acc": 0.5} for t in range(3)],
        "routers": {"entropy": gained},
        "validation": {"entropy": BLOCK},
    }
    curves = {0: {"ce": [2.0, 1.0], "l1_term": [0.1, 0.05], "lr": [0.1, 0.0]}}
    series = _series(record_metrics(record, curves))
    assert series["A_last_low/test/entropy"] == [(2, 0.61)]  # a new number, at the last task
    assert series["interval.low/test/entropy"] == [(2, 0.6)] and series["interval.high/test/entropy"] == [
        (2, 0.8)
    ]
    assert series["A_t/test/entropy"] == [(0, 0.9), (1, 0.8), (2, 0.7)]  # a list: a series over tasks
    assert series["routing/validation/entropy"] == [(0, 1.0), (1, 0.9), (2, 0.8), (2, 0.8)]
    assert series["l1_term/task_000"] == [(0, 0.1), (1, 0.05)] and series["ce/task_000"] == [
        (0, 2.0),
        (1, 1.0),
    ]
    assert series["train/ce"] == [(0, 0.9), (1, 0.8), (2, 0.7)] and series["train/accuracy"][0] == (0, 0.5)
    assert not [k for k in series if k.startswith(("accuracy_matrix", "note"))]  # tables and text: no series

    # a sweep point's results.csv rows, a column gained there too, give the same figures
    point = {"key": "k", "dataset": "d", "backbone": "b", "tasks": 3}
    rows = point_rows(point, {"entropy": BLOCK}, {"entropy": BLOCK})
    rows = [{**row, "A_last_low": 0.61} for row in rows]
    text = [
        {k: "" if v is None else str(v) for k, v in row.items()} for row in rows
    ]  # as the file holds them
    from_rows = _series(record_metrics(rows_record(text)))
    assert from_rows["A_last_low/test/entropy"] == [(2, 0.61)]
    from_blocks = _series(record_metrics({"routers": {"entropy": BLOCK}, "validation": {"entropy": BLOCK}}))
    for name in ("A_last", "A_bar", "forgetting", "A_t"):
        for split in ("test", "validation"):
            assert from_rows[f"{name}/{split}/entropy"] == from_blocks[f"{name}/{split}/entropy"]


class Memory(Logger):
    """A tracker that can find its runs again: every run kept in a class-wide store, by id."""

    name = "memory"
    store: ClassVar[dict[str, dict[str, Any]]] = {}

    def start(self, name: str, parent: Any | None) -> str:
        ident = f"run{len(self.store)}"
        self.store[ident] = {
            "name": name,
            "parent": parent,
            "metrics": [],
            "status": "RUNNING",
            "deleted": False,
        }
        return ident

    def params(self, run: Any, params: dict[str, Any]) -> None:
        self.store[run]["params"] = params

    def metrics(self, run: Any, metrics: Sequence[Metric]) -> None:
        self.store[run]["metrics"] += list(metrics)

    def artifacts(self, run: Any, files: Sequence[Path]) -> None:
        pass

    def end(self, run: Any, ok: bool) -> None:
        self.store[run]["status"] = "FINISHED" if ok else "FAILED"

    def handle_id(self, run: Any) -> str | None:
        return str(run)

    def reopen(self, ident: str) -> Any | None:
        if ident not in self.store or self.store[ident]["deleted"]:
            return None
        self.store[ident]["status"] = "RUNNING"
        return ident

    def discard(self, run: Any) -> None:
        self.store[run].update(deleted=True, status="KILLED")


@pytest.fixture
def memory() -> Iterator[type[Memory]]:
    register_logger(Memory)
    Memory.store = {}
    yield Memory
    del LOGGERS["memory"]


def _command(folder: Path, points: list[str], params: dict[str, Any], cut: str | None = None) -> None:
    """One command of a sweep: each point a child (an `A_last` figure), `cut`'s logging stopped
    half-way as a kill would stop it (and the command with it)."""
    group = Tracking([Memory(None, folder)]).group(folder, "sweep", params)
    assert group is not None
    for key in points:
        child = group.child(key, key, {"key": key})
        if child is None:
            continue
        if key == cut:
            return
        child.finish({"routers": {"entropy": {"A_t": [0.5], "A_last": 0.5}}})
    group.finish([], [])


def test_a_parent_is_continued_across_commands_by_its_folder_ledger(
    tmp_path: Path, memory: type[Memory]
) -> None:
    params = {"grid.r": "2,4"}
    _command(tmp_path, ["a", "b", "c"], params, cut="c")  # killed while logging c
    (parent,) = [i for i, r in Memory.store.items() if r["parent"] is None]
    assert Memory.store[parent]["status"] == "RUNNING"
    _command(tmp_path, ["a", "b", "c", "d"], params)  # the rerun: a and b kept, c again, d new
    live = {i: r for i, r in Memory.store.items() if not r["deleted"]}
    assert [i for i, r in live.items() if r["parent"] is None] == [parent]
    assert Memory.store[parent]["status"] == "FINISHED"
    children = sorted(r["name"] for r in live.values() if r["parent"] == parent)
    assert children == ["a", "b", "c", "d"] and all(r["status"] != "RUNNING" for r in Memory.store.values())
    assert [r["status"] for r in Memory.store.values() if r["deleted"]] == ["KILLED"]  # the cut c
    ledger = json.loads((tmp_path / LEDGER).read_text())["trackers"]
    (entry,) = ledger.values()
    assert entry["finished"] and sorted(entry["children"]) == ["a", "b", "c", "d"] and entry["open"] == {}

    before = json.dumps(Memory.store, default=str)
    _command(tmp_path, ["a", "b", "c", "d"], params)  # finished: nothing told
    assert json.dumps(Memory.store, default=str) == before

    _command(
        tmp_path, ["a", "b", "c", "d", "e"], {"grid.r": "2,4,8"}
    )  # a grown grid: a new parent, every point
    parents = [i for i, r in Memory.store.items() if r["parent"] is None]
    assert len(parents) == 2 and Memory.store[parents[0]]["status"] == "FINISHED"
    assert sorted(r["name"] for r in Memory.store.values() if r["parent"] == parents[1]) == [
        "a",
        "b",
        "c",
        "d",
        "e",
    ]


def test_a_damaged_ledger_is_one_line_and_a_new_parent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / LEDGER).write_text('{"format": 1, "trackers": {"x": {"parent": 3}}}')
    assert Ledger(tmp_path).entries == {}
    said = [line for line in capsys.readouterr().err.splitlines() if line]
    assert len(said) == 1 and said[0].startswith(f"warning: {tmp_path / LEDGER} is unreadable")
