"""The baselines by name (`BASELINES`), light: `tosca list`, a refused name and a plug-in's
`register_baseline` need no torch. The built-in estimators live in `method.baseline_estimators`
(SimpleCIL, RanPAC, the joint probe) and `method.baselines` (the frozen-feature methods, one file
each) and are imported when one is first used. Each says what it is once, on its class (the first
line of its docstring, `reference`, `paper`); they are declared here from `method.baseline_index`,
generated from the classes (`python -m tosca_heads.method.baseline_index_writer`; a test fails
when it is stale), so listing them imports no class.

Everything else about a baseline is declared once, on its class, and worked out here:
- whether it runs when no methods are named (`runs_by_default = True`): `default_baselines()`, what
  `tosca baselines`, the API's `baselines()`, a suite without `methods` and the demo run;
- its own parameters (`params = (Param(...), ...)`), each with its rule (`Interval`, `Options`)
  whose words are its refusal: one spelling for each, `METHOD_NAME` (`ranpac_projection_dim`) as a
  suite's `[baselines]` key and the API's keyword, `--METHOD-NAME` (`--ranpac-projection-dim`) on
  the command line, NAME (`projection_dim`) as the estimator's keyword; its type, default and check
  (`arguments`: the estimator's keywords, each value checked in one line); its flags in a cell's
  command (`flags`); its label in tables (`label`, `described`);
- its cost arithmetic (`work`) and what it needs of the machine (`check_fits`).
"""

from __future__ import annotations

import copy
import functools
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tosca_foundation.arguments import check_types, shown
from tosca_foundation.errors import UserError, UserTypeError, UserValueError
from tosca_foundation.names import as_flag, did_you_mean  # as_flag: a key's --flag
from tosca_foundation.registry import Registry
from tosca_heads.method.baseline_index import INDEX

BASELINES: Registry[type] = Registry("baseline", "tosca_heads.method.baseline_registry:BASELINES")

for _row in INDEX:  # the built-ins, declared from the generated index: no class imported here
    BASELINES.declare(str(_row["name"]), str(_row["target"]), str(_row["description"]), _row["reference"])

ESTIMATOR_METHODS = ("predict", "num_parameters")


def paper_of(name: str) -> str:
    """The paper a baseline follows, its class's `paper` ("" for none, as the joint probe): a
    built-in's read from the generated index (no import), a plug-in's from its class."""
    entry = next((e for e in BASELINES.entries() if e.name == name), None)
    if entry is None:
        return ""
    if entry.built_in:
        return next((str(row["paper"]) for row in INDEX if row["name"] == name), "")
    return str(getattr(BASELINES[name], "paper", "") or "")


