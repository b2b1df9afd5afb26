"""`--log mlflow[=TRACKING_URI]`: every run an MLflow run, a sweep's or suite's a parent run with a
child per point or cell (MLflow's `mlflow.parentRunId` tag), through `MlflowClient` alone (no
process-wide active run, so children are created by run id).

Where: TRACKING_URI, else $MLFLOW_TRACKING_URI, else `runs/mlflow/mlflow.db` (a sqlite store in
the command's runs folder, never the working folder by accident); the experiment is
$MLFLOW_EXPERIMENT_NAME, else "tosca". An experiment tosca creates in a sqlite store keeps its
artifacts in `mlartifacts/` beside the database file, so `mlflow ui --backend-store-uri
sqlite:///runs/mlflow/mlflow.db` shows the runs and their files. Installed by
`pip install 'tosca[mlflow]'` (MLflow with its UI).

Checked before any work, nothing written (`trackers.places`): a scheme MLflow does not know, a
folder or file: URI (MLflow's file store, which MLflow itself refuses now), an in-memory database,
a database path that is a link, a folder or a device, or that lies inside a zarr store or a tosca
folder, a planted `mlartifacts` link, an http(s) server that does not answer within seconds. The
store is opened at the first run, under a lock beside a sqlite database (`<db>.lock`), so two
commands creating one new store at once do not both build its tables. Artifacts of a store on
this machine are written by tosca's own writer (no link followed at any name it makes); a remote
store's through MLflow. Requests to a server give up after a few seconds, not MLflow's minutes of
retries: a server that goes away is one line (`trackers.tracking`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from tosca_foundation import atomic
from tosca_foundation.errors import UserError
from tosca_foundation.locks import folder_lock
from tosca_foundation.text import printable, tell
from tosca_heads.trackers.logger_registry import Logger, Metric, register_logger
from tosca_heads.trackers.places import TrackerFolder, check_file, refuse_link

EXPERIMENT = "tosca"
FOLDER = "mlflow"  # runs/mlflow/: the default store
DATABASE = "mlflow.db"
ARTIFACTS = "mlartifacts"  # beside a sqlite database: the artifacts of the experiments tosca creates
SIDE_FILES = ("-journal", "-wal", "-shm")  # what sqlite writes beside its database
BATCH_METRICS = 1000  # MLflow's log_batch limits
BATCH_PARAMS = 100
PARAM_VALUE = 6000
PROBE_SECONDS = 5.0
# requests to a tracking server: a few seconds, not MLflow's default minutes of retries (a user's own
# settings of these variables are kept)
BOUNDED = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
}


@register_logger
class MlflowLogger(Logger):
    name = "mlflow"
    summary = "MLflow runs (mlflow=TRACKING_URI; default $MLFLOW_TRACKING_URI, else runs/mlflow/mlflow.db)"
    extra = "mlflow"

    def __init__(self, where: str | None, runs_root: Path) -> None:
        super().__init__(where, runs_root)
        from mlflow.tracking import MlflowClient

        for name in ("mlflow", "alembic"):  # MLflow sets its loggers to INFO on import; a new store's
            logging.getLogger(name).setLevel(logging.WARNING)  # tables would print two lines
        self.client_class = MlflowClient
        self.experiment_name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or EXPERIMENT
        self.database: Path | None = None  # a sqlite store's file
        self.made_by_tosca: TrackerFolder | None = None  # the default folder, made at the first run
        given = where or os.environ.get("MLFLOW_TRACKING_URI")
        if given is None:
            self.made_by_tosca = TrackerFolder(None, runs_root, FOLDER, "--log mlflow", "MLflow's store")
            self.uri = f"sqlite:///{(self.made_by_tosca.path / DATABASE).absolute()}"
            self.flag = "--log mlflow"
        else:
            self.uri = given
            self.flag = printable(f"--log mlflow={given}")
        self._check()
        self._client: Any = None
        self.experiment = ""

    @property
    def place(self) -> str:
        store = self.uri if self.database is None else f"sqlite:///{self.database.absolute()}"
        return f"mlflow={store} experiment={self.experiment_name}"

    def opened_by(self) -> str:
        """Where the runs are and how to see them: `mlflow ui` on the store, or the server's page."""
        experiment = f"experiment {self.experiment_name}"
        if urlparse(self.uri).scheme.lower() in ("http", "https"):
            return f"MLflow runs ({experiment}) on the tracking server {shown_uri(self.uri)}: open it in a browser"
        if self.database is not None:
            store = f"sqlite:///{self.database.absolute()}"
            where = str(self.database.absolute())
        else:
            store = where = shown_uri(self.uri)
        return f"MLflow runs ({experiment}) in {where}: see them with `mlflow ui --backend-store-uri {shlex.quote(store)}`"

    # ------------------------------------------------------------------ checks, before any work

    def _check(self) -> None:
        scheme = urlparse(self.uri).scheme.lower()
        if scheme in ("", "file"):
            raise UserError(
                f"{self.flag}: a folder is MLflow's file store, which MLflow no longer takes; give "
                "sqlite:///PATH/mlflow.db for a store on this machine, or a tracking server's http(s):// address"
            )
        try:
            from mlflow.tracking._tracking_service.utils import _tracking_store_registry

            known = _tracking_store_registry._registry
        except (ImportError, AttributeError):  # another MLflow: its own error comes at the first run
            known = None
        if known is not None and scheme not in known:
            listed = ", ".join(s for s in sorted(known) if s)
            raise UserError(
                f"{self.flag}: not a tracking URI MLflow knows; use one of its schemes ({listed})"
            )
        if scheme == "sqlite":
            self._check_database()
        elif scheme in ("http", "https"):
            self._probe()

    def _check_database(self) -> None:
        path = unquote(self.uri[len("sqlite://") :].split("?", 1)[0]).removeprefix("/")
        if path in ("", ":memory:"):
            raise UserError(
                f"{self.flag}: an in-memory database keeps nothing; give sqlite:///PATH/mlflow.db"
            )
        database = Path(path).expanduser()
        check_file(database, "--log mlflow", "MLflow's database")
        for suffix in SIDE_FILES:
            refuse_link(database.with_name(database.name + suffix))
        refuse_link(database.parent / ARTIFACTS)
        if (database.parent / ARTIFACTS).exists() and not (database.parent / ARTIFACTS).is_dir():
            raise UserError(
                f"{self.flag}: {database.parent / ARTIFACTS} is a file, not MLflow's artifact folder"
            )
        self.database = database

    def _probe(self) -> None:
        """The server answers (any HTTP answer will do) within PROBE_SECONDS; a read, nothing written."""
        try:
            with urllib.request.urlopen(f"{self.uri.rstrip('/')}/health", timeout=PROBE_SECONDS):
                pass
        except urllib.error.HTTPError:
            pass  # it answered
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            reason = getattr(reason, "strerror", None) or reason  # "Connection refused", not its errno
            raise UserError(
                f"{self.flag}: no tracking server answers there ({printable(reason)}); start it, or pass "
                "another --log mlflow=URI"
            ) from None

    # ------------------------------------------------------------------ the store, at the first run

    @contextlib.contextmanager
    def _bounded(self) -> Iterator[None]:
        """MLflow's HTTP retries bounded to seconds while a call runs (the user's settings kept)."""
        saved = {name: os.environ.get(name) for name in BOUNDED}
        for name, value in BOUNDED.items():
            os.environ.setdefault(name, value)
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)

    @property
    def client(self) -> Any:
        """The client, the store opened and the experiment found or created at the first use."""
        if self._client is None:
            lock: Any = contextlib.nullcontext()
            if self.database is not None:
                if self.made_by_tosca is not None:
                    self.made_by_tosca.make()
                self.database.parent.mkdir(parents=True, exist_ok=True)
                lock = folder_lock(
                    self.database,
                    "MLflow store",
                    "wait for it",
                    on_wait=lambda holder: tell(f"waiting for {holder}, which is opening {self.database}"),
                )
            with lock:
                client = self.client_class(tracking_uri=self.uri)
                found = client.get_experiment_by_name(self.experiment_name)
                if found is not None and found.lifecycle_stage != "active":
                    raise UserError(
                        f"the MLflow experiment {printable(self.experiment_name)} is deleted in {self.uri}: restore it "
                        "(mlflow experiments restore) or set MLFLOW_EXPERIMENT_NAME"
                    )
                if found is None:
                    artifacts = (
                        None if self.database is None else str((self.database.parent / ARTIFACTS).absolute())
                    )
                    self.experiment = client.create_experiment(
                        self.experiment_name, artifact_location=artifacts
                    )
                else:
                    self.experiment = found.experiment_id
            self._client = client
        return self._client

    # ------------------------------------------------------------------ the five events

    def start(self, name: str, parent: Any | None) -> str:
        tags = {} if parent is None else {"mlflow.parentRunId": parent}
        with self._bounded():
            return self.client.create_run(self.experiment, run_name=name, tags=tags).info.run_id

    def params(self, run: Any, params: dict[str, str | int | float | bool]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[:PARAM_VALUE]) for k, v in params.items()]
        with self._bounded():
            for i in range(0, len(items), BATCH_PARAMS):
                self.client.log_batch(run, params=items[i : i + BATCH_PARAMS])

    def metrics(self, run: Any, metrics: Sequence[Metric]) -> None:
        from mlflow.entities import Metric as MlflowMetric

        now = int(time.time() * 1000)
        items = [MlflowMetric(m.key, m.value, now, m.step) for m in metrics]
        with self._bounded():
            for i in range(0, len(items), BATCH_METRICS):
                self.client.log_batch(run, metrics=items[i : i + BATCH_METRICS])

    def artifacts(self, run: Any, files: Sequence[Path]) -> None:
        with self._bounded():
            uri = self.client.get_run(run).info.artifact_uri
            folder = local_folder(uri)
            if folder is None:  # a remote store: MLflow sends them
                for path in files:
                    self.client.log_artifact(run, str(path))
                return
        # <experiment's folder>/<run id>/artifacts: those three never through a link
        atomic.make_folders(folder, folder.parents[2])
        for path in files:
            with open(path, "rb") as source, atomic.writing(folder / Path(path).name, "wb") as target:
                shutil.copyfileobj(source, target)

    def end(self, run: Any, ok: bool) -> None:
        with self._bounded():
            self.client.set_terminated(run, "FINISHED" if ok else "FAILED")

    # ------------------------------------------------------------------ resumed sweeps and suites

    def handle_id(self, run: Any) -> str | None:
        return str(run)

    def reopen(self, ident: str) -> Any | None:
        with self._bounded():
            try:
                found = self.client.get_run(ident)
            except Exception as exc:  # gone (deleted for good, another store): a new parent
                if "RESOURCE_DOES_NOT_EXIST" in str(getattr(exc, "error_code", "")) or "not found" in str(
                    exc
                ):
                    return None
                raise
            if found.info.lifecycle_stage != "active" or found.info.experiment_id != self.experiment:
                return None
            self.client.update_run(ident, status="RUNNING")
        return ident

    def discard(self, run: Any) -> None:
        with self._bounded():
            self.client.set_terminated(run, "KILLED")  # never left running, even in the bin
            self.client.delete_run(run)


def shown_uri(uri: str) -> str:
    """A tracking URI as said on a terminal: a password in it as ***."""
    parsed = urlparse(uri)
    if parsed.password is None:
        return uri
    user = f"{parsed.username}:***@" if parsed.username else "***@"
    host = parsed.netloc.rpartition("@")[2]
    return parsed._replace(netloc=f"{user}{host}").geturl()


def local_folder(uri: str) -> Path | None:
    """A run's artifact folder on this machine (a file: URI or an absolute path); None elsewhere."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    if parsed.scheme == "" and uri.startswith("/"):
        return Path(uri)
    return None
