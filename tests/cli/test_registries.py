"""One registry type for every kind a command takes by name (tosca_foundation.registry):
backbones, datasets, routers, baselines, trackers and image decoders. For each kind, through the
function that takes the user's name at the edge: a mistyped name is one line with "did you mean";
an alias finds the same entry as its name and the edge hands the name down; a plug-in registered
from outside the package (its own module, with an alias) is listed by `tosca list` as a plug-in."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from featcache.backbones import BACKBONES, BackboneSpec, register_backbone, resolve_backbone
from featcache.images.decoder_names import DECODERS, Decoder, register_decoder
from featcache.sources.datasets import DatasetSource, SplitSamples, load_dataset
from tosca_cli.app import app
from tosca_foundation.dataset_names import DATASETS, register_dataset
from tosca_foundation.errors import UserError
from tosca_foundation.registry import Registry
from tosca_heads.method.baseline_registry import BASELINES, register_baseline
from tosca_heads.routers import ROUTERS, Router, register_router, resolve_routers
from tosca_heads.trackers.logger_registry import LOGGERS, Logger, parse_targets, register_logger

PLUGIN = "plugmod"  # the module a plug-in registers from (not one of the package's)


def _backbone() -> None:
    register_backbone(BackboneSpec("plug_net", "test_efficientnet"), module=PLUGIN, aliases=("plugnet",))


def _dataset() -> None:
    def plug_data(data_root: Path | None, cache_dir: Path) -> DatasetSource:
        split = SplitSamples(["0", "1"], np.array([0, 1]), arrays=np.zeros((2, 4, 4, 3), np.uint8))
        return DatasetSource(
            "plug_data", ["a", "b"], {"train": split, "test": split}, "arrays", None, "given"
        )

    plug_data.__module__ = PLUGIN
    register_dataset("plug_data", 2, "a plug-in's folders", aliases=("plugdata",))(plug_data)


def _router() -> None:
    register_router(
        type(
            "PlugRouter", (Router,), {"name": "plug_router", "aliases": ("plugrouter",), "__module__": PLUGIN}
        )
    )


def _baseline() -> None:
    body = {"incremental": True, "__module__": PLUGIN, "__doc__": "A plug-in's baseline."}
    body.update(partial_fit=print, predict=print, num_parameters=print)
    register_baseline("plug_baseline", aliases=("plugbaseline",))(type("PlugBaseline", (), body))


def _tracker() -> None:
    body: dict[str, Any] = {"name": "plug_tracker", "aliases": ("plugtracker",), "__module__": PLUGIN}
    body.update(start=print, params=print, metrics=print, artifacts=print, end=print)
    register_logger(type("PlugLogger", (Logger,), body))


def _decoder() -> None:
    register_decoder(
        Decoder("plug_decoder", "a plug-in's", print, False), module=PLUGIN, aliases=("plugdecoder",)
    )


@dataclass(frozen=True)
class Kind:
    """One registry, what `tosca list` calls it, and its edge: the function that takes a name a
    user typed and gives the name handed down."""

    listed: str
    registry: Registry[Any]
    edge: Callable[[str], str]
    typo: str  # a mistyped built-in name
    meant: str  # the name it is closest to
    register: Callable[[], None]  # registers a plug-in "plug_<kind>" with the alias "plug<kind>"
    plugin: str


KINDS = [
    Kind(
        "backbones",
        BACKBONES,
        lambda n: resolve_backbone(n).alias,
        "effnet_lit0",
        "effnet_lite0",
        _backbone,
        "plug_net",
    ),
    Kind(
        "datasets",
        DATASETS,
        lambda n: load_dataset(n, None, Path("cache")).name,
        "eurosatt",
        "eurosat",
        _dataset,
        "plug_data",
    ),
    Kind("routers", ROUTERS, lambda n: resolve_routers(n)[0], "entorpy", "entropy", _router, "plug_router"),
    Kind("baselines", BASELINES, BASELINES.pick, "ranpak", "ranpac", _baseline, "plug_baseline"),
    Kind(
        "trackers", LOGGERS, lambda n: parse_targets([n])[0].name, "mlfow", "mlflow", _tracker, "plug_tracker"
    ),
    Kind("decoders", DECODERS, lambda n: _resolve_decoder(n), "pli", "pil", _decoder, "plug_decoder"),
]


def _resolve_decoder(name: str) -> str:
    import torch

    from featcache.images.decoding import resolve_decoder

    return resolve_decoder(name, torch.device("cpu"))


@pytest.fixture(params=KINDS, ids=[k.listed for k in KINDS])
def kind(request: pytest.FixtureRequest) -> Iterator[Kind]:
    found: Kind = request.param
    yield found
    if found.plugin in found.registry:
        del found.registry[found.plugin]


def test_every_kind_the_command_line_lists_is_one_of_these() -> None:
    listed = json.loads(CliRunner().invoke(app, ["list", "--json"]).output)
    assert set(listed) - {"presets"} == {k.listed for k in KINDS}


def test_a_mistyped_name_is_one_line_saying_which_was_meant(kind: Kind) -> None:
    with pytest.raises(UserError) as refused:
        kind.edge(kind.typo)
    said = str(refused.value)
    assert "\n" not in said and f"'{kind.typo}'" in said, said
    assert f"(did you mean '{kind.meant}'?)" in said, said
    assert kind.meant in re.findall(r"[\w-]+", said.rpartition("use one of ")[2]), said


def test_an_alias_finds_the_same_entry_and_the_edge_hands_down_its_name(kind: Kind) -> None:
    kind.register()
    alias = kind.plugin.replace("_", "")
    assert alias in kind.registry and alias not in list(kind.registry)  # found, never listed as a name
    assert kind.registry[alias] is kind.registry[kind.plugin]
    assert kind.registry.entry(alias) == kind.registry.entry(kind.plugin)
    assert kind.edge(alias) == kind.plugin
    with pytest.raises(ValueError, match="registered twice"):
        kind.register()  # the name and the alias are taken
    del kind.registry[alias]  # deleting by either name removes both
    assert kind.plugin not in kind.registry and alias not in kind.registry


def test_a_plugin_registered_from_outside_is_listed_with_its_alias(kind: Kind) -> None:
    kind.register()
    listed = json.loads(CliRunner().invoke(app, ["list", "--json"]).output)
    (row,) = [r for r in listed[kind.listed] if r["name"] == kind.plugin]
    assert row["from"] == f"plug-in {PLUGIN}" and row["aliases"] == kind.plugin.replace("_", ""), row
    assert [e.name for e in kind.registry.made_elsewhere()] == [kind.plugin]
    shown = CliRunner().invoke(app, ["list"], terminal_width=250).output
    assert f"{kind.plugin} (also {kind.plugin.replace('_', '')})" in shown


def test_a_worker_adopts_a_plugin_with_its_alias(kind: Kind) -> None:
    """What a command's workers receive of a plug-in (tosca_foundation.cluster): the entry, its
    alias included, adopted by a registry that did not have it."""
    kind.register()
    shipped = kind.registry.made_elsewhere()
    del kind.registry[kind.plugin]
    kind.registry.adopt(shipped)
    assert kind.registry.name_of(kind.plugin.replace("_", "")) == kind.plugin


def test_a_suite_file_takes_an_alias_for_its_name() -> None:
    """What a suite's TOML lists is handed down by name, as the command line's flags are."""
    from tosca_heads.studies.suite import parse_suite
    from tosca_heads.studies.suite.presets import preset

    spec = preset("local")
    spec["tosca"]["routers"] = ["sample", "lda", "entropy"]
    assert parse_suite(spec, Path.cwd(), "a suite").routers == ("entropy", "lda")