def register_baseline(name: str, aliases: tuple[str, ...] = ()) -> Callable[[type], type]:
    """A class decorator adding a baseline under `name` (and other names, `aliases`). The class follows the estimators of
    `method.baselines`: `__init__(device=...)` stores arguments; `incremental = True` with
    `partial_fit(x, y)` (one task's data at a time) or `False` with `fit(x, y)` (every seen class
    at once); `predict(x)` returns incremental class ids; `num_parameters()` counts what it learned, and a
    static `parameters_for(dim, classes, /, **params)` (optional) says that count before fitting,
    from what was asked alone: tables show it (`parameter_count`), "not declared" without one.
    `reference = True` (or words saying why) marks one that is no continual method, such as a joint
    upper bound: it is reported beside the others, never as an honest result. `runs_by_default =
    True` makes it one of `default_baselines()` (run by `tosca baselines`, the API, a suite and the
    demo when no methods are named; without it, it runs where named). `params = (Param(...), ...)`
    declares its own parameters, each a keyword of `__init__` (whose default is the parameter's).

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

    check_types("register_baseline", register_baseline, {"name": name, "aliases": aliases})

    def decorate(cls: type) -> type:
        if not isinstance(cls, type):
            raise UserTypeError(f"register_baseline({name!r}) decorates a class, got {shown(cls)}")
        learn = "partial_fit" if getattr(cls, "incremental", None) else "fit"
        missing = [m for m in (learn, *ESTIMATOR_METHODS) if not callable(getattr(cls, m, None))]
        if not hasattr(cls, "incremental") or missing:
            raise UserTypeError(f"baseline {name!r} lacks {', '.join(missing) or 'incremental'}")
        declared_params(cls)  # each names a keyword of __init__ whose default keeps its rule
        what = (cls.__doc__ or "").strip().partition("\n")[0]
        BASELINES.add(name, cls, what, getattr(cls, "reference", False), cls.__module__, aliases)
        return cls

    return decorate


# ------------------------------------------------------------------------------------------ parameters

KIND_SAID = {int: "an integer", float: "a number", str: "a text", bool: "true or false"}
BOUNDS = {"both": "[]", "left": "[)", "right": "(]", "neither": "()"}


def _number(value: float) -> str:
    """A bound as a person writes it: 10000 -> 10,000; 2**32 stays 2**32 (a power of two from 2**16)."""
    if isinstance(value, int) and value >= 2**16 and value & (value - 1) == 0:
        return f"2**{value.bit_length() - 1}"
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


class Constraint(Protocol):
    """A parameter's rule: `holds(value)`, and in words (`str`) what it asks ("at least 1"), the
    words a refusal says. `Interval` and `Options` are the usual two; a plug-in may write its own."""

    def holds(self, value: Any) -> bool: ...


@dataclass(frozen=True)
class Interval:
    """The range a number must lie in (as scikit-learn's `Interval`): `low` and `high` (None: no
    bound), `closed` ("both", "left", "right" or "neither") saying which bounds are allowed. The
    check and its words both come from these fields, so the two never disagree."""

    low: float | None = None
    high: float | None = None
    closed: str = "both"

    def __post_init__(self) -> None:
        if self.closed not in BOUNDS:
            raise ValueError(f"Interval closed={self.closed!r}: use one of {', '.join(BOUNDS)}")

    def holds(self, value: float) -> bool:
        left, right = self.closed in ("both", "left"), self.closed in ("both", "right")
        above = self.low is None or (value >= self.low if left else value > self.low)
        below = self.high is None or (value <= self.high if right else value < self.high)
        return above and below

    def __str__(self) -> str:
        """What a value must be, in words: "at least 1", "in [0, 2**32)", "more than 0"."""
        left, right = self.closed in ("both", "left"), self.closed in ("both", "right")
        if self.high is None:
            return (
                "any number"
                if self.low is None
                else f"{'at least' if left else 'more than'} {_number(self.low)}"
            )
        if self.low is None:
            return f"{'at most' if right else 'less than'} {_number(self.high)}"
        brackets = BOUNDS[self.closed]
        return f"in {brackets[0]}{_number(self.low)}, {_number(self.high)}{brackets[1]}"


@dataclass(frozen=True)
class Options:
    """A value that must be one of a few (`choices`), with its words: "one of 'rbf', 'linear'"."""

    choices: tuple[Any, ...]

    def holds(self, value: Any) -> bool:
        return value in self.choices

    def __str__(self) -> str:
        return "one of " + ", ".join(repr(choice) for choice in self.choices)


@dataclass(frozen=True)
class Param:
    """One parameter of a baseline, declared once on its class: `name` (the estimator's keyword;
    users write METHOD_NAME, --METHOD-NAME on the command line), `kind` (int, float, str or bool),
    `help`, `valid` (a `Constraint`: `Interval`, `Options` or one's own; its words are the
    refusal's), `said` (how a table or a plan names a value: "M = {:,}"; "" for not named) and
    `seed` (the suite's seed goes here, one cell per seed, instead of a key of its own). Its
    `default` is its keyword's default in the estimator's `__init__`, written there only
    (`params_of` fills it in); a default that breaks its own rule is refused when a plug-in is
    registered (tests/tosca_heads/method/test_baseline_declarations.py holds the built-ins to it)."""

    name: str
    kind: type
    help: str
    valid: Constraint | None = None
    said: str = ""
    seed: bool = False
    default: Any = field(default=None, init=False)  # the estimator's __init__'s (`declared_params`)

    def __post_init__(self) -> None:
        if self.kind not in KIND_SAID:
            raise ValueError(f"parameter {self.name!r}: kind {self.kind!r} is none of int, float, str, bool")
        if self.valid is not None and not callable(getattr(self.valid, "holds", None)):
            raise ValueError(
                f"parameter {self.name!r}: valid={self.valid!r} is no constraint (an Interval, Options, or "
                "an object with holds(value) whose str says what is valid)"
            )

    def check(
        self, value: Any, spelled: str, text: bool = False, error: type[Exception] | None = None
    ) -> Any:
        """`value` of this parameter's kind and within its rule, else one line naming it as `spelled`
        (--ranpac-projection-dim, baselines.ranpac_projection_dim, ...) and saying what is valid, as
        `error` (default: a `UserTypeError` for the kind, a `UserValueError` for the rule);
        `text`: the value is the command line's text, converted first."""
        wrong_kind, out_of_rule = (error, error) if error is not None else (UserTypeError, UserValueError)
        if text and isinstance(value, str) and self.kind is not str:
            try:
                value = (
                    {"true": True, "false": False}[value.lower()] if self.kind is bool else self.kind(value)
                )
            except (KeyError, ValueError):
                raise wrong_kind(f"{spelled} must be {KIND_SAID[self.kind]}, got {value!r}") from None
        allowed = (int, float) if self.kind is float else self.kind
        if (isinstance(value, bool) and self.kind is not bool) or not isinstance(value, allowed):
            raise wrong_kind(f"{spelled} must be {KIND_SAID[self.kind]}, got {value!r}")
        if self.kind is float and not math.isfinite(value):  # inf passes an Interval without a high bound
            rule = f" {self.valid}" if self.valid is not None else ""
            raise out_of_rule(f"{spelled} must be a finite number{rule}, got {value!r}")
        if self.valid is not None and not self.valid.holds(value):
            raise out_of_rule(f"{spelled} must be {self.valid}, got {value!r}")
        return value


def default_baselines() -> tuple[str, ...]:
    """The baselines that run when none are named, in the registry's order: those whose class says
    `runs_by_default = True` (the built-ins do; a plug-in runs only where named unless it says so).
    Imports the built-in classes: ask it where a baseline is about to run, never at import.

    >>> default_baselines()
    ('simplecil', 'ranpac', 'joint_probe')
    """
    return tuple(name for name in BASELINES if getattr(BASELINES[name], "runs_by_default", False))


ALL = "all"  # a methods list naming every registered baseline


def baseline_names(named: Sequence[str] | None, what: str = "--methods") -> tuple[str, ...]:
    """The baselines a methods list names, by their registered names (an alias is its name; an
    unknown one refused with the closest, in one line naming `what`): None gives
    `default_baselines()`, `all` every registered baseline (references included) in the registry's
    order, plug-ins too.

    >>> baseline_names(["ranpac", "simplecil"])
    ('ranpac', 'simplecil')
    >>> baseline_names(["all"])[:3]
    ('simplecil', 'ranpac', 'joint_probe')
    """
    if named is None:
        return default_baselines()
    if ALL in named:
        return tuple(BASELINES)
    return tuple(dict.fromkeys(BASELINES.pick(m, what) for m in named or ("(none)",)))


def params_of(method: str) -> tuple[Param, ...]:
    """The parameters a registered baseline declares (none for most), each with its default."""
    return declared_params(BASELINES[method])


@functools.cache
def declared_params(cls: type) -> tuple[Param, ...]:
    """A baseline class's `params`, each with its `default` taken from the keyword of `__init__` it
    names (the one place a default is written); a declaration that names no keyword with a default,
    or whose default breaks its own rule, is a ValueError (a bug of the class, not of a user)."""
    keywords = inspect.signature(cls).parameters
    found = []
    for param in getattr(cls, "params", ()):
        keyword = keywords.get(param.name) if isinstance(param, Param) else None
        if keyword is None or keyword.default is inspect.Parameter.empty:
            raise ValueError(
                f"baseline {cls.__name__}: params holds {param!r}, not a Param named after a keyword of "
                "__init__ with a default"
            )
        param = copy.copy(param)
        object.__setattr__(param, "default", keyword.default)  # frozen: set once, here
        found.append(param)
        param.check(param.default, f"baseline {cls.__name__}'s {param.name} default", error=ValueError)
    return tuple(found)


def key_of(method: str, param: Param) -> str:
    """A parameter's one spelling: METHOD_NAME (the command line's --METHOD-NAME)."""
    return f"{method}_{param.name}"


def label(method: str) -> str:
    """A baseline's name in tables: its class's `label` ("RanPAC"), else its registered name."""
    return str(getattr(BASELINES[method], "label", method))


def described(method: str, given: Mapping[str, Any] | None = None) -> str:
    """Its label with the parameters that say themselves: "RanPAC (M = 10,000)"."""
    values = arguments(method, given or {})
    said = [p.said.format(values[p.name]) for p in params_of(method) if p.said]
    return label(method) + (f" ({', '.join(said)})" if said else "")


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
            raise UserValueError(
                f"{spell(key)} is not set here: each cell's seed is one of the suite's `seeds`"
            )
        if key not in known:
            offered = [spell(key_of(m, p)) for m in methods for p in params_of(m) if seeds or not p.seed]
            hint = did_you_mean(spell(key), offered) if offered else ""
            raise UserTypeError(
                f"unknown {spell(key)}{hint}: the baselines' own parameters are "
                f"{', '.join(offered) if offered else 'none (' + ', '.join(methods) + ' declare none)'}"
            )
        found[key] = known[key].check(value, spell(key), text)
    return found


def arguments(method: str, given: Mapping[str, Any], seed: int | None = None) -> dict[str, Any]:
    """A baseline's keywords for its class: each declared parameter's value in `given` (METHOD_NAME,
    checked by `given_params`) or its default; `seed` (a suite cell's) for its seed parameter."""
    values = {}
    for param in params_of(method):
        value = given.get(key_of(method, param), param.default)
        values[param.name] = seed if param.seed and seed is not None else value
    return values


def flags(method: str, values: Mapping[str, Any]) -> list[str]:
    """The command-line flags that give a baseline these keywords (`arguments`' answer)."""
    return [part for p in params_of(method) for part in (as_flag(key_of(method, p)), str(values[p.name]))]


def deterministic(method: str) -> bool:
    """A baseline whose class says `deterministic = True` gives the same answers on every seed: a
    suite runs it once per class order."""
    return bool(getattr(BASELINES[method], "deterministic", False))


def least_per_class(method: str) -> int:
    """The training images of each class a baseline needs at least (its class's `least_per_class`:
    FeCAM's 2, a covariance of one image being none; 1 for any other)."""
    return int(getattr(BASELINES[method], "least_per_class", 1))


def too_few_images(
    method: str, ids: Sequence[Any], counts: Sequence[int], where: str, name_of: Callable[[Any], str] = str
) -> str:
    """The line where a class of `ids` has fewer training images (`counts`) than `method` needs
    ("" where none has): the first such class named by `name_of`, how many others, and `where`
    the counts were taken. One wording for every edge that checks it (a class-incremental plan, a
    scenario's stream, an estimator's task)."""
    least = least_per_class(method)
    short = [i for i, n in enumerate(counts) if n < least]
    if not short:
        return ""
    more = f" (and {len(short) - 1} other class(es))" if len(short) > 1 else ""
    return (
        f"{label(method)} needs {least} or more training images of each class: class "
        f"{name_of(ids[short[0]])} has {int(counts[short[0]])}{more} in {where}"
    )


def parameter_count(method: str, values: Mapping[str, Any], dim: int, classes: int) -> int | None:
    """A baseline's parameter count, a function of what was asked: its keywords (`arguments`'
    answer; a missing one is its default), the store's feature `dim` and its `classes`, as its
    class's `parameters_for(dim, classes, **values)` works it out, never read off a fitted
    estimator or a file. None where the class declares no `parameters_for` (a plug-in may not:
    its tables say "not declared") or is not registered here. `check_baseline` holds the formula
    to the fitted estimator's `num_parameters()`."""
    formula = getattr(BASELINES[method], "parameters_for", None) if method in BASELINES else None
    if formula is None:
        return None
    given = {**{p.name: p.default for p in params_of(method)}, **values}
    return int(formula(dim, classes, **given))


def check_fits(
    method: str,
    values: Mapping[str, Any],
    dim: int,
    classes: int = 0,
    rows: int = 0,
    spell: Callable[[str], str] = as_flag,
) -> None:
    """What a baseline with these keywords needs on features of `dim` and `classes` classes (0:
    not known yet, as before a store is opened) fits this machine (its class's
    `check_fits(dim, classes=..., **values)`, when it declares one; `rows=`, the training rows at
    most, when known, for a method that solves the smaller of two forms): one line when it does not,
    a UserValueError naming its parameters as the caller spells them (`spell` of METHOD_NAME: the
    command line's `--klda-dim`, the API's `klda_dim`), whatever words the class wrote its hint in."""
    check = getattr(BASELINES[method], "check_fits", None)
    if check is None:
        return
    try:
        check(dim, classes=classes, **({"rows": rows} if rows else {}), **values)
    except UserError as refused:
        said = str(refused)
        for param in sorted(params_of(method), key=lambda p: -len(key_of(method, p))):  # longest first
            said = said.replace(as_flag(key_of(method, param)), spell(key_of(method, param)))
        raise UserValueError(said) from None
