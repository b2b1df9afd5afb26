"""A suite's tables, claims and figures, built from its finished cells only.

Means and standard deviations are over the seeds (and class orders) actually finished; a table
entry with fewer says how many of how many ("n=2 of 3"), and one with none says "missing": never a
blank or a partial mean passed off as whole. The best honest entry of each column is in bold
(`batch` and `oracle` are not honest: one lets a batch vote, the other is told the task).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from featcache.foundation import atomic
from tosca_heads.experiments import plots
from tosca_heads.experiments.suite.cells import ablation_points
from tosca_heads.experiments.suite.spec import SuiteSpec
from tosca_heads.routers import ROUTERS

if TYPE_CHECKING:
    import pandas as pd

    from tosca_heads.experiments.suite.cells import CellState

BASELINE_LABELS = {"simplecil": "SimpleCIL", "ranpac": "RanPAC", "joint_probe": "joint linear probe"}
FLOW_LABELS = {
    "tosca": "tosca (A then C)",
    "tosca_r": "tosca_r (C then A)",
    "adapter": "adapter only",
    "calibrator": "calibrator only",
}
METRICS = ("A_bar", "A_last")
LAYERS = 12  # the ViT-B/16 depth a layer-wise adapter is counted over


@dataclass
class Claim:
    statement: str
    verdict: str  # holds, does not hold, not measured
    figures: list[str] = field(default_factory=list)


@dataclass
class SuiteTables:
    """The suite's results as pandas frames (long form: one row per entry) and its claims."""

    table: pd.DataFrame  # method, label, honest, store, metric, mean, std, n, expected
    ablation: pd.DataFrame  # flow, l1, store, metric (A_last or similarity), mean, std, n, expected
    claims: list[Claim]
    curves: dict[str, dict[str, list[list[float]]]]  # store -> method label -> A_t per finished cell


def _stats(values: Sequence[float]) -> tuple[float, float, int]:
    if not values:
        return math.nan, math.nan, 0
    std = float(np.std(values, ddof=1)) if len(values) > 1 else math.nan
    return float(np.mean(values)), std, len(values)


def _main_cells(spec: SuiteSpec, states: Sequence[CellState], store: str) -> list[CellState]:
    return [
        s
        for s in states
        if s.cell.store == store
        and s.cell.kind == "tosca"
        and s.cell.flow == "tosca"
        and s.cell.l1 == spec.main_l1
    ]


def build_tables(spec: SuiteSpec, states: Sequence[CellState]) -> SuiteTables:
    import pandas as pd

    rows, ablation, curves = [], [], {}
    for store in spec.stores:
        main = _main_cells(spec, states, store.name)
        curves[store.name] = {}
        for router in spec.routers:
            label = f"TOSCA ({router})" + ("" if ROUTERS[router].honest else " †")
            done = [s for s in main if s.result is not None]
            for metric in METRICS:
                mean, std, n = _stats([s.result["routers"][router][metric] for s in done])
                rows.append(
                    dict(
                        method=f"tosca:{router}",
                        label=label,
                        honest=ROUTERS[router].honest,
                        store=store.name,
                        metric=metric,
                        mean=mean,
                        std=std,
                        n=n,
                        expected=len(main),
                    )
                )
            curves[store.name][label] = [s.result["routers"][router]["A_t"] for s in done]
        for method in spec.baselines:
            cells = [
                s
                for s in states
                if s.cell.store == store.name and s.cell.kind == "baseline" and s.cell.method == method
            ]
            done = [s for s in cells if s.result is not None]
            label = BASELINE_LABELS.get(method, method)
            for metric in METRICS:
                mean, std, n = _stats([s.result["routers"]["none"][metric] for s in done])
                rows.append(
                    dict(
                        method=method,
                        label=label,
                        honest=True,
                        store=store.name,
                        metric=metric,
                        mean=mean,
                        std=std,
                        n=n,
                        expected=len(cells),
                    )
                )
            curves[store.name][label] = [s.result["routers"]["none"]["A_t"] for s in done]
        for flow, l1 in ablation_points(spec) if (spec.flows or spec.l1_off) else []:
            cells = [
                s
                for s in states
                if s.cell.store == store.name
                and s.cell.kind == "tosca"
                and s.cell.flow == flow
                and s.cell.l1 == l1
            ]
            done = [s for s in cells if s.result is not None]
            figures = {
                "A_last": [s.result["routers"][spec.primary]["A_last"] for s in done],
                "similarity": [s.similarity for s in done if s.similarity is not None],
            }
            for metric, values in figures.items():
                mean, std, n = _stats(values)
                ablation.append(
                    dict(
                        flow=flow,
                        l1=l1,
                        store=store.name,
                        metric=metric,
                        mean=mean,
                        std=std,
                        n=n,
                        expected=len(cells),
                    )
                )
    table = pd.DataFrame(
        rows, columns=["method", "label", "honest", "store", "metric", "mean", "std", "n", "expected"]
    )
    ablation_frame = pd.DataFrame(
        ablation, columns=["flow", "l1", "store", "metric", "mean", "std", "n", "expected"]
    )
    return SuiteTables(table, ablation_frame, claims(spec, states, table, ablation_frame), curves)


