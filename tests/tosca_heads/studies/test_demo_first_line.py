"""The demo's first line says what its extraction will take on this machine, or that the store is
extracted already, before any work (issue 49, point 6)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from support.images import FAST_CNN
from support.stores import synthetic_store

from featcache.extraction_estimate import ExtractionGuess, extraction_ahead
from tosca_heads.requests.command_requests import DemoRequest
from tosca_heads.studies.demo import run_demo


class Stopped(Exception):
    """The fake extraction: the demo is stopped where its work would start."""


class Shown:
    """A display that keeps what the demo said, in order."""

    def __init__(self) -> None:
        self.said: list[tuple[str, str]] = []

    def ahead(self, line: str) -> None:
        self.said.append(("ahead", line))

    def section(self, title: str) -> None:
        self.said.append(("section", title))

    def __getattr__(self, name: str) -> Any:  # the later steps: never reached here
        raise AssertionError(f"the demo showed {name} before its extraction")


def test_the_demo_says_the_extraction_estimate_before_anything_else(tmp_path: Path, image_tree: Path) -> None:
    asked: list[tuple[Any, ...]] = []
    shown = Shown()

    def foresee(*args: Any) -> str:
        asked.append(args)
        return "extraction: about 3:10 (min:s) on this machine"

    def extract(*args: Any) -> Path:
        assert shown.said[0] == ("ahead", "extraction: about 3:10 (min:s) on this machine")
        raise Stopped

    request = DemoRequest(
        data_root=image_tree, cache_dir=tmp_path / "cache", runs_dir=tmp_path / "runs", device="cpu"
    )
    with pytest.raises(Stopped):
        run_demo(request, extract, shown, foresee)
    store = tmp_path / "cache" / "eurosat" / f"effnet_lite0-demo{request.per_class}.zarr"
    assert asked == [("effnet_lite0", "eurosat", image_tree, store, request.per_class)]
    assert [kind for kind, _ in shown.said] == ["ahead", "section"]  # first, then step 1's title


def test_a_complete_store_is_said_to_need_no_extraction(tmp_path: Path) -> None:
    store = synthetic_store(tmp_path / "s.zarr")
    line = extraction_ahead(FAST_CNN, "imagefolder", tmp_path, store.path, None, torch.device("cpu"))
    assert (
        line
        == f"extraction: none, {store.path} is extracted already (every chunk done); it is checked and reused"
    )


def test_the_estimate_says_its_time_machine_and_how_or_why_there_is_none(
    tmp_path: Path, image_tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import featcache.extraction_estimate as estimate

    guess = ExtractionGuess(
        190.4, 8, 4, 2, 64, how="test_efficientnet timed on 12 images: 10 ms/img x 12 images"
    )
    monkeypatch.setattr(estimate, "estimate_extraction", lambda *args: guess)
    monkeypatch.setattr(estimate.os, "cpu_count", lambda: 2)
    line = extraction_ahead(
        FAST_CNN, "imagefolder", image_tree, tmp_path / "new.zarr", None, torch.device("cpu")
    )
    assert line == (
        "extraction: about 3:10 (min:s) on this machine as loaded now, 2 core(s), cpu "
        "(test_efficientnet timed on 12 images: 10 ms/img x 12 images)"
    )
    missing = ExtractionGuess(None, missing=["weights of x cannot be loaded offline", "data for y: none"])
    monkeypatch.setattr(estimate, "estimate_extraction", lambda *args: missing)
    line = extraction_ahead(
        FAST_CNN, "imagefolder", image_tree, tmp_path / "new.zarr", None, torch.device("cpu")
    )
    assert line == "extraction: no estimate (weights of x cannot be loaded offline; data for y: none)"
