"""The baselines by name (`BASELINES`), light: `tosca list`, a refused name and a plug-in's
`register_baseline` need no torch. The built-in estimators live in `method.baselines` and are
imported when one is first used; each is declared here with the first line of its class's
docstring and its `reference` (tests/cli/test_startup.py holds them to their classes).

A baseline's own parameters are `Param`s declared on its class (`params = (Param(...), ...)`);
everything else is worked out from them here: one spelling for each, `METHOD_NAME` (`ranpac_m`)
as a suite's `[baselines]` key and the API's keyword, `--METHOD-NAME` (`--ranpac-m`) on the command
line; its type, default and check (`arguments`: the estimator's keywords, each value checked in one
line); its flags in a cell's command (`flags`); its label in tables (`label`, `described`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from featcache.foundation.errors import UserError
from featcache.foundation.names import did_you_mean
from featcache.foundation.registry import Registry

BASELINES: Registry[type] = Registry("baseline", "tosca_heads.method.baseline_names:BASELINES")

_HOME = "tosca_heads.method.baselines"
BASELINES.declare(
    "simplecil", f"{_HOME}:SimpleCIL", "Prototype classifier: cosine similarity to each class's mean feature."
)
BASELINES.declare(
    "ranpac",
    f"{_HOME}:RanPAC",
    "Random-projection ridge classifier with Gram matrices G = H^T H and Q = H^T Y kept across tasks.",
)
BASELINES.declare(
    "joint_probe",
    f"{_HOME}:JointProbe",
    "Softmax regression on standardised features, full-batch L-BFGS, warm-started stage to stage.",
    reference="sees every task at once",
)

ESTIMATOR_METHODS = ("predict", "num_parameters")


def register_baseline(name: str, aliases: tuple[str, ...] = ()) -> Callable[[type], type]:
    """A class decorator adding a baseline under `name` (and other names, `aliases`). The class follows the estimators of
    `method.baselines`: `__init__(device=...)` stores arguments; `incremental = True` with
    `partial_fit(x, y)` (one task's data at a time) or `False` with `fit(x, y)` (every seen class
    at once); `predict(x)` returns incremental class ids; `num_parameters()` counts what it learned.
    `reference = True` (or words saying why) marks one that is no continual method, such as a joint
    upper bound: it is reported beside the others, never as an honest result.

    >>> import numpy as np
    >>> @register_baseline("doc_nearest_first")
    ... class NearestFirst:
    ...     incremental = True
    ...     def __init__(self, device="cpu"):
    ...         self.device = device
    ...     def partial_fit(self, features, labels):
    ...         self.first_ = int(np.asarray(labels).min())
    ...         return self
    ...     def predict(self, features):
    ...         return np.full(len(features), self.first_)
    ...     def num_parameters(self):
    ...         return 1
    >>> "doc_nearest_first" in BASELINES
    True
    >>> del BASELINES["doc_nearest_first"]  # (a doctest leaves the registry as it found it)
    """

    def decorate(cls: type) -> type:
        learn = "partial_fit" if getattr(cls, "incremental", None) else "fit"
        missing = [m for m in (learn, *ESTIMATOR_METHODS) if not callable(getattr(cls, m, None))]
        if not hasattr(cls, "incremental") or missing:
            raise ValueError(f"baseline {name!r} lacks {', '.join(missing) or 'incremental'}")
        what = (cls.__doc__ or "").strip().partition("\n")[0]
        BASELINES.add(name, cls, what, getattr(cls, "reference", False), cls.__module__, aliases)
        return cls

    return decorate


# ------------------------------------------------------------------------------------------ parameters

KIND_SAID = {int: "an integer", float: "a number", str: "a text", bool: "true or false"}


@dataclass(frozen=True)
class Param:
    """One parameter of a baseline, declared on its class: `name` (users write METHOD_NAME, or
    --METHOD-NAME on the command line), `kind` (int, float, str or bool), `default`, `help`,
    `valid` (a check of a value of the right kind) with `must` (what `valid` asks, in words: "at
    least 1"), `argument` (the estimator's keyword; default `name`), `said` (how a table or a plan
    names a value: "M = {:,}"; "" for not named) and `seed` (the suite's seed goes here, one cell per
    seed, instead of a key of its own)."""

    name: str
    kind: type
    default: Any
    help: str
    valid: Callable[[Any], bool] | None = None
    must: str = ""
    argument: str = ""
    said: str = ""
    seed: bool = False

    @property
    def keyword(self) -> str:
        return self.argument or self.name


def params_of(method: str) -> tuple[Param, ...]:
    """The parameters a registered baseline declares (none for most)."""
    return tuple(getattr(BASELINES[method], "params", ()))


def key_of(method: str, param: Param) -> str:
    """A parameter's one spelling: METHOD_NAME (the command line's --METHOD-NAME)."""
    return f"{method}_{param.name}"


def as_flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def label(method: str) -> str:
    """A baseline's name in tables: its class's `label` ("RanPAC"), else its registered name."""
    return str(getattr(BASELINES[method], "label", method))


def described(method: str, given: Mapping[str, Any] | None = None) -> str:
    """Its label with the parameters that say themselves: "RanPAC (M = 10,000)"."""
    values = arguments(method, given or {})
    said = [p.said.format(values[p.keyword]) for p in params_of(method) if p.said]
    return label(method) + (f" ({', '.join(said)})" if said else "")


def checked(value: Any, param: Param, spelled: str, text: bool = False) -> Any:
    """A parameter's value of its kind and passing its check, else one line naming `spelled`;
    `text`: the value is the command line's text, converted first."""
    if text and isinstance(value, str) and param.kind is not str:
        try:
            value = {"true": True, "false": False}[value.lower()] if param.kind is bool else param.kind(value)
        except (KeyError, ValueError):
            raise UserError(f"{spelled} must be {KIND_SAID[param.kind]}, got {value!r}") from None
    allowed = (int, float) if param.kind is float else param.kind
    if (isinstance(value, bool) and param.kind is not bool) or not isinstance(value, allowed):
        raise UserError(f"{spelled} must be {KIND_SAID[param.kind]}, got {value!r}")
    if param.valid is not None and not param.valid(value):
        raise UserError(f"{spelled} must be {param.must}, got {value!r}")
    return value


