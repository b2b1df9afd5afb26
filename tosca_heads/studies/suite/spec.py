"""What a suite asks for, read from SUITE.toml or a preset, every field checked in one line.

A suite file (paths relative to the file's folder):

    name = "my-suite"
    scenario = "cil"             # the protocol of every store (docs/scenarios.md); one per suite
    scenario_values = {}         # its values for every store (fscil: { shots = 5 }); cil takes none
    seeds = [0, 1, 2]            # training seeds: module initialisation and shuffling
    order_seeds = [1993]         # class orders (the paper's: 1993)
    val_fraction = 0.1           # a validation split to choose the bold entries on (default 0:
    val_seed = 0                 #   none, the paper's protocol; the bold entries are then chosen on test)

    [tosca]
    routers = ["entropy", "lda", "batch", "oracle"]   # TOSCA's rows of the table (default: HEADLINE)
    flags = { epochs = 20 }                            # any fit flag over the paper preset

    [baselines]
    methods = ["simplecil", "ranpac", "joint_probe"]  # default: those that run by default
    ranpac_projection_dim = 10000  # a baseline's own parameter: METHOD_NAME (its class declares it)

    [ablation]
    flows = ["tosca", "tosca_r", "adapter", "calibrator"]
    l1_off = true                # the paper's flow also with L1 = 0 ("all": every flow)

    [[stores]]
    name = "EuroSAT"
    path = "cache/eurosat/effnet_lite0-demo300.zarr"   # or model + dataset + data_root to extract
    init_cls = 2                 # default: the dataset's paper split
    increment = 2
    weights = "ImageNet-1k"      # what the backbone's weights are, said in the table
    read_as = ""                 # another labelling of its images (a scenario's: cifar100_superclasses)

Presets are the same structure in Python (`PRESETS`): `local` (the real archives here,
EfficientNet-Lite0) and `paper` (the paper's six benchmarks on ViT-B/16 IN-21k).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from featcache.store.object_store import is_remote, store_location
from tosca_foundation.arguments import as_path, shown
from tosca_foundation.errors import UserError, UserTypeError, UserValueError
from tosca_foundation.files import read_toml
from tosca_foundation.names import did_you_mean
from tosca_foundation.registry import Registry
from tosca_heads.method.baseline_registry import ALL, BASELINES, default_baselines, given_params
from tosca_heads.method.luca import FLOWS
from tosca_heads.method.protocol import DEFAULT_ORDER_SEED, ValidationConfig
from tosca_heads.method.recipe import FIELD_TYPES, TrainConfig, recipe
from tosca_heads.method.scenarios import DEFAULT_SCENARIO, scenario
from tosca_heads.routers import HEADLINE, ROUTERS, is_honest, reference_text

PAPER_L1 = TrainConfig().l1
MAX_CELLS = 10_000


@dataclass(frozen=True)
class StoreSpec:
    """One column of the tables: a store on disk, or what to extract to make it."""

    name: str
    path: Path | None = None
    model: str | None = None
    dataset: str | None = None
    data_root: Path | None = None
    limit_per_class: int | None = None
    init_cls: int | None = None
    increment: int | None = None
    weights: str = ""
    read_as: str = (
        ""  # under a scenario: another labelling of the store's images (`scenario_runs.store_labels`)
    )

    @property
    def label(self) -> str:
        return f"{self.name} ({self.weights})" if self.weights else self.name


@dataclass(frozen=True)
class SuiteSpec:
    name: str
    stores: tuple[StoreSpec, ...]
    seeds: tuple[int, ...] = (0,)
    order_seeds: tuple[int, ...] = (DEFAULT_ORDER_SEED,)
    routers: tuple[str, ...] = HEADLINE
    flags: Mapping[str, Any] = field(default_factory=dict)
    baselines: tuple[str, ...] = field(default_factory=default_baselines)
    # the baselines' own parameters given (METHOD_NAME -> value, checked; `baseline_registry.Param`;
    # a seed parameter is the cell's seed)
    baseline_params: Mapping[str, Any] = field(default_factory=dict)
    flows: tuple[str, ...] = ()
    l1_off: tuple[str, ...] = ()  # the flows also trained with L1 = 0
    primary: str = "entropy"  # the router the claims and the ablation read
    val_fraction: float = 0.0  # a validation split held out of each class's training images (0: none)
    val_seed: int = 0
    scenario: str = DEFAULT_SCENARIO  # the one scenario of every table (`_scenario`)
    scenario_values: Mapping[str, Any] = field(default_factory=dict)  # its values, every store's

    @property
    def validation(self) -> ValidationConfig:
        return ValidationConfig(self.val_fraction, self.val_seed)

    def train(self, seed: int, flow: str = "tosca", l1: float | None = None) -> TrainConfig:
        """The recipe of a TOSCA cell: the paper preset, the suite's flags, then the cell's own."""
        flags = {**self.flags, "seed": seed, "flow": flow}
        if l1 is not None:
            flags["l1"] = l1
        return recipe("paper", flags)

    @property
    def main_l1(self) -> float:
        return float(self.flags.get("l1", PAPER_L1))


SECTIONS = {
    "": {
        *("name", "scenario", "scenario_values", "seeds", "order_seeds", "val_fraction", "val_seed"),
        *("stores", "tosca", "baselines", "ablation"),
    },
    "tosca": {"routers", "flags", "primary"},
    "baselines": {"methods"},  # and each baseline's own parameters (`_baseline_params`)
    "ablation": {"flows", "l1_off"},
    "stores": {f.name for f in fields(StoreSpec)},
}


def load_suite(path: Path) -> SuiteSpec:
    """A SUITE.toml, checked (relative paths are taken from the file's folder).

    >>> _ = (TMP / "SUITE.toml").write_text('seeds = [0, 1]\\n[[stores]]\\nname = "tiny"\\npath = "store.zarr"')
    >>> spec = load_suite(TMP / "SUITE.toml")
    >>> spec.seeds, spec.stores[0].path == TMP.resolve() / "store.zarr"
    ((0, 1), True)
    """
    path = as_path("load_suite", "path", path)
    data = read_toml(path, "suite file")  # bounded: never a fifo, nothing huge or nested too deep
    return parse_suite(data, path.resolve().parent, str(path))


def parse_suite(data: Mapping[str, Any], base: Path, where: str = "the suite") -> SuiteSpec:
    """A suite from its TOML structure (or a preset's), every field checked; relative paths are
    taken from `base`.

    >>> spec = parse_suite({"stores": [{"name": "A", "path": "a.zarr"}], "ablation": {"flows": ["tosca", "adapter"]}}, TMP)
    >>> spec.flows, spec.routers
    (('tosca', 'adapter'), ('entropy', 'lda', 'batch', 'oracle'))
    >>> parse_suite({"stores": [{"name": "A", "path": "a.zarr"}], "tosca": {"routers": ["psychic"]}}, TMP)
    Traceback (most recent call last):
    ...
    tosca_foundation.errors.UserValueError: the suite: unknown tosca.routers entry 'psychic': use any of ...
    """
    if not isinstance(data, Mapping):
        raise UserTypeError(
            f"parse_suite() keyword data must be a dict (a SUITE.toml's tables), got {shown(data)}"
        )
    base = as_path("parse_suite", "base", base)
    _keys(data, "", where)
    stores = data.get("stores")
    if not isinstance(stores, list) or not stores:
        raise UserError(f"{where} names no [[stores]]: give at least one (a path, or model + dataset)")
    tosca, baselines, ablation = (_section(data, key, where) for key in ("tosca", "baselines", "ablation"))
    named = baselines.get("methods", list(default_baselines()))
    methods = _names(
        list(BASELINES) if named in (ALL, [ALL]) else named, "baselines.methods", BASELINES, where, empty=True
    )
    spec = SuiteSpec(
        name=_label(data.get("name", Path(where).stem), "name", where),
        scenario=_scenario(data.get("scenario", DEFAULT_SCENARIO), where),
        stores=tuple(_store(s, i, base, where) for i, s in enumerate(stores)),
        seeds=_ints(data.get("seeds", [0]), "seeds", where),
        order_seeds=_ints(data.get("order_seeds", [DEFAULT_ORDER_SEED]), "order_seeds", where),
        routers=_names(tosca.get("routers", list(HEADLINE)), "tosca.routers", ROUTERS, where),
        flags=_flags(tosca.get("flags", {}), where),
        baselines=methods,
        baseline_params=_baseline_params(baselines, methods, where),
        flows=_names(ablation.get("flows", []), "ablation.flows", FLOWS, where, empty=True),
        l1_off=_l1_off(ablation.get("l1_off", False), ablation.get("flows", []), where),
        primary=_primary(tosca.get("primary", "entropy"), where),
        val_fraction=data.get("val_fraction", 0.0),
        val_seed=data.get("val_seed", 0),
        scenario_values=data.get("scenario_values", {}),
    )
    try:
        spec.validation.validate()
    except UserError as exc:
        raise UserError(
            f"{where}: {str(exc).replace('--val-fraction', 'val_fraction').replace('--val-seed', 'val_seed')}"
        ) from None
    names = [s.name for s in spec.stores]
    if len(set(names)) != len(names):
        raise UserError(
            f"{where}: two stores are named {sorted(n for n in names if names.count(n) > 1)[0]!r}"
        )
    folders: dict[str, str] = {}
    for name in names:  # case-blind: a macOS disk would merge "A" and "a"
        other = folders.setdefault(folder_name(name).lower(), name)
        if other != name:
            raise UserError(
                f"{where}: stores {other!r} and {name!r} would share the cells folder {folder_name(name)!r}; "
                "rename one (letters, digits, '_', '.' and '-' are kept, the rest become '-')"
            )
    _check_scenario(spec, data, where)
    cells = (
        len(spec.stores)
        * len(spec.seeds)
        * len(spec.order_seeds)
        * (1 + len(spec.flows) + len(spec.l1_off) + len(spec.baselines))
    )
    if cells > MAX_CELLS:
        raise UserError(f"{where} asks for {cells:,} cells; at most {MAX_CELLS:,}")
    return spec


def folder_name(name: str) -> str:
    """The folder a store's cells (or a suite, under the runs root) go in: its name with anything but
    letters, digits, '_', '.' and '-' made '-', never '.' or '..' (which would climb out of `cells/`)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "store"


def _baseline_params(block: Mapping[str, Any], methods: tuple[str, ...], where: str) -> dict[str, Any]:
    """The [baselines] keys that are the baselines' own parameters (METHOD_NAME), checked against
    what their classes declare (`baseline_registry.given_params`; a seed parameter is the suite's seeds)."""
    given = {k: v for k, v in block.items() if k not in SECTIONS["baselines"]}
    try:
        return given_params(methods, given, spell=lambda key: f"baselines.{key}", seeds=False)
    except UserError as exc:
        raise UserError(f"{where}: {exc}") from None


def _keys(block: Mapping[str, Any], section: str, where: str) -> None:
    if section == "baselines":
        return  # its own keys and the baselines' parameters: `_baseline_params`
    unknown = sorted(set(block) - SECTIONS[section])
    if unknown:
        prefix = f"[{section}] " if section else ""
        known = sorted(SECTIONS[section])
        raise UserValueError(
            f"{where}: unknown {prefix}key {unknown[0]!r}{did_you_mean(unknown[0], known)}: use any of {', '.join(known)}"
        )


def _section(data: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    block = data.get(key, {})
    if not isinstance(block, Mapping):
        raise UserError(f"{where}: [{key}] must be a table")
    _keys(block, key, where)
    return block


def _text(value: Any, what: str, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise UserError(f"{where}: {what} must be a non-empty string, got {value!r}")
    return value


def _label(value: Any, what: str, where: str) -> str:
    """A name shown in tables and used in folder names: one line, no table separators."""
    text = _text(value, what, where)
    if len(text) > 64 or any(c in text for c in "|`\n\r\t") or not text.isprintable():
        raise UserError(
            f"{where}: {what} {text[:70]!r} must be one printable line of at most 64 characters without | or `"
        )
    return text


def _l1_off(value: Any, flows: Any, where: str) -> tuple[str, ...]:
    """`true`: the paper's flow also with L1 = 0; "all": every ablation flow too; `false`: none."""
    if value == "all":
        return tuple(dict.fromkeys(["tosca", *(flows if isinstance(flows, list) else [])]))
    return ("tosca",) if _flag(value, 'ablation.l1_off (true, false or "all")', where) else ()


def _flag(value: Any, what: str, where: str) -> bool:
    if not isinstance(value, bool):
        raise UserError(f"{where}: {what} must be true or false, got {value!r}")
    return value


def _ints(value: Any, what: str, where: str, minimum: int = 0) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        raise UserError(f"{where}: {what} must be a non-empty list of integers, got {value!r}")
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise UserError(f"{where}: {what} holds {v!r}: use integers >= {minimum}")
    return tuple(dict.fromkeys(value))


def _names(
    value: Any, what: str, known: Mapping[str, Any] | tuple[str, ...], where: str, empty: bool = False
) -> tuple[str, ...]:
    if not isinstance(value, list) or (not value and not empty):
        raise UserError(f"{where}: {what} must be a {'' if empty else 'non-empty '}list of names")
    for name in value:
        if name not in known:
            raise UserValueError(
                f"{where}: unknown {what} entry {name!r}{did_you_mean(name, known)}: use any of {', '.join(known)}"
            )
    if isinstance(known, Registry):  # an alias stands for its name
        value = [known.name_of(name) for name in value]
    return tuple(dict.fromkeys(value))


def _scenario(value: Any, where: str) -> str:
    """The suite's one scenario (issue 56 point 5: a table never mixes scenarios, so a list of them
    is refused, naming the way: a suite per scenario): its registered name."""
    if isinstance(value, list):
        raise UserValueError(
            f"{where}: scenario must be one name, got {shown(value)}: a suite's tables never mix scenarios "
            "(write a suite per scenario)"
        )
    if not isinstance(value, str):
        raise UserTypeError(f"{where}: scenario must be a scenario's name, got {shown(value)}")
    try:
        return scenario(value, "scenario").name
    except UserError as exc:
        raise UserValueError(f"{where}: {exc}") from None


def _check_scenario(spec: SuiteSpec, data: Mapping[str, Any], where: str) -> None:
    """What a suite of another scenario than `cil` does not have, one line each: values for `cil`
    (its split is each store's init_cls and increment), an ablation or class orders (the
    class-incremental tables'), a validation split (a scenario suite chooses nothing: its table
    shows every method and router), a reference router (never a scenario's result), a store's
    split the scenario does not take; and its values, each checked by the scenario's rule."""
    kind = scenario(spec.scenario, "scenario")
    values = spec.scenario_values
    if not isinstance(values, Mapping):
        raise UserTypeError(
            f"{where}: scenario_values must be a table of the scenario's values, got {shown(values)}"
        )
    if spec.scenario == DEFAULT_SCENARIO:
        if values or any(s.read_as for s in spec.stores):
            raise UserValueError(
                f"{where}: scenario_values and read_as are for a scenario other than cil; cil's split is each "
                "store's init_cls and increment"
            )
        return
    try:
        kind.checked(values)
    except UserError as exc:
        raise UserValueError(f"{where}: {exc}") from None
    refused = [
        ("ablation", bool(spec.flows or spec.l1_off)),
        ("order_seeds", spec.order_seeds != (DEFAULT_ORDER_SEED,)),
        ("val_fraction", "val_fraction" in data and spec.val_fraction != 0),
    ]
    for key, given in refused:
        if given:
            raise UserValueError(
                f"{where}: {key} is for class-incremental suites; scenario {kind.name} takes none "
                "(a scenario suite's table shows every method and router, choosing nothing)"
            )
    references = [r for r in spec.routers if not is_honest(r)]
    if references and "routers" in data.get("tosca", {}):
        raise UserValueError(
            f"{where}: tosca.routers {references[0]!r} is a reference ({reference_text(references[0])}), never a "
            f"scenario's result; use honest ones"
        )
    takes = {p.name for p in kind.params}
    for store in spec.stores:
        for key in ("init_cls", "increment"):
            if getattr(store, key) is not None and key not in takes:
                raise UserValueError(
                    f"{where}: store {store.name!r}: {key} does not apply to scenario {kind.name} (it takes: "
                    f"{', '.join(sorted(takes)) or 'none'}; give them in scenario_values)"
                )


def _primary(value: Any, where: str) -> str:
    """The router the ablation and the claims read: an honest one (a reference never ranks, chooses
    or stands for the method; asked of the router registry, never by name)."""
    honest = [name for name in ROUTERS if is_honest(name)]
    name = _names([value], "tosca.primary", ROUTERS, where)[0] if isinstance(value, str) else None
    if name is None:
        raise UserError(f"{where}: tosca.primary must be a router's name: use one of {', '.join(honest)}")
    if not is_honest(name):
        raise UserError(
            f"{where}: tosca.primary {name!r} is a reference router ({reference_text(name)}): a reference is never "
            f"the suite's primary router; use an honest one: {', '.join(honest)}"
        )
    return name


def _flags(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise UserError(f"{where}: tosca.flags must be a table of fit flags")
    for name in value:
        if name not in FIELD_TYPES or name in ("seed", "flow"):
            usable = ", ".join(f for f in FIELD_TYPES if f not in ("seed", "flow"))
            raise UserError(
                f"{where}: unknown tosca.flags entry {name!r} (seeds and flows have their own keys): use any of {usable}"
            )
    flags = dict(value)
    try:
        recipe("paper", flags)
    except UserError as exc:
        raise UserError(f"{where}: tosca.flags: {exc}") from None
    return flags


def _store(block: Any, index: int, base: Path, where: str) -> StoreSpec:
    if not isinstance(block, Mapping):
        raise UserError(f"{where}: stores entry {index + 1} must be a table")
    _keys(block, "stores", where)
    name = _label(block.get("name"), f"stores entry {index + 1}'s name", where)
    here = f"{where}: store {name!r}"

    def path(key: str) -> Path | None:
        value = block.get(key)
        if value is None:
            return None
        text = os.path.expandvars(_text(value, key, here))
        if key == "path" and is_remote(found := store_location(text, flag=f"{here}: path")):
            return found  # type: ignore[return-value]  # on object storage: its URL
        given = Path(text)
        return given if given.is_absolute() else base / given

    given = {key: block.get(key) for key in SECTIONS["stores"]}
    given.update(
        name=name,
        path=path("path"),
        data_root=path("data_root"),
        weights=block.get("weights", ""),
        read_as=block.get("read_as", ""),
    )
    spec = StoreSpec(**given)
    for key in ("model", "dataset", "weights", "read_as"):
        value = getattr(spec, key)
        if value is not None and not isinstance(value, str):
            raise UserError(f"{here}: {key} must be a string, got {value!r}")
    if spec.weights:
        _label(spec.weights, "weights", here)
    for key in ("limit_per_class", "init_cls", "increment"):
        value = getattr(spec, key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise UserError(f"{here}: {key} must be an integer >= 1, got {value!r}")
    if spec.path is None and not (spec.model and spec.dataset):
        raise UserError(f"{here} has neither a path nor model + dataset to extract it from")
    return spec


def with_stores(spec: SuiteSpec, paths: Mapping[str, Path]) -> SuiteSpec:
    """The same suite on other stores (by name): how a preset runs on stand-in stores."""
    unknown = sorted(set(paths) - {s.name for s in spec.stores})
    if unknown:
        raise UserError(
            f"no store {unknown[0]!r} in suite {spec.name!r}: use any of {', '.join(s.name for s in spec.stores)}"
        )
    stores = tuple(replace(s, path=Path(paths[s.name])) if s.name in paths else s for s in spec.stores)
    return replace(spec, stores=stores)
