"""A suite's tables, claims and figures, built from its finished cells only.

Means and standard deviations are over the seeds (and class orders) actually finished; a table
entry with fewer says how many of how many ("n=2 of 3"), and one with none says "missing": never a
blank or a partial mean passed off as whole. Each entry's interval (table.csv's `ci_low`, `ci_high`,
over the `images` of the split; the validation split's beside) comes from the cells' per-image
answers (`method.uncertainty`). An honest entry of a column is in bold when it is not
distinguishable from the best of that column by a paired bootstrap of the difference on the same
images and seeds (95%), on the suite's validation split where it holds one out (else on test, and
the table says so); table.csv keeps each entry's difference with the best, its interval and the
verdict. References are never bold: routers told the task (`oracle`) or letting a test batch vote
(`batch`), and methods that see every task at once (the joint probe). The claims are in `claims`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tosca_foundation import atomic
from tosca_heads.method import uncertainty
from tosca_heads.method.baseline_registry import label as baseline_label
from tosca_heads.method.metrics import METRICS, RANKED, figures, metric_named, resampled
from tosca_heads.method.uncertainty import Outcomes
from tosca_heads.records import plots
from tosca_heads.records.baselines_folder import baseline_reference
from tosca_heads.records.run_folder import feature_dim_of, read_run_config
from tosca_heads.records.table import Table
from tosca_heads.routers import ROUTERS, reference_text
from tosca_heads.studies.suite import claims as claimmod
from tosca_heads.studies.suite.cells import ablation_points
from tosca_heads.studies.suite.claims import SIMILARITIES, Claim, Evidence
from tosca_heads.studies.suite.spec import SuiteSpec

if TYPE_CHECKING:
    import pandas as pd

    from tosca_heads.studies.suite.cells import CellState

FLOW_LABELS = {
    "tosca": "tosca (A then C)",
    "tosca_r": "tosca_r (C then A)",
    "adapter": "adapter only",
    "calibrator": "calibrator only",
}


def shown_metrics() -> list[str]:
    """The table's metrics: every figure (`metrics.figures()`: the built-ins, then each registered
    one) but the routing accuracy, which most methods of a suite (the baselines) do not have. Each
    that is recomputed from per-image answers (`metrics.resampled()`) has its interval and its
    bold entries, as A_last does."""
    return [m.name for m in figures() if not m.from_routing]


TABLE_COLUMNS = [
    *("method", "label", "honest", "reference", "store", "metric", "mean", "std", "n", "expected"),
    *("ci_low", "ci_high", "images"),
    *("val_mean", "val_std", "val_n", "val_ci_low", "val_ci_high", "val_images"),
    *("bold", "chosen_on", "bold_difference", "bold_low", "bold_high", "bold_verdict"),
]
BOLD_COLUMNS = 6  # the last columns, set by `_mark_best`
ABLATION_COLUMNS = (
    *("flow", "l1", "store", "metric", "mean", "std", "n", "expected"),
    *("ci_low", "ci_high", "images"),
)


@dataclass
class SuiteTables:
    """The suite's results as pandas frames (long form: one row per entry) and its claims."""

    table: pd.DataFrame  # TABLE_COLUMNS: test mean/std/n, validation's, bold and the split it was chosen on
    ablation: pd.DataFrame  # ABLATION_COLUMNS: per flow, l1, store, metric (A_last or a similarity)
    claims: list[Claim]
    curves: dict[str, dict[str, list[list[float]]]]  # store -> method label -> A_t per finished cell
    chosen_on: str = "test"  # the split the bold entries were chosen on
    tested: bool = True  # every bold entry decided by the paired test (False: some cell kept no answers)


def _answers(results: Sequence[dict[str, Any]], key: str, split: str) -> list[Outcomes] | None:
    """The finished cells' answers of `key` (a router, or "none") on `split`, one per cell in the
    cells' order (class order, then seed); None when a cell kept none."""
    found = [r.get("outcomes", {}).get(split, {}).get(key) for r in results]
    return None if not found or any(f is None for f in found) else found


def _intervals(runs: list[Outcomes] | None) -> dict[str, tuple[float, float, float]]:
    """Per metric, (low, high, images) of an entry's mean over its cells (NaN without answers)."""
    if runs is None:
        return {m.name: (math.nan, math.nan, math.nan) for m in resampled()}
    return {m: (i.low, i.high, i.images) for m, i in uncertainty.intervals(runs).items()}


