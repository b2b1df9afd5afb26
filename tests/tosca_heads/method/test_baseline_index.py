"""The light index `tosca list` reads (`method.baseline_index`) is generated from the built-in
classes (issue 54, point 3): a baseline's description, reference and paper are written once, on
its class. The file on disk must be what the writer writes now, else this fails and says how to
regenerate it."""

from __future__ import annotations

import pytest

from tosca_foundation.registry import reference_words
from tosca_heads.method import baseline_index_writer as writer
from tosca_heads.method.baseline_estimators import SimpleCIL
from tosca_heads.method.baseline_index import INDEX
from tosca_heads.method.baseline_registry import BASELINES, paper_of, register_baseline

REGENERATE = "stale: run python -m tosca_heads.method.baseline_index_writer"


def test_the_index_on_disk_is_what_the_classes_say_now() -> None:
    assert writer.INDEX_FILE.read_text(encoding="utf-8") == writer.render(), REGENERATE


def test_a_changed_class_makes_the_index_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison above can fail: a paper edited on its class changes what would be written."""
    monkeypatch.setattr(SimpleCIL, "paper", "Someone, Another Paper, 2031")
    rendered = writer.render()
    assert rendered != writer.INDEX_FILE.read_text(encoding="utf-8")
    assert '"paper": "Someone, Another Paper, 2031",' in rendered


def test_the_registry_declares_each_built_in_as_its_class_says() -> None:
    built_ins = [e for e in BASELINES.entries() if e.built_in]
    assert [e.name for e in built_ins] == [name for name, _ in writer.BUILT_INS] == [r["name"] for r in INDEX]
    for entry in built_ins:
        cls = BASELINES[entry.name]
        assert entry.description == writer.description(cls) != "", entry.name
        assert entry.reference == reference_words(getattr(cls, "reference", False)), entry.name
        assert paper_of(entry.name) == getattr(cls, "paper", ""), entry.name
    assert paper_of("joint_probe") == "" and "arXiv:2307.02251" in paper_of("ranpac")
    assert paper_of("klda_ensemble") == paper_of("klda")  # KLDA-E follows KLDA's paper, inherited


def test_a_plugins_paper_is_read_from_its_class() -> None:
    class Cited:
        """A plug-in that cites its paper."""

        incremental, paper = True, "Author, A Plug-in Paper, 2030"
        partial_fit = predict = num_parameters = print

    register_baseline("cited_plugin")(Cited)
    try:
        assert paper_of("cited_plugin") == "Author, A Plug-in Paper, 2030"
        assert paper_of("no_such_baseline") == ""
    finally:
        del BASELINES["cited_plugin"]
