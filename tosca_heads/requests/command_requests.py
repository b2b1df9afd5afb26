"""What a user can ask of stage 2: one request per command (`tosca fit`, `sweep`, `baselines`,
`predict`, `demo`), its flags as values.

Plain data, import-light: the command line builds each command's options from these fields
(`tosca_foundation.options`), and must start fast whatever the command. Each request is
checked and run by its module: `runs.fit`, `sweeps.sweep`, `comparison.compare`,
`predict.predict_images`, `demo.run_demo`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tosca_foundation.names import Spell, as_flag
from tosca_foundation.options import ExtraFlag, option
from tosca_heads.method.recipe import RECIPE_FLAGS
from tosca_heads.routers import HEADLINE

STORE_HELP = "Store path (else found from --model/--dataset in CACHE_DIR)."
MODEL_HELP = "Backbone alias of the store to use."
DATASET_HELP = "Dataset of the store to use."
DEVICE_HELP = "Where stage 2 runs: auto (CUDA when available), cpu, cuda or cuda:N."
INIT_HELP = (
    "Classes in task 0 (default: the dataset's paper split; without one, at most 10 equal tasks of "
    "the fewest classes each, 2 or more)."
)
INCREMENT_HELP = "Classes per later task (default: as --init-cls)."
VAL_HELP = (
    "Share of each class's training samples held out as a validation split, scored beside test after "
    "every task (0: none, the paper's protocol; at most 0.5)."
)
VAL_SEED_HELP = "Seed of the validation split's draw (per class)."
LOG_HELP = (
    "Send the run to a tracker: mlflow[=TRACKING_URI] (default runs/mlflow/mlflow.db) or "
    "tensorboard[=LOGDIR] (default runs/tensorboard), or a plug-in's; repeatable (each needs its extra "
    "of tosca: mlflow, tensorboard)."
)
SWEEP_VAL_FRACTION = 0.1  # a sweep chooses a point: by default it holds out a validation split to choose on
DEMO_PER_CLASS = 300


def _lower_first(text: str) -> str:
    """'Epochs per task' -> 'epochs per task'; an acronym (SGD, L1) stays."""
    return text if text[:2].isupper() else text[0].lower() + text[1:]


# `tosca fit`'s recipe flags, one value each (into FitRequest.recipe)
FIT_FLAGS = tuple(ExtraFlag(f.name, f.kind, f"{f.help}.") for f in RECIPE_FLAGS)
# `tosca sweep`'s grid flags, comma-separated values each (into SweepRequest.grid): the recipe's,
# the seed as --seeds, and the task split's
SWEEP_FLAGS = (
    *(
        ExtraFlag(
            "seeds" if f.name == "seed" else f.name,
            str,
            f"Comma-separated values to sweep: {_lower_first(f.help)}.",
            "0" if f.name == "seed" else None,
            f.name,
        )
        for f in RECIPE_FLAGS
    ),
    ExtraFlag(
        "init_cls", str, "Comma-separated values to sweep: classes in task 0 (default: the paper split)."
    ),
    ExtraFlag("increment", str, "Comma-separated values to sweep: classes per later task."),
    ExtraFlag("order_seed", str, "Comma-separated values to sweep: class-order seed.", "1993"),
)


ROUTERS_HELP = (
    "Routers to show, comma-separated, or 'all' (default: every router but the on-request ones; each is "
    "evaluated and saved). An on-request router named here (fecam, klda, randumb: a baseline's cost) is "
    "computed too."
)


@dataclass(frozen=True)
class FitRequest:
    """`tosca fit` (None: not given). The recipe's own flags (method.recipe.RECIPE_FLAGS) come in
    `recipe`, flag -> value."""

    task: int | None = option(None, "Train tasks 0..TASK (default: all).")
    store: Path | None = option(None, STORE_HELP)
    model: str | None = option(None, MODEL_HELP, ("--model", "-m"))
    dataset: str | None = option(None, DATASET_HELP, ("--dataset", "-d"))
    cache_dir: Path = option(Path("cache"), "Where stores are searched.")
    run: Path | None = option(None, "Run directory (default: runs/<dataset>-<model>-...).", output=True)
    preset: str = option("paper", "Recipe preset; the recipe flags override it.")
    init_cls: int | None = option(None, INIT_HELP)
    increment: int | None = option(None, INCREMENT_HELP)
    order_seed: int = option(1993, "Seed of the class order (np.random.seed(1993) permutation).")
    val_fraction: float = option(0.0, VAL_HELP)
    val_seed: int = option(0, VAL_SEED_HELP)
    device: str = option("auto", DEVICE_HELP)
    log: tuple[str, ...] = option((), LOG_HELP, ("--log",))
    router: str | None = option(None, ROUTERS_HELP)
    scenario: str = option(
        "cil",
        "Scenario: cil (default), til, fscil, blurry or dil (docs/scenarios.md): TOSCA learns its stream; "
        "`tosca eval` and `tosca routers` read the run.",
    )
    set_values: tuple[str, ...] = option(
        (), "A scenario parameter, NAME=VALUE (repeatable; e.g. shots=5).", ("--set",)
    )
    read_as: str = option(
        "", "Read the store as another labelling of its images (cifar100 as cifar100_superclasses)."
    )
    recipe: dict[str, Any] = field(default_factory=dict)
    # the scenario's parameters from the Python API (`scenario_values=`), each checked by its rule
    scenario_values: Mapping[str, Any] = field(default_factory=dict)
    runs_root: Path = Path("runs")  # where a run without --run gets its folder
    write: bool = True  # False (Python only): nothing written, the run kept in memory
    # how a refusal names a field: the command line's flag (--val-fraction); the Python API's keyword
    # (val_fraction); not part of what is asked, so two requests asking the same compare equal
    spell: Spell = field(default=as_flag, compare=False, repr=False)


@dataclass(frozen=True)
class SweepRequest:
    """`tosca sweep`. The grid comes in `grid`: flag (sweeps.GRID_FLAGS) -> its comma-separated values
    as given; a flag not given is not swept."""

    store: Path | None = option(None, STORE_HELP)
    model: str | None = option(None, MODEL_HELP, ("--model", "-m"))
    dataset: str | None = option(None, DATASET_HELP, ("--dataset", "-d"))
    cache_dir: Path = option(Path("cache"), "Where stores are searched.")
    preset: str = option("paper", "Recipe preset for every flag not swept.")
    jobs: int | None = option(None, "Local worker processes (default: usable cores on the CPU, 1 on CUDA).")
    group: int | None = option(
        None, "Compatible points trained together (default: 1 on the CPU, what fits a GPU)."
    )
    device: str = option("auto", DEVICE_HELP)
    scheduler: str | None = option(None, "local:N, local-cuda, a Dask scheduler address or file.")
    out: Path | None = option(
        None, "Sweep folder; an existing one resumes (default: this grid's, else new).", output=True
    )
    rank_by: str | None = option(
        None,
        "Router whose A_last ranks the points (on the validation split; on test with --val-fraction 0); "
        "default: entropy, the paper's; under --scenario lda, the scenario's TOSCA default.",
    )
    val_fraction: float = option(
        SWEEP_VAL_FRACTION,
        "Share of each class's training samples held out to rank the points on (0: rank on test, said so).",
    )
    val_seed: int = option(0, VAL_SEED_HELP)
    shown: tuple[str, ...] | None = option(
        None, f"Routers of the tables (default: {', '.join(HEADLINE)}).", ("--router",), comma=True
    )
    dry_run: bool = option(
        False,
        "Print the plan (points to run, reused; an estimate of the time here) and stop; nothing is written.",
    )
    keep_modules: Path | None = option(
        None,
        "Keep each point's modules: a loadable run folder per point under this folder (default: none "
        "kept; the same numbers either way).",
        output=True,
    )
    log: tuple[str, ...] = option((), LOG_HELP + " A parent run, a child per point.", ("--log",))
    scenario: str = option(
        "cil",
        "Scenario: cil (default), til, fscil, blurry or dil (docs/scenarios.md): every point learns its stream "
        "and is ranked on the validation split read the same way.",
    )
    set_values: tuple[str, ...] = option(
        (), "A scenario parameter, NAME=VALUE (repeatable; one value each: e.g. shots=5).", ("--set",)
    )
    read_as: str = option(
        "", "Read the store as another labelling of its images (cifar100 as cifar100_superclasses)."
    )
    grid: dict[str, str | Sequence[Any]] = field(default_factory=dict)  # Python: lists of values too
    # the scenario's parameters from the Python API (`scenario_values=`), each checked by its rule
    scenario_values: Mapping[str, Any] = field(default_factory=dict)
    runs_root: Path = Path("runs")
    # how a refusal names a field: the command line's flag (--val-fraction); the Python API's keyword
    # (val_fraction); not part of what is asked, so two requests asking the same compare equal
    spell: Spell = field(default=as_flag, compare=False, repr=False)


@dataclass(frozen=True)
class BaselinesRequest:
    """`tosca baselines`."""

    store: Path | None = option(None, STORE_HELP)
    model: str | None = option(None, MODEL_HELP, ("--model", "-m"))
    dataset: str | None = option(None, DATASET_HELP, ("--dataset", "-d"))
    cache_dir: Path = option(Path("cache"), "Where stores are searched.")
    init_cls: int | None = option(None, INIT_HELP + " With --run: the run's.")
    increment: int | None = option(None, INCREMENT_HELP + " With --run: the run's.")
    order_seed: int | None = option(None, "Seed of the class order (default: 1993; with --run, the run's).")
    val_fraction: float | None = option(None, VAL_HELP + " Default: 0; with --run, the run's split.")
    val_seed: int | None = option(None, VAL_SEED_HELP + " Default: 0; with --run, the run's.")
    methods: tuple[str, ...] | None = option(
        None,
        "Comma-separated baselines, or 'all' (default: SimpleCIL, RanPAC and the joint probe, those whose class "
        "runs by default; `tosca list` names every one).",
        comma=True,
    )
    run: Path | None = option(
        None, "TOSCA run to put beside them (default: the paper preset's, fitted if missing).", output=True
    )
    with_tosca: bool = option(
        True, "TOSCA's rows beside them (--no-tosca: only the baselines).", ("--tosca/--no-tosca",)
    )
    out: Path | None = option(
        None, "Output folder (default: runs/baselines-<dataset>-<model>-B<init>Inc<inc>).", output=True
    )
    device: str = option("auto", DEVICE_HELP)
    log: tuple[str, ...] = option((), LOG_HELP + " A parent run, a child per method.", ("--log",))
    scenario: str = option(
        "cil",
        "Scenario: cil (default, the class-incremental table), til, fscil, blurry or dil (docs/scenarios.md); "
        "a method that cannot run it refuses in one line.",
    )
    set_values: tuple[str, ...] = option(
        (), "A scenario parameter, NAME=VALUE (repeatable; e.g. shots=5, blurry=0.1).", ("--set",)
    )
    runs_root: Path = Path("runs")
    title: str | None = None  # the comparison's title (default: dataset / backbone, split)
    # the scenario's parameters from the Python API (`scenario_values=`), each checked by its rule
    scenario_values: Mapping[str, Any] = field(default_factory=dict)
    # each baseline's own parameters by their one spelling, METHOD_NAME (`baseline_registry.Param`):
    # `--ranpac-projection-dim 64` on the command line, ranpac_projection_dim=64 in Python; text from
    # the command line
    params: Mapping[str, Any] = field(default_factory=dict)
    # how a refusal names a field: the command line's flag (--val-fraction); the Python API's keyword
    # (val_fraction); not part of what is asked, so two requests asking the same compare equal
    spell: Spell = field(default=as_flag, compare=False, repr=False)


@dataclass(frozen=True)
class PredictRequest:
    """`tosca predict`."""

    run: Path = option(help="Run directory made by `tosca fit`.", argument=True)
    images: tuple[Path, ...] = option(
        help="Image files or folders (searched by the rule of `tosca extract`).", argument=True
    )
    router: str | None = option(
        None,
        "Router (default: the run's best honest router by A_last on its validation split; on test, said so, "
        "when it has none).",
    )
    device: str = option("auto", "Where it runs: auto (CUDA when available), cpu, cuda or cuda:N.")
    batch_size: int | None = option(None, "Images per backbone pass (default: 12 on CPU, 128 on CUDA).")


@dataclass(frozen=True)
class DemoRequest:
    """`tosca demo`."""

    data_root: Path | None = option(
        None, "EuroSAT archive or folder (default: $TOSCA_DATA/eurosat/EuroSAT-RGB.tar.gz)."
    )
    cache_dir: Path = option(Path("cache"), "Root for the demo's store.", output=True)
    runs_dir: Path = option(Path("runs"), "Root for the demo's run, sweep and baselines.", output=True)
    per_class: int = option(DEMO_PER_CLASS, "Images per class in each split.")
    jobs: int | None = option(None, "Sweep worker processes (default: usable cores; 1 on CUDA).")
    device: str = option("auto", DEVICE_HELP)


@dataclass(frozen=True)
class SuiteRequest:
    """`tosca suite`: a SUITE.toml or a preset."""

    suite: Path | None = option(None, "Suite file (SUITE.toml); or --preset.", argument=True)
    preset: str | None = option(
        None, "A suite tosca ships: small (the demo's store, minutes), local (the archives here) or paper."
    )
    out: Path | None = option(
        None, "Suite folder; an existing one continues (default: runs/suite-<name>).", output=True
    )
    jobs: int | None = option(
        None, "Worker processes for the cells (default: usable cores on the CPU, 1 on CUDA)."
    )
    scheduler: str | None = option(None, "local:N, local-cuda, a Dask scheduler address or file.")
    device: str = option("auto", DEVICE_HELP)
    dry_run: bool = option(
        False, "Print the plan (cells, which exist, a time estimate); run nothing.", ("--dry-run",)
    )
    tables_only: bool = option(
        False, "Write the tables from the cells finished so far; run nothing.", ("--tables-only",)
    )
    log: tuple[str, ...] = option((), LOG_HELP + " A parent run, a child per cell run now.", ("--log",))
    runs_root: Path = Path("runs")


@dataclass(frozen=True)
class ScenarioRequest:
    """`tosca scenario`: methods under one scenario of a store (issue 56; docs/scenarios.md)."""

    store: Path = option(..., "Store path.")
    scenario: str = option("cil", "Scenario: cil, til, fscil, blurry or dil (`tosca list` says each).")
    methods: tuple[str, ...] = option(
        ("tosca", "simplecil"), "Comma-separated: tosca and/or baselines (`tosca list`).", comma=True
    )
    set_values: tuple[str, ...] = option(
        (), "A scenario parameter, NAME=VALUE (repeatable; e.g. shots=5, blurry=0.1).", ("--set",)
    )
    read_as: str = option(
        "", "Read the store as another labelling of its images (cifar100 as cifar100_superclasses)."
    )
    routers: tuple[str, ...] = option(
        ("lda",), "TOSCA's honest routers, comma-separated: one training, a row each.", comma=True
    )
    recurring: str = option(
        "task_rows", "TOSCA, a class met again: task_rows (a row per task) or first_task (learnt once)."
    )
    module_per: str = option(
        "task", "TOSCA's module unit: task, or step (each stretch between evaluation points)."
    )
    later_modules: str = option(
        "train",
        "TOSCA, each task after the first: train (its own module, the paper's) or first (the first "
        "task's module reused frozen, its classes' rows prototypes of its output; for few-shot sessions).",
    )