def _cells(states: Sequence[CellState], store: str, kind: str, **wanted: Any) -> list[CellState]:
    """The cells of `store` of `kind` ("tosca" or "baseline") whose fields are `wanted` (flow, l1, method)."""
    found = [s for s in states if s.cell.store == store and s.cell.kind == kind]
    return [s for s in found if all(getattr(s.cell, k) == v for k, v in wanted.items())]


def _main_cells(spec: SuiteSpec, states: Sequence[CellState], store: str) -> list[CellState]:
    return _cells(states, store, "tosca", flow="tosca", l1=spec.main_l1)


def _entries(
    method: str,
    label: str,
    reference: str,
    store: str,
    results: list[dict[str, Any]],
    key: str,
    expected: int,
    evidence: Evidence,
) -> list[tuple[Any, ...]]:
    """The table's rows of one method on one store: A_bar and A_last over the finished cells, on test
    and on the validation split (NaN without one), each with its interval; the cells' answers go
    into `evidence` for the bold entries and the claims."""
    rows = []
    answers = {split: _answers(results, key, split) for split in ("test", "validation")}
    evidence.answers[(store, method)] = answers
    found = {split: _intervals(runs) for split, runs in answers.items()}
    for metric in shown_metrics():
        # a cell made before the metric was registered has none
        values = [r["routers"][key].get(metric) for r in results]
        test = uncertainty.spread([v for v in values if v is not None])
        held = [r["validation"][key].get(metric) for r in results if key in r.get("validation", {})]
        val = uncertainty.spread([v for v in held if v is not None])
        nothing = (math.nan, math.nan, math.nan)
        val_intervals = found["validation"].get(metric, nothing) if val[2] else nothing
        figures = (*test, expected, *found["test"].get(metric, nothing), *val, *val_intervals)
        rows.append((method, label, not reference, reference, store, metric, *figures))
    return rows


def build_tables(spec: SuiteSpec, states: Sequence[CellState]) -> SuiteTables:
    import pandas as pd

    rows, ablation, curves = [], [], {}
    evidence = Evidence()
    for store in spec.stores:
        main = _main_cells(spec, states, store.name)
        curves[store.name] = {}
        for router in spec.routers:
            reference = reference_text(router)
            label = f"TOSCA ({router})" + (" †" if reference else "")
            done = [s.result for s in main if s.result is not None]
            rows += _entries(
                f"tosca:{router}", label, reference, store.name, done, router, len(main), evidence
            )
            curves[store.name][label] = [r["routers"][router]["A_t"] for r in done]
        for method in spec.baselines:
            cells = _cells(states, store.name, "baseline", method=method)
            done = [s.result for s in cells if s.result is not None]
            reference = baseline_reference(method)
            label = baseline_label(method) + (" †" if reference else "")
            rows += _entries(method, label, reference, store.name, done, "none", len(cells), evidence)
            curves[store.name][label] = [r["routers"]["none"]["A_t"] for r in done]
        for flow, l1 in ablation_points(spec) if (spec.flows or spec.l1_off) else []:
            cells = _cells(states, store.name, "tosca", flow=flow, l1=l1)
            done = [s for s in cells if s.result is not None]
            entry = ablation_entry(flow, l1)
            evidence.answers[(store.name, entry)] = {
                split: _answers([s.result for s in done], spec.primary, split)
                for split in ("test", "validation")
            }
            evidence.similarities[(store.name, entry)] = {
                (s.cell.order_seed, s.cell.seed): s.similarity for s in done if s.similarity is not None
            }
            figures = {RANKED: [s.result["routers"][spec.primary][RANKED] for s in done]}
            for metric in SIMILARITIES:
                measured = (getattr(s.similarity, metric.removeprefix("similarity_"), None) for s in done)
                figures[metric] = [value for value in measured if value is not None]
            for metric, values in figures.items():
                runs = evidence.runs(store.name, entry) if metric == RANKED else None
                figure = (*uncertainty.spread(values), len(cells), *_intervals(runs)[RANKED])
                ablation.append((flow, l1, store.name, metric, *figure))
    table = pd.DataFrame(rows, columns=TABLE_COLUMNS[:-BOLD_COLUMNS])
    chosen_on, tested = _mark_best(table, evidence)
    ablation_frame = pd.DataFrame(ablation, columns=[*ABLATION_COLUMNS])
    found = claims(spec, states, table, ablation_frame, evidence)
    return SuiteTables(table, ablation_frame, found, curves, chosen_on, tested)


