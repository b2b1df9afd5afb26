"""A scenario run's model (`tosca fit --scenario`): what TOSCA holds after the scenario's whole
stream, kept so that `tosca predict` classifies new images with it. A cell of its own in the run
folder (`model/`: asked.json as its routers' cells, measured.json, `state/model.safetensors`,
done.json with every file's digest, `records.cell`), written once the stream is learnt.

`state/model.safetensors` holds
- `module_NNN`: each learning unit's LuCA module, flat in the layout of (dim, r, s, flow) (the
  metadata), in the order they were learnt;
- `head.weight` [1, rows, d] and `head.sigma` [1]: the cosine classifier after the last unit, one
  row per (unit, class) where a class recurs (`recurring="task_rows"`);
- `stream.sizes`: each unit's classifier rows, in order (what ties a row to its module);
- `stats.*`: the frozen-feature routers' class statistics (`ClassStatistics.state_dict`);
- metadata `rows`: for each classifier row, the store's label id of its class and the class's
  name (JSON), so an answer is said in the dataset's terms.
Every tensor's name, dtype and shape is checked against the metadata before it is read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tosca_foundation import atomic
from tosca_foundation.errors import UserError
from tosca_foundation.tensorfiles import Header, TensorFileError, read_safetensors
from tosca_heads.records import FORMAT, cell, check_format

MODEL_CELL = "model"
REDO = "delete the run folder and fit it again"
STATS = ("counts", "sums", "tsums", "scatter", "shrinkage", "tukey")


@dataclass(frozen=True)
class ScenarioModel:
    """A scenario run's model as read back: the layout's numbers, each unit's flat module, the
    classifier, each unit's row count, the routers' statistics and each classifier row's store
    label and class name."""

    dim: int
    r: int
    s: int
    flow: str
    modules: tuple[torch.Tensor, ...]
    weight: torch.Tensor
    sigma: torch.Tensor
    sizes: tuple[int, ...]
    statistics: dict[str, torch.Tensor]
    labels: tuple[int, ...]
    names: tuple[str, ...]


def write_model(folder: Path, model: ScenarioModel, asked: dict[str, Any], seconds: float) -> None:
    """The model's cell: done.json gone first, the state file, then asked.json, measured.json and
    done.json last (`cell.write_cell`)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / cell.DONE).unlink(missing_ok=True)
    (folder / cell.STATE).mkdir(exist_ok=True)
    tensors = {f"module_{i:03d}": m.reshape(-1).cpu() for i, m in enumerate(model.modules)}
    tensors["head.weight"], tensors["head.sigma"] = model.weight.cpu(), model.sigma.reshape(1).cpu()
    tensors["stream.sizes"] = torch.tensor(model.sizes, dtype=torch.int64)
    tensors.update({f"stats.{k}": v.cpu() for k, v in model.statistics.items()})
    metadata = {
        "format": str(FORMAT),
        "layout": json.dumps({"dim": model.dim, "r": model.r, "s": model.s, "flow": model.flow}),
        "units": str(len(model.modules)),
        "rows": json.dumps({"labels": list(model.labels), "names": list(model.names)}),
    }
    atomic.write_safetensors(folder / cell.SCENARIO_MODEL, tensors, metadata)
    cell.write_cell(folder, asked, {"seconds": seconds, "machine": cell.machine("cpu")}, None)


def _checked(header: Header) -> None:
    """The names a model file holds, each of the dtype and rank its reader takes."""
    units = header.metadata.get("units", "")
    if not units.isdigit() or not 1 <= int(units) <= 100_000:
        raise TensorFileError("its metadata records no unit count")
    wanted = {f"module_{i:03d}" for i in range(int(units))}
    wanted |= {"head.weight", "head.sigma", "stream.sizes", *(f"stats.{k}" for k in STATS)}
    if set(header.tensors) != wanted:
        raise TensorFileError("it does not hold a scenario run's modules, classifier and statistics")
    if header.tensors["stream.sizes"].dtype != "I64" or len(header.tensors["stream.sizes"].shape) != 1:
        raise TensorFileError("stream.sizes is not a list of integers")
    if len(header.tensors["head.weight"].shape) != 3:
        raise TensorFileError("head.weight is not [1, rows, d]")


def read_model(run_dir: Path) -> ScenarioModel:
    """A scenario run's model, its cell whole and its file as written: one line otherwise."""
    folder = Path(run_dir) / MODEL_CELL
    if not (folder / cell.DONE).is_file():
        raise UserError(
            f"scenario run {run_dir} keeps no model (fit before models were kept, or cut short); {REDO}"
        )
    cell.check_whole(folder, REDO)
    path = folder / cell.SCENARIO_MODEL
    try:
        tensors, meta = read_safetensors(path, _checked)
        text = meta.get("format")
        check_format(path, int(text) if text and text.isdigit() else text, "scenario model")
        layout, rows = json.loads(meta["layout"]), json.loads(meta["rows"])
        dim, r, s, flow = int(layout["dim"]), int(layout["r"]), int(layout["s"]), str(layout["flow"])
        labels = tuple(int(v) for v in rows["labels"])
        names = tuple(str(v) for v in rows["names"])
    except TensorFileError as exc:
        raise UserError(f"{path}: {exc}; {REDO}") from None
    except (KeyError, TypeError, ValueError):
        raise UserError(f"{path} records no layout or rows a scenario run writes; {REDO}") from None
    sizes = tuple(int(v) for v in tensors["stream.sizes"].tolist())
    weight = tensors["head.weight"]
    units = len([k for k in tensors if k.startswith("module_")])
    if (
        len(sizes) != units
        or min(sizes, default=0) < 1
        or sum(sizes) != len(labels)
        or weight.shape[1] != len(labels)
        or weight.shape[2] != dim
        or len(labels) != len(names)
    ):
        raise UserError(f"{path}: its classifier, stream and rows do not agree (edited or damaged); {REDO}")
    return ScenarioModel(
        dim,
        r,
        s,
        flow,
        tuple(tensors[f"module_{i:03d}"] for i in range(units)),
        weight,
        tensors["head.sigma"],
        sizes,
        {k: tensors[f"stats.{k}"] for k in STATS},
        labels,
        names,
    )
