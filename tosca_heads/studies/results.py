"""What is built from a sweep's points at the end (`records.sweep_points` reads them, `records.sweep`
draws results.csv from them): results.parquet, summary.md and summary.csv, heatmaps of A_last over
r x l1, A_t curves of the best points, and what the sweep chose.

The points are ranked on the validation split where the sweep has one; on test otherwise, and the
summary says so. Each configuration's ranked figure (A_last under the ranking router, mean over its
seeds) comes with its standard error (a stratified bootstrap over the images and the seeds, from
the points' kept answers: `method.uncertainty`); the configurations within one standard error of the
best are ties, and one rule picks among them (`CHOICE_RULE`: the simplest). When the choice was made
on validation, the configuration highest on test is tested against it on test (a paired bootstrap);
only when it is better beyond noise does the sweep say what test would have chosen.

summary.csv, one row per configuration (its flags; per router and split `{val_}{metric}_{router}_mean`
and `_std` over seeds; `seeds`; `params_per_task`, `train_seconds`; the ranked figure's
`{val_}A_last_{router}_se`, `_low`, `_high`, and test's; `tie` and `chosen`), is what a plot reads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tosca_heads.method import uncertainty
from tosca_heads.method.metrics import RANKED, Metric, figures
from tosca_heads.records.plots import best_curves, heatmaps
from tosca_heads.records.sweep import FLAG_COLUMNS, POINT_COLUMNS
from tosca_heads.records.table import Table
from tosca_heads.routers import HEADLINE, ROUTERS

if TYPE_CHECKING:  # pandas is loaded when a table is built, not to append rows on a worker
    import pandas as pd

# ------------------------------------------------------------------------------------------ summary


def routers_in(frame: pd.DataFrame) -> list[str]:
    """The routers of a results frame, in the registry's order (unknown ones after)."""
    present = list(dict.fromkeys(frame["router"]))
    return [r for r in ROUTERS if r in present] + [r for r in present if r not in ROUTERS]


def short_name(metric: Metric) -> str:
    """A figure's name in a summary's columns (`{name}_{router}_mean`): "routing" for the routing
    accuracy, else its name."""
    return "routing" if metric.from_routing else metric.name


def point_columns() -> dict[str, str]:
    """Each figure's summary name -> its results.csv column, with each run's interval where the
    figure declares one (`{name}_low`, `_high`), and the curve A_t."""
    found: dict[str, str] = {}
    for metric in figures():
        found[short_name(metric)] = metric.name
        if metric.interval is not None:
            found.update({f"{short_name(metric)}_{end}": f"{metric.name}_{end}" for end in ("low", "high")})
    return {**found, "A_t": "A_t"}