def given_params(
    methods: Sequence[str],
    given: Mapping[str, Any],
    spell: Callable[[str], str] = as_flag,
    text: bool = False,
    seeds: bool = True,
) -> dict[str, Any]:
    """The baselines' parameters a user gave (`given`: METHOD_NAME -> value, any registered
    baseline's), each checked and of its kind; one line for a name no baseline declares (naming
    those of `methods`) and, unless `seeds`, for a seed parameter (a suite's seeds are its own)."""
    known = {key_of(m, p): p for m in BASELINES for p in params_of(m)}
    found = {}
    for key, value in given.items():
        if key in known and known[key].seed and not seeds:
            raise UserError(f"{spell(key)} is not set here: each cell's seed is one of the suite's `seeds`")
        if key not in known:
            offered = [spell(key_of(m, p)) for m in methods for p in params_of(m) if seeds or not p.seed]
            hint = did_you_mean(spell(key), offered) if offered else ""
            raise UserError(
                f"unknown {spell(key)}{hint}: the baselines' own parameters are "
                f"{', '.join(offered) if offered else 'none (' + ', '.join(methods) + ' declare none)'}"
            )
        found[key] = checked(value, known[key], spell(key), text)
    return found


def arguments(method: str, given: Mapping[str, Any], seed: int | None = None) -> dict[str, Any]:
    """A baseline's keywords for its class: each declared parameter's value in `given` (METHOD_NAME,
    checked by `given_params`) or its default; `seed` (a suite cell's) for its seed parameter."""
    values = {}
    for param in params_of(method):
        value = given.get(key_of(method, param), param.default)
        values[param.keyword] = seed if param.seed and seed is not None else value
    return values


def flags(method: str, values: Mapping[str, Any]) -> list[str]:
    """The command-line flags that give a baseline these keywords (`arguments`' answer)."""
    return [part for p in params_of(method) for part in (as_flag(key_of(method, p)), str(values[p.keyword]))]


def deterministic(method: str) -> bool:
    """A baseline whose class says `deterministic = True` gives the same answers on every seed: a
    suite runs it once per class order."""
    return bool(getattr(BASELINES[method], "deterministic", False))


def check_fits(method: str, values: Mapping[str, Any], dim: int) -> None:
    """What a baseline with these keywords needs on features of `dim` fits this machine (its class's
    `check_fits(dim, **values)`, when it declares one): one line when it does not."""
    check = getattr(BASELINES[method], "check_fits", None)
    if check is not None:
        check(dim, **values)