# ------------------------------------------------------------------------------------------ claims


def _value(frame: pd.DataFrame, **where: Any) -> float:
    rows = frame
    for key, value in where.items():
        rows = rows[rows[key] == value]
    return float(rows["mean"].iloc[0]) if len(rows) and rows["n"].iloc[0] > 0 else math.nan


def luca_parameters(d: int, r: int, s: int) -> int:
    """method.md §3: 2dr + r + d (adapter) + 2d (LayerNorm) + 2ds (calibrator)."""
    return 2 * d * r + r + d + 2 * d + 2 * d * s


def layerwise_adapter_parameters(d: int, r: int, layers: int = LAYERS) -> int:
    """One bottleneck adapter (2dr + r + d) in each of `layers` blocks."""
    return layers * (2 * d * r + r + d)


def _verdict(checks: Sequence[bool]) -> str:
    if not checks:
        return "not measured"
    return "holds" if all(checks) else "does not hold"


def claims(
    spec: SuiteSpec, states: Sequence[CellState], table: pd.DataFrame, ablation: pd.DataFrame
) -> list[Claim]:
    """The paper's claims, each checked on every store of the suite that measured it."""
    names = [s.name for s in spec.stores]
    out = []
    # 1. L1 makes the task modules less alike
    checks, figures = [], []
    for store in names if spec.main_l1 != 0.0 else []:  # at L1 = 0 there is no "with L1" to compare
        on = _value(ablation, flow="tosca", l1=spec.main_l1, store=store, metric="similarity")
        off = _value(ablation, flow="tosca", l1=0.0, store=store, metric="similarity")
        if not (math.isnan(on) or math.isnan(off)):
            checks.append(on < off)
            figures.append(
                f"{store}: mean cosine similarity between task modules {on:.3f} with L1 = {spec.main_l1:g}, {off:.3f} without"
            )
    out.append(Claim("L1 lowers the similarity between task modules", _verdict(checks), figures))
    # 2. adapter then calibrator beats the reverse order
    checks, figures = [], []
    for store in names:
        a = _value(ablation, flow="tosca", l1=spec.main_l1, store=store, metric="A_last")
        b = _value(ablation, flow="tosca_r", l1=spec.main_l1, store=store, metric="A_last")
        if not (math.isnan(a) or math.isnan(b)):
            checks.append(a > b)
            figures.append(
                f"{store}: A_last ({spec.primary}) {100 * a:.2f} for tosca, {100 * b:.2f} for tosca_r"
            )
    out.append(
        Claim("adapter-then-calibrator (tosca) beats the reverse order (tosca_r)", _verdict(checks), figures)
    )
    # 3. parameters against a layer-wise adapter of the same bottleneck
    checks, figures = [], []
    for store in names:
        main = [s for s in _main_cells(spec, states, store) if s.result is not None]
        if not main:
            continue
        config = spec.train(main[0].cell.seed)
        d = _feature_dim(main[0])
        r, s = config.r or max(1, d // 16), config.s or max(1, d // 16)
        ratio = layerwise_adapter_parameters(d, r) / luca_parameters(d, r, s)
        checks.append(7.0 <= ratio <= 9.0)
        figures.append(
            f"{store} (d = {d}, r = s = {r}): {luca_parameters(d, r, s):,} per LuCA module against "
            f"{layerwise_adapter_parameters(d, r):,} for {LAYERS} layer-wise adapters of bottleneck {r}: {ratio:.2f}x"
        )
    if figures:
        figures.append(
            f"(the paper's 8x compares with EASE's adapters of bottleneck 64 at d = 768: "
            f"{layerwise_adapter_parameters(768, 64):,} / {luca_parameters(768, 48, 48):,} = "
            f"{layerwise_adapter_parameters(768, 64) / luca_parameters(768, 48, 48):.2f}x)"
        )
    out.append(
        Claim(
            f"a LuCA module has about 8x fewer parameters than a layer-wise adapter of the same bottleneck on a {LAYERS}-block backbone",
            _verdict(checks),
            figures,
        )
    )
    # 4. the paper's batch routing against the honest routers
    checks, figures = [], []
    honest = [r for r in ROUTERS if ROUTERS[r].honest]
    for store in names:
        batch = _value(table, method="tosca:batch", store=store, metric="A_last")
        best = max(
            ((_value(table, method=f"tosca:{r}", store=store, metric="A_last"), r) for r in honest),
            default=(math.nan, ""),
        )
        if not (math.isnan(batch) or math.isnan(best[0])):
            checks.append(batch - best[0] <= 0.01)
            figures.append(
                f"{store}: batch {100 * batch:.2f}, best honest router ({best[1]}) {100 * best[0]:.2f}: {100 * (batch - best[0]):+.2f} points"
            )
    out.append(
        Claim(
            "the paper's `batch` routing is an honest figure (within 1 point of the best honest router)",
            _verdict(checks),
            figures,
        )
    )
    return out


def _feature_dim(state: CellState) -> int:
    from tosca_heads.experiments.runfiles import feature_dim_of, read_run_config

    return feature_dim_of(read_run_config(state.folder), state.folder)  # read bounded, and checked


# ------------------------------------------------------------------------------------------ writing


def _entry(row: Any, tex: bool = False) -> str:
    if row["n"] == 0:
        return "missing"
    pm = r" $\pm$ " if tex else " ± "
    text = f"{100 * row['mean']:.2f}" + ("" if math.isnan(row["std"]) else f"{pm}{100 * row['std']:.2f}")
    if row["n"] < row["expected"]:
        text += f" (n={row['n']} of {row['expected']})"
    return text


def _grid(spec: SuiteSpec, table: pd.DataFrame, tex: bool) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the main table: methods as rows, (store, metric) as columns, bold best honest."""
    columns = [(s.name, m) for s in spec.stores for m in METRICS]
    best = {}
    for store, metric in columns:
        honest = table[(table.store == store) & (table.metric == metric) & table.honest & (table.n > 0)]
        best[(store, metric)] = honest["mean"].max() if len(honest) else math.nan
    header = ["method", *(f"{next(x.label for x in spec.stores if x.name == s)} {m}" for s, m in columns)]
    rows = []
    for method in dict.fromkeys(table["method"]):
        mine = table[table.method == method]
        cells = [str(mine["label"].iloc[0])]
        for store, metric in columns:
            row = mine[(mine.store == store) & (mine.metric == metric)].iloc[0]
            text = _entry(row, tex)
            if row["honest"] and row["n"] > 0 and row["mean"] == best[(store, metric)]:
                text = rf"\textbf{{{text}}}" if tex else f"**{text}**"
            cells.append(text)
        rows.append(cells)
    return header, rows


def _protocol_line(spec: SuiteSpec) -> str:
    orders = ", ".join(map(str, spec.order_seeds))
    return (
        f"Mean ± std over seeds {', '.join(map(str, spec.seeds))} (n = seeds finished x class orders), "
        f"class order{'s' if len(spec.order_seeds) > 1 else ''} of seed {orders}; accuracies in %. "
        "† not honest (`batch` lets a test batch vote, `oracle` is told the task). SimpleCIL and the joint "
        "probe are deterministic: one run per class order."
    )


def _markdown(title: str, note: str, header: list[str], rows: list[list[str]]) -> str:
    lines = [
        f"# {title}",
        "",
        note,
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
    ]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _tex(caption: str, header: list[str], rows: list[list[str]]) -> str:
    def esc(text: str) -> str:
        return text.replace("_", r"\_").replace("%", r"\%").replace("†", r"$^\dagger$").replace("±", r"$\pm$")

    spec = "l" + "r" * (len(header) - 1)
    lines = [r"\begin{table}", r"\centering", rf"\begin{{tabular}}{{{spec}}}", r"\toprule"]
    lines.append(" & ".join(esc(h) for h in header) + r" \\")
    lines.append(r"\midrule")
    lines += [" & ".join(esc(c) if not c.startswith("\\textbf") else c for c in row) + r" \\" for row in rows]
    lines += [r"\bottomrule", r"\end{tabular}", rf"\caption{{{esc(caption)}}}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def _ablation_grid(spec: SuiteSpec, ablation: pd.DataFrame, tex: bool) -> tuple[list[str], list[list[str]]]:
    header = [
        "flow",
        "L1",
        *(f"{s.name} {m}" for s in spec.stores for m in (f"A_last ({spec.primary})", "similarity")),
    ]
    rows = []
    for (flow, l1), part in ablation.groupby(["flow", "l1"], sort=False):
        cells = [FLOW_LABELS.get(flow, flow), f"{l1:g}"]
        for store in spec.stores:
            for metric in ("A_last", "similarity"):
                row = part[(part.store == store.name) & (part.metric == metric)].iloc[0]
                if metric == "similarity" and row["n"] > 0:
                    cells.append(
                        f"{row['mean']:.3f}"
                        + (f" (n={row['n']} of {row['expected']})" if row["n"] < row["expected"] else "")
                    )
                else:
                    cells.append(_entry(row, tex))
        rows.append(cells)
    return header, rows


def write_tables(out: Path, spec: SuiteSpec, tables: SuiteTables) -> dict[str, Path]:
    """table.md/.tex/.csv/.parquet, ablation.md/.tex (when the suite has one), claims.md, and the
    figures a_t.png and a_last.png."""
    files: dict[str, Path] = {}
    header, rows = _grid(spec, tables.table, tex=False)
    title = f"Suite {spec.name}: methods x stores"
    files["table.md"] = _write(out / "table.md", _markdown(title, _protocol_line(spec), header, rows))
    header, rows = _grid(spec, tables.table, tex=True)
    files["table.tex"] = _write(out / "table.tex", _tex(f"{title}. {_protocol_line(spec)}", header, rows))
    files["table.csv"] = _write(out / "table.csv", tables.table.to_csv(index=False))
    with atomic.writing(out / "table.parquet", "wb") as fh:
        tables.table.to_parquet(fh, index=False)
    files["table.parquet"] = out / "table.parquet"
    if not len(tables.ablation):  # a file of an earlier run of this folder would pass for this one's
        for name in ("ablation.md", "ablation.tex"):
            (out / name).unlink(missing_ok=True)
    else:
        note = (
            f"A_last under the `{spec.primary}` router (mean ± std over the finished seeds, %) and the mean "
            "cosine similarity between the weights of every pair of task modules."
            + (
                ""
                if ROUTERS[spec.primary].honest
                else f" `{spec.primary}` is not an honest router (docs/routers.md)."
            )
        )
        header, rows = _ablation_grid(spec, tables.ablation, tex=False)
        files["ablation.md"] = _write(
            out / "ablation.md", _markdown(f"Suite {spec.name}: ablation", note, header, rows)
        )
        header, rows = _ablation_grid(spec, tables.ablation, tex=True)
        files["ablation.tex"] = _write(
            out / "ablation.tex", _tex(f"Suite {spec.name}: ablation. {note}", header, rows)
        )
    lines = [f"# Suite {spec.name}: the paper's claims on these stores", ""]
    for claim in tables.claims:
        lines.append(f"- **{claim.statement}**: {claim.verdict}")
        lines += [f"  - {figure}" for figure in claim.figures]
    files["claims.md"] = _write(out / "claims.md", "\n".join(lines) + "\n")
    files["a_t.png"] = out / "a_t.png"
    _curves_figure(spec, tables, files["a_t.png"])
    files["a_last.png"] = out / "a_last.png"
    _a_last_figure(spec, tables, files["a_last.png"])
    return files


def _write(path: Path, text: str) -> Path:
    atomic.write_text(path, text)
    return path


def _curves_figure(spec: SuiteSpec, tables: SuiteTables, path: Path) -> None:
    """A_t per task for every store: each method's mean over its finished cells, the band min-max."""
    n = len(spec.stores)
    with plots.drawing(path, 110, ncols=n, figsize=(4.5 * n, 3.8), squeeze=False) as (_, axes):
        for ax, store in zip(axes[0], spec.stores, strict=True):
            for label, curves in tables.curves[store.name].items():
                if not curves:
                    continue
                values = 100 * np.asarray(curves)
                tasks = np.arange(values.shape[1])
                ax.plot(tasks, values.mean(0), label=label, linestyle="--" if "TOSCA" not in label else "-")
                ax.fill_between(tasks, values.min(0), values.max(0), alpha=0.15)
            ax.set_title(store.label)
            ax.set_xlabel("task")
            ax.set_ylabel("A_t (%)")
            ax.grid(alpha=0.3)
        if axes[0][-1].get_legend_handles_labels()[0]:  # nothing finished: nothing to name
            axes[0][-1].legend(fontsize=7)


def _a_last_figure(spec: SuiteSpec, tables: SuiteTables, path: Path) -> None:
    frame = tables.table[tables.table.metric == "A_last"]
    labels = list(dict.fromkeys(frame["label"]))
    width = 0.8 / max(1, len(labels))
    with plots.drawing(path, 110, figsize=(max(6, 2.2 * len(spec.stores) + 2), 4)) as (_, ax):
        for i, label in enumerate(labels):
            mine = frame[frame.label == label].set_index("store")
            means = [100 * mine.loc[s.name, "mean"] for s in spec.stores]
            stds = [
                0 if math.isnan(mine.loc[s.name, "std"]) else 100 * mine.loc[s.name, "std"]
                for s in spec.stores
            ]
            ax.bar(np.arange(len(spec.stores)) + i * width, means, width, yerr=stds, label=label)
        ax.set_xticks(np.arange(len(spec.stores)) + 0.4 - width / 2, [s.name for s in spec.stores])
        ax.set_ylabel("A_last (%)")
        if labels:
            ax.legend(fontsize=7, ncols=2)
        ax.grid(axis="y", alpha=0.3)
