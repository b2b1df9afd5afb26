"""`--log mlflow[=TRACKING_URI]`: every run an MLflow run, a sweep's or suite's a parent run with a
child per point or cell (MLflow's `mlflow.parentRunId` tag), through `MlflowClient` alone (no
process-wide active run, so children are created by run id). The store is TRACKING_URI, else
$MLFLOW_TRACKING_URI, else MLflow's default (sqlite:///mlflow.db in the working folder); the
experiment is $MLFLOW_EXPERIMENT_NAME, else "tosca"; an experiment tosca creates in a sqlite store
keeps its artifacts in `mlartifacts/` beside the database file (MLflow's own default would be
./mlruns in whatever folder the command ran from). Installed by `pip install 'tosca[mlflow]'`
(mlflow-skinny with what its sqlite store needs)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tosca_heads.experiments.trackers.registry import Logger, Metric, register_logger

EXPERIMENT = "tosca"
BATCH_METRICS = 1000  # MLflow's log_batch limits
BATCH_PARAMS = 100
PARAM_VALUE = 6000


@register_logger
class MlflowLogger(Logger):
    name = "mlflow"
    summary = "MLflow runs (mlflow=TRACKING_URI; default $MLFLOW_TRACKING_URI, else MLflow's own)"
    extra = "mlflow"

    def __init__(self, where: str | None, runs_root: Path) -> None:
        super().__init__(where, runs_root)
        for quiet in ("mlflow", "alembic"):  # a new sqlite store logs its migrations at INFO
            logging.getLogger(quiet).setLevel(logging.WARNING)
        import sqlalchemy  # noqa: F401  (MLflow's sqlite store: said now, not at the first run)
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=where)
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or EXPERIMENT
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            self.experiment = found.experiment_id
        else:
            self.experiment = self.client.create_experiment(name, artifact_location=artifact_root(where))

    def start(self, name: str, parent: Any | None) -> str:
        tags = {} if parent is None else {"mlflow.parentRunId": parent}
        return self.client.create_run(self.experiment, run_name=name, tags=tags).info.run_id

    def params(self, run: Any, params: dict[str, str | int | float | bool]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[:PARAM_VALUE]) for k, v in params.items()]
        for i in range(0, len(items), BATCH_PARAMS):
            self.client.log_batch(run, params=items[i : i + BATCH_PARAMS])

    def metrics(self, run: Any, metrics: Sequence[Metric]) -> None:
        from mlflow.entities import Metric as MlflowMetric

        now = int(time.time() * 1000)
        items = [MlflowMetric(m.key, m.value, now, m.step) for m in metrics]
        for i in range(0, len(items), BATCH_METRICS):
            self.client.log_batch(run, metrics=items[i : i + BATCH_METRICS])

    def artifacts(self, run: Any, files: Sequence[Path]) -> None:
        for path in files:
            self.client.log_artifact(run, str(path))

    def end(self, run: Any, ok: bool) -> None:
        self.client.set_terminated(run, "FINISHED" if ok else "FAILED")


def artifact_root(uri: str | None) -> str | None:
    """mlartifacts/ beside a sqlite store's database file, as a file URI (None: MLflow's default)."""
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri or not uri.startswith("sqlite:///") or uri == "sqlite:///:memory:":
        return None
    database = Path(uri.removeprefix("sqlite:///")).expanduser().absolute()
    return (database.parent / "mlartifacts").as_uri()