def by_point(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per point, with a `{metric}_{router}` column per router and metric on test (each
    run's interval as `{metric}_low_{router}` and `_high_`), and `val_` the same on the validation
    split where the points have one."""
    import pandas as pd

    points = frame.drop_duplicates("key").set_index("key")[[c for c in POINT_COLUMNS if c != "key"]]
    pivots = []
    for split, prefix in (("test", ""), ("validation", "val_")):
        part = frame[frame["split"] == split]
        if part.empty:
            continue
        for metric, column in point_columns().items():
            if column not in part:
                continue
            pivot = part.pivot(index="key", columns="router", values=column)
            pivot.columns = [f"{prefix}{metric}_{router}" for router in pivot.columns]
            pivots.append(pivot)
    return pd.concat([points, *pivots], axis=1).reset_index(names="key")


def varying_flags(points: pd.DataFrame) -> list[str]:
    """Flags that take more than one value in the sweep (seed excluded: it is averaged over)."""
    return [c for c in FLAG_COLUMNS if c != "seed" and points[c].nunique(dropna=False) > 1]


def named_flags(points: pd.DataFrame) -> list[str]:
    """The flags a configuration is named by: those the sweep varies, or r and l1 when none varies."""
    return varying_flags(points) or ["r", "l1"]


def ranking_split(points: pd.DataFrame, rank_by: str) -> str:
    """The split the points are ranked and chosen on: validation where every point has it, else test."""
    column = f"val_A_last_{rank_by}"
    return "validation" if column in points and bool(points[column].notna().all()) else "test"


def rank_column(split: str, rank_by: str) -> str:
    """The summary column that orders the configurations."""
    return f"{'val_' if split == 'validation' else ''}A_last_{rank_by}_mean"


def summarise_points(points: pd.DataFrame, rank_by: str, routers: Sequence[str]) -> pd.DataFrame:
    """Mean and std over seeds for each configuration, best first by A_last under `rank_by` on the
    ranking split (`ranking_split`: validation where the points have it; test beside, never used
    to rank); `keys` lists each configuration's points (by seed)."""
    group = [c for c in FLAG_COLUMNS if c != "seed"]
    metrics = [
        f"{prefix}{m}_{r}"
        for prefix in ("", "val_")
        for r in routers
        for m in point_columns()
        if m != "A_t" and f"{prefix}{m}_{r}" in points
    ]
    agg: dict[str, Any] = {c: ["mean", "std"] for c in metrics}
    agg.update(params_per_task="first", train_seconds="mean", seed="count", key=list)
    ordered = points.sort_values("seed", kind="stable")
    summary = ordered.groupby(group, dropna=False).agg(agg).copy()  # one block: no fragmented frame
    summary.columns = [f"{a}_{b}" if b not in ("first", "list") else a for a, b in summary.columns]
    summary = summary.rename(
        columns={"seed_count": "seeds", "train_seconds_mean": "train_seconds", "key": "keys"}
    )
    order = rank_column(ranking_split(points, rank_by), rank_by)
    summary = summary.reset_index().sort_values(order, ascending=False, kind="stable")
    return summary.reset_index(drop=True)


def _pm(mean: float, std: float, low: Any = np.nan, high: Any = np.nan, metric: Metric | None = None) -> str:
    """'80.12 ± 1.30' over seeds; one seed: '80.12 [77.7, 82.4]', its run's interval (where kept);
    in % unless `metric` is shown as it is."""
    if _missing(mean):
        return "–"
    if metric is not None and not metric.percent:
        return f"{mean:g}" if _missing(std) else f"{mean:g} ± {std:g}"
    if _missing(std):
        shown = "" if _missing(low) or _missing(high) else f" [{100 * low:.1f}, {100 * high:.1f}]"
        return f"{100 * mean:.2f}{shown}"
    return f"{100 * mean:.2f} ± {100 * std:.2f}"


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))


def spread_of(row: Any, column: str) -> str:
    """A summary row's figure `column` ("A_last_entropy", "val_A_bar_lda") as `_pm` says it; the run's
    interval of a one-seed configuration from `{metric}_low_{router}` / `_high_`."""
    metric, router = _split_column(column)
    named = {short_name(m): m for m in figures()}.get(metric.removeprefix("val_"))
    return _pm(
        row.get(f"{column}_mean", np.nan),
        row.get(f"{column}_std", np.nan),
        row.get(f"{metric}_low_{router}_mean", np.nan),
        row.get(f"{metric}_high_{router}_mean", np.nan),
        named,
    )


def _split_column(column: str) -> tuple[str, str]:
    """ "val_A_last_entropy" -> ("val_A_last", "entropy")."""
    for metric in sorted(map(short_name, figures()), key=len, reverse=True):  # the longest name that fits
        for prefix in ("val_", ""):
            head = f"{prefix}{metric}_"
            if column.startswith(head):
                return head[:-1], column[len(head) :]
    return column, ""


def flag_text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


# ------------------------------------------------------------------------------------------ noise and ties

CHOICE_RULE = (
    "among the configurations tied with the best (within one standard error of it), the simplest: the "
    "fewest parameters per task (smallest r and s), then the largest L1 weight (sparsest modules), then "
    "the highest figure"
)


def noise_column(split: str, rank_by: str, what: str) -> str:
    """The summary column of a configuration's `what` ("se", "low", "high") of A_last under `rank_by`
    on `split` (its mean over seeds)."""
    return f"{'val_' if split == 'validation' else ''}A_last_{rank_by}_{what}"


def _runs(answers: dict[str, Any], keys: Sequence[str], split: str, router: str) -> list[Any] | None:
    """A configuration's outcomes on `split` under `router`, one per seed (None: not all kept)."""
    found = [(answers.get(k) or {}).get(split, {}).get(router) for k in keys]
    return None if not found or any(f is None for f in found) else found