def ablation_entry(flow: str, l1: float) -> str:
    """The name an ablation point's cells go by in the `Evidence` ("tosca_r@l1=0.0005")."""
    return f"{flow}@l1={l1:g}"


def _mark_best(table: pd.DataFrame, evidence: Evidence) -> tuple[str, bool]:
    """Mark in `bold` every honest entry of each (store, metric) column that is not distinguishable
    from the column's best (the highest figure) by a paired bootstrap of the difference on the same
    images and seeds: on validation where every honest entry of the suite has a validation figure,
    else on test. Each entry's difference with the best, its interval and the verdict go into
    table.csv. A column where an entry's cells kept no answers (none does since the first release) bolds the
    best figure alone. Returns the split and whether every bold entry was tested."""
    tested_metrics = [m.name for m in resampled()]  # those with a paired test on per-image answers
    honest = table["honest"] & (table["n"] > 0) & table["metric"].isin(tested_metrics)
    on_validation = bool(honest.any()) and bool((table.loc[honest, "val_n"] > 0).all())
    split = "validation" if on_validation else "test"
    column = "val_mean" if on_validation else "mean"
    for name, value in (("bold", False), ("bold_difference", math.nan), ("bold_low", math.nan)):
        table[name] = value
    table["bold_high"], table["bold_verdict"] = math.nan, ""
    tested = True
    for (store, metric), part in table[honest].groupby(["store", "metric"]):
        lower = metric_named(metric).better == "lower"  # forgetting: the lowest is the best
        best = part[column].idxmin() if lower else part[column].idxmax()
        best_runs = evidence.runs(store, table.at[best, "method"], split)
        table.at[best, "bold"] = True
        table.at[best, "bold_verdict"] = "the best"
        for index in part.index.drop(best):
            runs = evidence.runs(store, table.at[index, "method"], split)
            if best_runs is None or runs is None:
                tested = False
                table.at[index, "bold_verdict"] = "not tested (no per-image answers)"
                table.at[index, "bold"] = bool(part.at[index, column] == part.at[best, column])
                continue
            # "the best beats it": best - it above 0 (it - best, where lower is better)
            diff = uncertainty.paired_difference(*((runs, best_runs) if lower else (best_runs, runs)), metric)
            verdict = uncertainty.beats(diff)
            table.at[index, "bold"] = verdict != uncertainty.HOLDS
            table.loc[index, ["bold_difference", "bold_low", "bold_high"]] = [diff.value, diff.low, diff.high]
            table.at[index, "bold_verdict"] = (
                "not distinguishable from the best" if verdict != uncertainty.HOLDS else "below the best"
            )
    table["chosen_on"] = split
    return split, tested


