"""A scenario run's kept model applied to new features or images (`tosca predict RUN IMAGES`,
`load_run`, `predict`): the modules, the classifier after the stream and the routers' statistics
(`records.scenario_model`), each classifier row answering its class by the store's label; a class
met again in several units has a row in each, and any of them answers it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from featcache.store import open_unchanged
from tosca_foundation.devices import resolve_device
from tosca_foundation.errors import UserError
from tosca_heads.applied.predict import PredictOutcome, RunPredictor, image_rows
from tosca_heads.applied.scenario_fit import REDO, is_scenario_run, read_run_file, read_scenario_run
from tosca_heads.engine.layout import ParamLayout
from tosca_heads.method.class_statistics import ClassStatistics
from tosca_heads.method.protocol import TaskStream
from tosca_heads.records.scenario_model import read_model
from tosca_heads.routers import ROUTERS, is_honest, resolve_routers


def scenario_predictor(run_dir: Path, device: str | torch.device = "cpu") -> RunPredictor:
    """A scenario run's model ready to classify frozen features (`RunPredictor`: the modules, the
    classifier after the stream and the routers' statistics; each classifier row answers its class
    by the store's label). Trains nothing."""
    if not is_scenario_run(Path(run_dir)):
        raise UserError(f"not a scenario run: {run_dir} (made by `tosca fit --scenario NAME`)")
    kept = read_model(Path(run_dir))
    device = torch.device(device)
    width = max(kept.labels) + 1
    by_label = dict(zip(kept.labels, kept.names, strict=True))
    predictor = RunPredictor(Path(run_dir), width, device, [by_label.get(i, str(i)) for i in range(width)])
    predictor.layout_ = ParamLayout(kept.dim, kept.r, kept.s, kept.flow)
    predictor.stream_ = TaskStream.uneven(np.array(kept.labels, dtype=np.int64), kept.sizes)
    predictor.modules_ = tuple(m.reshape(1, -1).to(device) for m in kept.modules)
    predictor.weight_, predictor.sigma_ = kept.weight.to(device), kept.sigma.reshape(1).to(device)
    try:
        predictor.statistics_ = ClassStatistics(kept.dim).load_state_dict(kept.statistics)
    except (KeyError, IndexError, ValueError, RuntimeError):
        raise UserError(
            f"scenario run {run_dir}: its model's router statistics are damaged; {REDO}"
        ) from None
    if predictor.statistics_.classes != len(kept.labels) or kept.modules[0].numel() != predictor.layout_.size:
        raise UserError(f"scenario run {run_dir}: its model's parts do not agree (edited or damaged); {REDO}")
    predictor.tasks_ = len(kept.modules)
    predictor.learned_ = {}
    return predictor


def predict_scenario_images(request: Any, list_images: Any, embed: Any) -> PredictOutcome:
    """`tosca predict` with a scenario run: the store's backbone (through `embed`), the run's kept
    model, one honest router (by default the run's best kept router by A_last on its validation
    rows, else on test, said so; a told-task run, which kept no router's figures, routes with lda)."""
    if request.batch_size is not None and request.batch_size < 1:
        raise UserError(f"--batch-size must be at least 1, got {request.batch_size}")
    run = read_scenario_run(request.run)
    if request.router is not None:
        names = resolve_routers(request.router)
        if len(names) != 1:
            raise UserError(f"--router takes one router for predict, got {request.router!r}")
        chosen, chosen_on = names[0], "given"
    else:
        blocks = run.validation or run.figures
        candidates = [n for n in ROUTERS if is_honest(n) and n in blocks]
        chosen = max(candidates, key=lambda n: blocks[n]["A_last"]) if candidates else "lda"
        chosen_on = ("validation" if run.validation else "test") if candidates else "default"
    device = resolve_device(request.device)
    predictor = scenario_predictor(request.run, device)
    predictor.check_router(chosen)
    paths, left_out = list_images(list(request.images))
    config = read_run_file(Path(request.run))
    store = open_unchanged(
        config["store"]["path"], config["store"]["fingerprint"], "the run was fit", "fit it again"
    )
    found = predictor.predict(embed(store, paths, device, request.batch_size), chosen, chosen_on)
    rows = image_rows(paths, found)
    return PredictOutcome(rows, chosen, predictor.tasks_, left_out, chosen_on)