def with_noise(summary: pd.DataFrame, answers: dict[str, Any], split: str, rank_by: str) -> pd.DataFrame:
    """The summary with each configuration's standard error and interval of A_last under `rank_by`
    (mean over seeds: a stratified bootstrap over the images and the seeds, method.uncertainty) on
    the ranking split and on test (NaN where the points kept no answers); `tie`, the configurations
    within one standard error of the best on the ranking split (`uncertainty.ties`); and `chosen`,
    the one the rule (`CHOICE_RULE`) picks among them."""
    summary = summary.copy()
    for where in dict.fromkeys([split, "test"]):
        found = []
        for keys in summary["keys"]:
            runs = _runs(answers, keys, where, rank_by)
            found.append(None if runs is None else uncertainty.intervals(runs)[RANKED])
        for what in ("se", "low", "high"):
            summary[noise_column(where, rank_by, what)] = [
                np.nan if f is None else getattr(f, what) for f in found
            ]
    ranked = rank_column(split, rank_by)
    summary["tie"] = uncertainty.ties(
        summary[ranked].to_numpy(), summary[noise_column(split, rank_by, "se")].to_numpy()
    )
    tied = summary[summary["tie"]]
    simplest = tied.assign(
        _l1=tied["l1"].fillna(0.0) if "l1" in tied else 0.0, _order=np.arange(len(tied))
    ).sort_values(
        ["params_per_task", "_l1", ranked, "_order"], ascending=[True, False, False, True], kind="stable"
    )
    summary["chosen"] = summary.index == simplest.index[0]
    return summary


def test_check(
    summary: pd.DataFrame, answers: dict[str, Any], rank_by: str, described: Callable[[Any], dict[str, Any]]
) -> dict[str, Any] | None:
    """Whether test disagrees with a choice made on validation beyond noise: the configuration
    highest on test against the chosen one, on test, by a paired bootstrap of A_last (the same
    images and seeds). None when the chosen one is also the highest on test."""
    chosen = summary[summary["chosen"]].iloc[0]
    top = summary.loc[summary[f"A_last_{rank_by}_mean"].idxmax()]
    if chosen[f"A_last_{rank_by}_mean"] >= top[f"A_last_{rank_by}_mean"]:
        return None
    check = {**described(top), "disagrees": None, "verdict": "not tested"}
    a, b = _runs(answers, top["keys"], "test", rank_by), _runs(answers, chosen["keys"], "test", rank_by)
    if a is None or b is None or len(a) != len(b):
        return check
    diff = uncertainty.paired_difference(a, b, RANKED)
    verdict = uncertainty.beats(diff)
    check.update(
        verdict=verdict,
        disagrees=verdict == uncertainty.HOLDS,
        difference=diff.value,
        interval=[diff.low, diff.high],
        images=diff.images,
        said=diff.said(),
    )
    return check