def claims(
    spec: SuiteSpec,
    states: Sequence[CellState],
    table: pd.DataFrame,
    ablation: pd.DataFrame,
    evidence: Evidence | None = None,
) -> list[Claim]:
    """The paper's claims, each checked on every store of the suite that measured it."""
    names = [s.name for s in spec.stores]
    shapes = {}
    for store in names:
        main = [s for s in _main_cells(spec, states, store) if s.result is not None]
        if main:
            config = spec.train(main[0].cell.seed)
            d = feature_dim_of(read_run_config(main[0].folder), main[0].folder)
            shapes[store] = (d, config.r or max(1, d // 16), config.s or max(1, d // 16))
    honest = [r for r in spec.routers if not ROUTERS[r].reference]
    evidence = evidence or Evidence()
    return [
        claimmod.l1_claim(
            evidence, names, ablation_entry("tosca", spec.main_l1), ablation_entry("tosca", 0.0), spec.main_l1
        ),
        claimmod.order_claim(
            evidence,
            names,
            ablation_entry("tosca", spec.main_l1),
            ablation_entry("tosca_r", spec.main_l1),
            spec.primary,
        ),
        claimmod.parameters_claim(shapes),
        claimmod.batch_claim(evidence, names, honest, "validation" if spec.validation.enabled else "test"),
    ]


# ------------------------------------------------------------------------------------------ writing


def _entry(row: Any, prefix: str = "") -> str:
    """'73.66 ± 1.20' over several cells, '73.66 [70.1, 77.0]' (its interval over the images) over
    one; '(n=2 of 3)' when cells are missing; 'missing' without any. `prefix` "val_": the
    validation split's."""
    n, mean, std = row[f"{prefix}n"], row[f"{prefix}mean"], row[f"{prefix}std"]
    if n == 0:
        return "missing"
    metric = METRICS.get(row["metric"])  # (an ablation's similarities are no registered metric)
    if metric is not None and not metric.percent:
        text = f"{mean:g}" + ("" if math.isnan(std) else f" ± {std:g}")
    else:
        text = f"{100 * mean:.2f}"
        if not math.isnan(std):
            text += f" ± {100 * std:.2f}"
        elif not math.isnan(row[f"{prefix}ci_low"]):
            text += f" [{100 * row[f'{prefix}ci_low']:.1f}, {100 * row[f'{prefix}ci_high']:.1f}]"
    if n < row["expected"]:
        text += f" (n={n} of {row['expected']})"
    return text


def _grid(spec: SuiteSpec, table: pd.DataFrame, prefix: str = "") -> dict[str, Any]:
    """Header, rows and bold cells of the main table (`Table`'s fields): methods as rows, (store,
    metric) as columns, the entries marked `bold` (not distinguishable from the best honest one, on
    the split `_mark_best` says) in bold; `prefix` "val_": the validation split's figures (honest
    entries only)."""
    columns = [(s.name, m) for s in spec.stores for m in shown_metrics()]
    labels = {m.name: m.label for m in figures()}
    stores = {s.name: s.label for s in spec.stores}
    header = ["method", *(f"{stores[s]} {labels.get(m, m)}" for s, m in columns)]
    rows: list[list[str]] = []
    bold = set()
    for method in dict.fromkeys(table["method"]):
        mine = table[table.method == method]
        if prefix and not mine["honest"].iloc[0]:
            continue
        cells = [str(mine["label"].iloc[0])]
        for store, metric in columns:
            row = mine[(mine.store == store) & (mine.metric == metric)].iloc[0]
            if row["bold"]:
                bold.add((len(rows), len(cells)))
            cells.append(_entry(row, prefix))
        rows.append(cells)
    return {"header": header, "rows": rows, "bold": bold}


def _protocol_line(spec: SuiteSpec, chosen_on: str = "test", tested: bool = True) -> str:
    orders = ", ".join(map(str, spec.order_seeds))
    held = (
        f"a validation split of {100 * spec.val_fraction:g}% of each class's training images (seed "
        f"{spec.val_seed}) is held out: the figures are on test, "
        if spec.validation.enabled
        else "no validation split (the paper's protocol): "
    )
    where = (
        "the validation split (its figures below)"
        if chosen_on == "validation"
        else "these test figures (no validation split)"
    )
    bold = (
        f"every honest entry not distinguishable from the best of its column on {where} is in bold: a paired "
        "bootstrap of the difference on the same images and seeds, 95% (table.csv: the difference, its "
        "interval and the verdict)"
    )
    if not tested:
        bold += "; some cells kept no per-image answers: their columns bold the best figure alone"
    return (
        f"{seeds_said(spec.seeds)} (n = seeds finished x class orders), "
        f"class order{'s' if len(spec.order_seeds) > 1 else ''} of seed {orders}; accuracies in %, on the test "
        f"split; one cell: [its 95% interval over the test images]; {held}{bold}. † a reference, never bold and no "
        "honest result: `batch` lets a test batch vote, "
        "`oracle` is told the task, the joint probe sees every task at once. SimpleCIL and the joint probe are "
        "deterministic: one run per class order."
    )


def _ablation_grid(spec: SuiteSpec, ablation: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    header = ["flow", "L1"]
    for store in spec.stores:
        header += [
            f"{store.name} A_last ({spec.primary})",
            f"{store.name} similarity: weights / all / outputs",
        ]
    rows = []
    for (flow, l1), part in ablation.groupby(["flow", "l1"], sort=False):
        cells = [FLOW_LABELS.get(flow, flow), f"{l1:g}"]
        for store in spec.stores:
            mine = part[part.store == store.name]
            cells.append(_entry(mine[mine.metric == RANKED].iloc[0]))
            sims = []
            for metric in SIMILARITIES:
                row = mine[mine.metric == metric]
                sims.append(f"{row['mean'].iloc[0]:.3f}" if len(row) and row["n"].iloc[0] > 0 else "–")
            count = mine[mine.metric == "similarity_weights"].iloc[0]
            partial = (
                f" (n={count['n']} of {count['expected']})" if 0 < count["n"] < count["expected"] else ""
            )
            cells.append(" / ".join(sims) + partial)
        rows.append(cells)
    return header, rows


def shown_tables(spec: SuiteSpec, tables: SuiteTables) -> dict[str, Table]:
    """The suite's tables as `records.table.Table`s, as the files and the terminal show them:
    "table" (methods x stores), "validation" (the figures that decided the bold entries, where they
    were chosen on validation) and "ablation" (where the suite has one)."""
    shown = {}
    note = _protocol_line(spec, tables.chosen_on, tables.tested)
    shown["table"] = Table(
        f"Suite {spec.name}: methods x stores", note, frame=tables.table, **_grid(spec, tables.table)
    )
    if tables.chosen_on == "validation":
        shown["validation"] = Table(
            f"Suite {spec.name}: the validation split (what decided the bold entries)",
            "The honest entries on the validation split (held out of the training images, never trained on), "
            "in %: mean ± std over the finished seeds, one cell with its 95% interval over the validation images.",
            **_grid(spec, tables.table, prefix="val_"),
        )
    if len(tables.ablation):
        note = (  # the primary router is an honest one (spec.parse_suite refuses a reference)
            f"A_last under the `{spec.primary}` router (mean ± std over the finished seeds, one seed with its 95% "
            "interval over the test images; %, test split), and the mean cosine similarity over every pair of task "
            "modules three ways: their weight matrices (no LayerNorm, no biases), all their parameters, and their "
            "outputs on the same test features."
        )
        shown["ablation"] = Table(
            f"Suite {spec.name}: ablation", note, *_ablation_grid(spec, tables.ablation)
        )
    return shown


def write_tables(out: Path, spec: SuiteSpec, tables: SuiteTables) -> dict[str, Path]:
    """table.md/.tex/.csv/.parquet, ablation.md/.tex (when the suite has one), claims.md, and the
    figures a_t.png and a_last.png; each table one `records.table.Table` (`shown_tables`)."""
    shown = shown_tables(spec, tables)
    main = shown["table"]
    if "validation" in shown:  # the figures that decided the bold entries, below the table
        main.after = shown["validation"].markdown(level=2)
    files = main.write(out / "table.md")
    if "ablation" not in shown:  # a file of an earlier run of this folder would pass for this one's
        for name in ("ablation.md", "ablation.tex"):
            (out / name).unlink(missing_ok=True)
    else:
        files |= shown["ablation"].write(out / "ablation.md", ("md", "tex"))
    files["claims.md"] = out / "claims.md"
    atomic.write_text(files["claims.md"], claims_markdown(spec, tables.claims))
    files["a_t.png"] = out / "a_t.png"
    plots.suite_curves(spec.stores, tables.curves, files["a_t.png"])
    files["a_last.png"] = out / "a_last.png"
    plots.suite_a_last(spec.stores, tables.table, files["a_last.png"])
    return files


def claims_markdown(spec: SuiteSpec, found: Sequence[Claim]) -> str:
    """claims.md: each claim, its verdict, what "holds" means, and the figures it read."""
    lines = [f"# Suite {spec.name}: the paper's claims on these stores", ""]
    for claim in found:
        lines.append(f"- **{claim.statement}**: {claim.verdict}")
        lines.append(f"  - holds when: {claim.threshold}")
        lines += [f"  - {figure}" for figure in claim.figures]
    return "\n".join(lines) + "\n"


def seeds_said(seeds: Sequence[int]) -> str:
    """'Mean ± std over seeds 0, 1, 2', or for one seed what it is: one run, no spread over seeds."""
    if len(seeds) == 1:
        return f"One seed ({seeds[0]}): no spread over seeds, ± std only over class orders where there are several"
    return f"Mean ± std over seeds {', '.join(map(str, seeds))}"