def choices(
    points: pd.DataFrame,
    summary: pd.DataFrame,
    rank_by: str,
    command: Callable[[dict[str, Any]], str],
    modules: Callable[[dict[str, Any]], str | None] | None = None,
    answers: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What the sweep chose and on which split (sweep.json and summary.md record it): among the
    configurations within one standard error of the best on the ranking split (`ties`), the one
    `CHOICE_RULE` picks (`chosen`: its figures with their standard error and intervals, and the
    `tosca fit` command that refits it at the sweep's first seed; with --keep-modules, that point's
    kept run folder); the best by the figure alone (`best`); and, when the choice was made on
    validation, whether test disagrees beyond noise (`test_check`)."""
    split = ranking_split(points, rank_by)
    flags = named_flags(points)

    def described(row: Any) -> dict[str, Any]:
        entry = {
            "flags": {f: _plain(row[f]) for f in flags},
            RANKED: float(row[f"{RANKED}_{rank_by}_mean"]),
            "seeds": int(row["seeds"]),
        }
        if f"val_A_last_{rank_by}_mean" in row:
            entry["val_A_last"] = float(row[f"val_A_last_{rank_by}_mean"])
        for where in dict.fromkeys([split, "test"]):
            prefix = "val_" if where == "validation" else ""
            se, low, high = (_plain(row.get(noise_column(where, rank_by, w))) for w in ("se", "low", "high"))
            entry[f"{prefix}A_last_se"] = se
            entry[f"{prefix}A_last_interval"] = [low, high]
        return entry

    best = summary.iloc[0]
    picked_row = summary[summary["chosen"]].iloc[0]
    config = {c: _plain(picked_row[c]) for c in FLAG_COLUMNS if c != "seed" and c in picked_row}
    picked = {**described(picked_row), "command": command(config)}
    kept = None if modules is None else modules(config)
    if kept is not None:
        picked["modules"] = kept
        picked["seed"] = int(points["seed"].min())
    return {
        "split": split,
        "router": rank_by,
        "chosen": picked,
        "best": described(best),
        "ties": [described(row)["flags"] for _, row in summary[summary["tie"]].iterrows()],
        "rule": CHOICE_RULE,
        "test_check": None
        if split != "validation"
        else test_check(summary, answers or {}, rank_by, described),
    }


def _plain(value: Any) -> Any:
    """A table value as JSON takes it (numpy numbers as Python's; NaN as None)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and np.isnan(value):
        return None
    return value


def _with_se(row: Any, column: str, se: Any) -> str:
    """'80.12 ± 1.30 (SE 0.91)': mean ± std over seeds (`spread_of`), and the standard error of the mean."""
    said = spread_of(row, column)
    return said if _missing(se) else f"{said} (SE {100 * se:.2f})"


def summary_table(
    points: pd.DataFrame, summary: pd.DataFrame, rank_by: str, shown: Sequence[str], chosen: dict[str, Any]
) -> Table:
    """summary.md's table (`records.table.Table`; summary.csv is its frame: the summary without its
    points' keys), followed in summary.md by what the sweep chose in words (`choice_lines`)."""
    flags = named_flags(points)
    split = chosen["split"]
    val = ["val A_last " + rank_by] if split == "validation" else []
    others = [m for m in figures() if m.name != RANKED]  # under the ranking router
    header = ["", *flags, *val, *(f"{RANKED} {m}" for m in shown), *(f"{m.label} {rank_by}" for m in others)]
    header += ["params/task", "train s", "seeds"]
    if split == "validation":
        how = (
            f"Best first by A_last under the `{rank_by}` router on the validation split (held out of the "
            "training images); the test columns are shown beside it and never used to rank."
        )
    else:
        how = (
            f"Best first by A_last under the `{rank_by}` router **on the test split**: this sweep holds out no "
            "validation split, so a configuration chosen from this table is tuned on test (`--val-fraction` "
            "holds one out)."
        )
    title = (
        f"Sweep on {points['dataset'].iloc[0]} / {points['backbone'].iloc[0]}: {len(summary)} configurations, "
        f"{len(points)} runs"
    )
    note = (
        f"{how} Accuracies in %, mean ± std over seeds; a configuration of one seed with its run's 95% "
        f"interval [low, high] (results.csv has every router and split, each run's figures with their "
        f"intervals). SE: the standard error of the ranked figure's mean (a stratified "
        f"bootstrap over the images and the seeds). `=`: tied with the best, within one standard error of it; "
        f"`*`: the chosen configuration, {CHOICE_RULE}."
    )
    rows = []
    ranked_se = noise_column(split, rank_by, "se")
    for _, row in summary.iterrows():
        mark = "*" if row["chosen"] else ("=" if row["tie"] else "")
        cells = [mark, *(flag_text(row[f]) for f in flags)]
        if val:
            cells.append(_with_se(row, f"val_A_last_{rank_by}", row[ranked_se]))
        for m in shown:
            se = row.get(ranked_se) if (m == rank_by and not val) else None
            cells.append(_with_se(row, f"A_last_{m}", se))
        cells += [spread_of(row, f"{short_name(m)}_{rank_by}") for m in others]
        cells += [f"{int(row['params_per_task']):,}", f"{row['train_seconds']:.1f}", str(int(row["seeds"]))]
        rows.append(cells)
    after = "\n".join(choice_lines(chosen)) + "\n"
    return Table(title, note, header, rows, summary.drop(columns="keys"), after=after)


def _figure(value: Any, interval: Any = None, se: Any = None) -> str:
    """'80.12 [77.70, 82.40], SE 1.20' (in %), as much as is known."""
    text = f"{100 * value:.2f}"
    if interval and None not in interval:
        text += f" {uncertainty.bracket(*interval)}"
    if se is not None:
        text += f", SE {100 * se:.2f}"
    return text


def choice_lines(chosen: dict[str, Any]) -> list[str]:
    """The chosen configuration in words with its noise, the configurations tied with the best, its
    refit command, and whether test disagrees beyond noise (said only then, with the difference,
    its interval and n)."""
    best, router = chosen["chosen"], chosen["router"]

    def flags(entry: dict[str, Any]) -> str:
        return ", ".join(f"{k}={flag_text(v)}" for k, v in entry.items())

    ties = chosen.get("ties") or [best["flags"]]
    if chosen["split"] == "validation":
        lines = [
            f"Chosen on validation ({router}): {flags(best['flags'])}, validation A_last "
            f"{_figure(best['val_A_last'], best.get('val_A_last_interval'), best.get('val_A_last_se'))}, "
            f"test A_last {_figure(best['A_last'], best.get('A_last_interval'))} (mean over {best['seeds']} seed(s))."
        ]
    else:
        lines = [
            f"Chosen on test ({router}): {flags(best['flags'])}, test A_last "
            f"{_figure(best['A_last'], best.get('A_last_interval'), best.get('A_last_se'))}; this figure is tuned on "
            "the test set."
        ]
    if best.get("A_last_se" if chosen["split"] == "test" else "val_A_last_se") is None:
        lines.append(
            "No standard errors: these points kept no per-image answers (only equal figures are ties)."
        )
    if len(ties) > 1:
        lines.append(
            f"Tied within one standard error of the best ({len(ties)}): "
            + "; ".join(flags(t) for t in ties)
            + f". The rule chose: {CHOICE_RULE}."
        )
    check = chosen.get("test_check")
    if check is not None:
        if check.get("disagrees"):
            lines.append(
                f"Test disagrees beyond noise: the test split would have chosen {flags(check['flags'])} (test A_last "
                f"{100 * check['A_last']:.2f}), {check['said']} above the chosen one; choosing it would be tuning on test."
            )
        elif check.get("verdict") == "not tested":
            lines.append(
                f"Whether test disagrees beyond noise is not known: these points kept no "
                f"per-image answers (the highest test A_last, {100 * check['A_last']:.2f}, is another configuration's)."
            )
        else:
            lines.append(
                f"On test, no configuration is better than the chosen one beyond noise (the highest test A_last is "
                f"{check['said']} from it: {check['verdict']})."
            )
    lines.append(f"Refit it: `{best['command']}`")
    if best.get("modules"):
        lines.append(
            f"Its modules (seed {best['seed']}, kept by --keep-modules): {best['modules']} "
            f"(`tosca predict {best['modules']} IMAGES`)"
        )
    return lines


def write_sweep_outputs(
    out: Path,
    frame: pd.DataFrame,
    rank_by: str,
    shown: Sequence[str] | None = None,
    command: Callable[[dict[str, Any]], str] | None = None,
    modules: Callable[[dict[str, Any]], str | None] | None = None,
    answers: dict[str, Any] | None = None,
) -> tuple[dict[str, Path], dict[str, Any] | None, pd.DataFrame | None]:
    """Everything drawn from the points' rows (`frame`, what results.csv holds), rebuilt whole after
    each sweep (and after a resume); what it chose (None without results) and the summary
    (`with_noise`'s). `command` gives the `tosca fit` command of a configuration (its flags),
    `modules` the run folder --keep-modules kept of it (None: none), `answers` each point's kept
    answers (`sweep_points.Point.answers` by key; None: none)."""
    files = {"results.csv": out / "results.csv"}
    if frame.empty:
        return files, None, None
    shown = [r for r in (shown or HEADLINE) if r in set(frame["router"])]
    answers = answers or {}
    Table("results", "", [], [], frame).write(out / "results.parquet", ("parquet",))
    points = by_point(frame)
    summary = summarise_points(points, rank_by, routers_in(frame))
    summary = with_noise(summary, answers, ranking_split(points, rank_by), rank_by)
    chosen = choices(points, summary, rank_by, command or (lambda config: "tosca fit ..."), modules, answers)
    summary_table(points, summary, rank_by, shown, chosen).write(out / "summary.md", ("md", "csv"))
    pick = rank_column(chosen["split"], rank_by).removesuffix("_mean")
    heatmaps(points, out / "heatmap_A_last.png", shown, FLAG_COLUMNS, varying_flags(points), pick, chosen)
    best_curves(
        points, summary, rank_by, out / "best_curves.png", FLAG_COLUMNS, named_flags(points), chosen["split"]
    )
    for name in ("results.parquet", "summary.md", "summary.csv", "heatmap_A_last.png", "best_curves.png"):
        files[name] = out / name
    return files, chosen, summary
