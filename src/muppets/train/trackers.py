"""Experiment trackers beside ``log.jsonl``: TensorBoard, MLflow (a local store), W&B (offline).

``report_to`` (``train.report_to`` of a pretraining config, ``report_to`` of ``finetune`` and
``features``, ``finetune.report_to`` of ``multitask``) lists where a run reports besides
``log.jsonl``:

- ``tensorboard``: event files in ``run_dir/tb`` (the pretraining default; skipped with a log
  line when tensorboard is not installed);
- ``mlflow``: one MLflow run (experiment ``muppets``) in a local tracking store: ``run_dir/mlruns``,
  or ``tracking_uri`` (a directory, a ``file:`` URI, or a ``sqlite:`` one with the full ``mlflow``
  package; nothing else, so nothing leaves the machine), with MLflow's telemetry off;
- ``wandb``: one Weights & Biases run (project ``muppets``) in offline mode under
  ``run_dir/wandb`` (``wandb sync run_dir/wandb/offline-run-*`` uploads it later, if you wish),
  with wandb's telemetry off;
- ``none`` (alone), or an empty list: ``log.jsonl`` only.

Every tracker gets the same scalars: each evaluation's record and, every ``log_every`` steps,
the step's record (``log.jsonl`` holds every step), numbers only, non-finite ones left out;
and the run's resolved config (MLflow: params with dotted keys plus a ``config.json`` artifact;
W&B: the run's config; TensorBoard: a text summary). MLflow's names have ``.`` for ``/``
(``eval.f1`` for ``eval/f1``: :func:`mlflow_key`). Only the main rank reports. mlflow and
wandb are optional extras: naming one that is not installed is a :class:`ConfigError` that says
``pip install 'muppets[mlflow]'`` (or ``[wandb]``). They are imported when the trainer starts,
never by ``import muppets``, and a tracker opens its run at the first record it reports. They
are kept offline through the process's environment, set when the trainer starts:
``MLFLOW_DISABLE_TELEMETRY=true`` (and ``MLFLOW_ALLOW_FILE_STORE=true`` for a directory store,
which MLflow 3 otherwise refuses), ``WANDB_MODE=offline``, ``WANDB_ERROR_REPORTING=false``.

**Resume.** One run directory is one tracker run: the ids are kept in ``run_dir/trackers.json``,
and a resumed run (or one started again) logs to the same MLflow run (params keep their first
values, the ``config.json`` artifact is the latest config) and to the same W&B run id (each
process writes its own ``offline-run-*`` directory; a sync uploads them to one run). TensorBoard
hides the events logged after the checkpoint a run resumes from (``purge_step``); MLflow and W&B
cannot take points back: after a run killed between checkpoints, the steps it trained after its
last checkpoint are logged again, beside the first attempt's, and a warning says which.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import os
import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

from muppets.config import write_json_atomic
from muppets.errors import ConfigError
from muppets.train.rundir import flatten

logger = logging.getLogger(__name__)

NONE = "none"  # report_to: [none] = log.jsonl only
EXPERIMENT = "muppets"  # the MLflow experiment and the W&B project of every run
IDS_FILE = "trackers.json"  # run_dir/trackers.json: {"mlflow": {...}, "wandb": {...}} run ids
TB_DIR = "tb"
LOCAL_SCHEMES = ("", "file", "sqlite")  # MLflow tracking URIs that stay on this machine
EXTRAS = ("mlflow", "wandb")  # trackers that are optional extras of the same name (pip install 'muppets[mlflow]')
MAX_PARAM_CHARS = 500  # an MLflow param value is cut here (the full config is the config.json artifact)


@dataclass(frozen=True)
class TrackedRun:
    """What a tracker knows of the run it reports."""

    run_dir: Path
    name: str  # the run's name in the tracker (the last two parts of run_dir)
    start_step: int = 0  # the step the run starts (or resumes) from
    tracking_uri: str = ""  # MLflow: the store ("" = run_dir/mlruns)


class Tracker(Protocol):
    """One experiment tracker; it opens its run at its first call."""

    name: str  # what report_to calls it
    rewinds: bool  # whether a resume hides what the interrupted attempt logged after the checkpoint

    def log_config(self, config: dict[str, Any]) -> None:
        """Record the run's resolved config."""
        ...

    def log_scalars(self, step: int, scalars: dict[str, float]) -> None:
        """Record ``{name: value}`` at ``step``."""
        ...

    def close(self, failed: bool = False) -> None:
        """End the run (as failed when training raised); a tracker never opened does nothing."""
        ...


def check_reporting(report_to: Sequence[str], tracking_uri: str) -> None:
    """Raise :class:`ConfigError` (key ``report_to`` / ``tracking_uri``) for an unknown tracker,
    ``none`` beside a tracker, a tracker named twice, one whose extra is not installed, or a
    tracking URI that is not local."""
    names = list(report_to)
    unknown = [n for n in names if n not in TRACKERS and n != NONE]
    if unknown:
        raise ConfigError(f"report_to: unknown tracker {unknown[0]!r}; choose from {', '.join([*TRACKERS, NONE])}",
                          key="report_to")
    if (NONE in names and len(names) > 1) or len(set(names)) != len(names):
        raise ConfigError(f"report_to: {names} names a tracker twice, or none beside a tracker", key="report_to")
    for name in names:  # found now (not imported), so a missing extra stops a run before its work
        if name in EXTRAS and importlib.util.find_spec(name) is None:
            raise _not_installed(name)
    scheme = urlparse(tracking_uri).scheme
    if len(scheme) > 1 and scheme not in LOCAL_SCHEMES:  # (one letter: a Windows drive)
        raise ConfigError(f"tracking_uri: {tracking_uri!r} is not a local store; muppets reports offline only: "
                          f"give a directory, a file: or a sqlite: URI", key="tracking_uri")


def open_trackers(report_to: Sequence[str], run: TrackedRun) -> list[Tracker]:
    """The trackers ``report_to`` names (their packages imported now, their runs not yet opened)."""
    return [TRACKERS[name](run) for name in report_to if name != NONE]


def read_ids(run_dir: Path) -> dict[str, Any]:
    """``run_dir/trackers.json`` ({} when missing or unreadable)."""
    try:
        ids = json.loads((Path(run_dir) / IDS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return ids if isinstance(ids, dict) else {}


def _keep_id(run_dir: Path, tracker: str, entry: dict[str, str]) -> None:
    write_json_atomic(Path(run_dir) / IDS_FILE, {**read_ids(run_dir), tracker: entry})


def _not_installed(module: str) -> ConfigError:
    return ConfigError(f"report_to: {module} is not installed: pip install 'muppets[{module}]'", key="report_to")


def _require(module: str) -> Any:
    """Import ``module`` (an optional extra of the same name), or say how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise _not_installed(module) from None


# ----------------------------------------------------------------------------- TensorBoard


class TensorBoardTracker:
    """Scalars and a config text summary in ``run_dir/tb`` (nothing when tensorboard is missing)."""

    name = "tensorboard"
    rewinds = True

    def __init__(self, run: TrackedRun) -> None:
        self.run = run
        self._writer: Any = None
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            logger.info("tensorboard is not installed; not reporting to it")
            SummaryWriter = None  # noqa: N806
        self._class = SummaryWriter

    def _open(self) -> Any:
        if self._writer is None and self._class is not None:
            purge = self.run.start_step + 1 if self.run.start_step else None  # hide the events after the checkpoint
            self._writer = self._class(log_dir=str(self.run.run_dir / TB_DIR), purge_step=purge)
        return self._writer

    def log_config(self, config: dict[str, Any]) -> None:
        writer = self._open()
        if writer is not None:
            writer.add_text("config", "```\n" + json.dumps(config, indent=2) + "\n```", self.run.start_step)

    def log_scalars(self, step: int, scalars: dict[str, float]) -> None:
        writer = self._open()
        if writer is not None:
            for key, value in scalars.items():
                writer.add_scalar(key, value, step)

    def close(self, failed: bool = False) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


# ----------------------------------------------------------------------------- MLflow


def mlflow_uri(run: TrackedRun) -> str:
    """The tracking URI of ``run``: ``tracking_uri`` (a directory as a ``file:`` URI), else
    ``run_dir/mlruns``."""
    uri = run.tracking_uri
    if len(urlparse(uri).scheme) > 1:
        return uri
    return Path(uri or run.run_dir / "mlruns").resolve().as_uri()


def mlflow_key(name: str) -> str:
    """``name`` as an MLflow metric or param name: ``/`` becomes ``.`` (MLflow's file store keeps
    a metric in a file of that path, so ``loss`` and ``loss/mlm`` could not both be), and the
    characters MLflow refuses become ``_`` (``eval/f1`` -> ``eval.f1``)."""
    return re.sub(r"[^\w.\- :]", "_", name.replace("/", "."))


def _params(config: dict[str, Any]) -> dict[str, str]:
    """The config as MLflow params: dotted keys, JSON values (strings as they are), cut to
    :data:`MAX_PARAM_CHARS`."""
    out = {}
    for key, value in flatten(config).items():
        text = value if isinstance(value, str) else json.dumps(value)
        out[mlflow_key(key)] = text if len(text) <= MAX_PARAM_CHARS else text[:MAX_PARAM_CHARS - 1] + "…"
    return out


class MlflowTracker:
    """One MLflow run in a local tracking store (see the module docstring)."""

    name = "mlflow"
    rewinds = False

    def __init__(self, run: TrackedRun) -> None:
        self.run = run
        self.uri = mlflow_uri(run)
        os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"  # read when mlflow is imported
        if self.uri.startswith("file:"):  # MLflow 3 keeps its file store behind this switch
            os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
        _require("mlflow")
        from mlflow.tracking import MlflowClient

        try:  # the store is opened now, so that one MLflow cannot use stops the run before its first step
            self._client = MlflowClient(tracking_uri=self.uri)
        except Exception as error:  # (MlflowException, or the ImportError of a backend the package lacks)
            raise ConfigError(f"tracking_uri: MLflow cannot use {self.uri}: {type(error).__name__}: {error}",
                              key="tracking_uri") from error
        self.run_id: str | None = None

    def _open(self) -> tuple[Any, str]:
        if self.run_id is None:
            self.run_id = self._resumed(self._client) or self._new_run(self._client)
            _keep_id(self.run.run_dir, "mlflow", {"tracking_uri": self._store, "run_id": self.run_id})
        return self._client, self.run_id

    @property
    def _store(self) -> str:
        """The store as ``trackers.json`` names it: "" for the run's own ``mlruns`` (which moves
        with a copied run directory), else the URI."""
        return self.uri if self.run.tracking_uri else ""

    def _resumed(self, client: Any) -> str | None:
        """The run this run directory logged to before, set running again (None: there is none)."""
        from mlflow.exceptions import MlflowException

        entry = read_ids(self.run.run_dir).get("mlflow") or {}
        if entry.get("tracking_uri") != self._store or not entry.get("run_id"):
            return None
        try:
            client.update_run(entry["run_id"], status="RUNNING")
        except MlflowException as error:
            logger.warning("mlflow: run %s of %s is gone (%s); starting a new one", entry["run_id"], self.uri,
                           str(error).splitlines()[0])
            return None
        logger.info("mlflow: continuing run %s in %s", entry["run_id"], self.uri)
        return entry["run_id"]

    def _new_run(self, client: Any) -> str:
        from mlflow.exceptions import MlflowException

        experiment = client.get_experiment_by_name(EXPERIMENT)
        if experiment is not None:
            experiment_id = experiment.experiment_id
        else:
            try:
                experiment_id = client.create_experiment(EXPERIMENT)
            except MlflowException:  # another run created it meanwhile
                experiment_id = client.get_experiment_by_name(EXPERIMENT).experiment_id
        run = client.create_run(experiment_id, run_name=self.run.name,
                                tags={"muppets.run_dir": str(self.run.run_dir.resolve())})
        logger.info("mlflow: run %s in %s", run.info.run_id, self.uri)
        return run.info.run_id

    def log_config(self, config: dict[str, Any]) -> None:
        from mlflow.entities import Param

        client, run_id = self._open()
        logged = client.get_run(run_id).data.params  # a param cannot change: a resume adds new keys only
        params = _params(config)
        new = [Param(k, v) for k, v in params.items() if k not in logged]
        for start in range(0, len(new), 100):  # MLflow takes at most 100 params per batch
            client.log_batch(run_id, params=new[start:start + 100])
        changed = sorted(k for k, v in params.items() if k in logged and logged[k] != v)
        if changed:
            logger.info("mlflow: params keep their first values; changed since: %s (the config.json artifact "
                        "has this run's)", ", ".join(changed))
        client.log_dict(run_id, config, "config.json")

    def log_scalars(self, step: int, scalars: dict[str, float]) -> None:
        from mlflow.entities import Metric

        client, run_id = self._open()
        now = int(time.time() * 1000)
        client.log_batch(run_id, metrics=[Metric(mlflow_key(k), float(v), now, step) for k, v in scalars.items()])

    def close(self, failed: bool = False) -> None:
        if self.run_id is not None:
            self._client.set_terminated(self.run_id, status="FAILED" if failed else "FINISHED")
            self.run_id = None


# ----------------------------------------------------------------------------- Weights & Biases


class WandbTracker:
    """One W&B run in offline mode under ``run_dir/wandb`` (see the module docstring)."""

    name = "wandb"
    rewinds = False

    def __init__(self, run: TrackedRun) -> None:
        self.run = run
        # before wandb sets itself up: the process's wandb is offline (the run's settings alone
        # leave wandb's own telemetry probing its server) and records no telemetry
        os.environ.update(WANDB_MODE="offline", WANDB_ERROR_REPORTING="false")
        self._wandb = _require("wandb")
        self._run: Any = None

    def _open(self, config: dict[str, Any] | None = None) -> Any:
        if self._run is None:
            run_id = (read_ids(self.run.run_dir).get("wandb") or {}).get("id") or uuid.uuid4().hex[:12]
            settings = self._wandb.Settings(
                mode="offline", silent=True, console="off", disable_git=True, save_code=False,
                x_disable_stats=True, x_disable_meta=True, x_save_requirements=False)
            self._run = self._wandb.init(project=EXPERIMENT, name=self.run.name, id=run_id, resume="allow",
                                         dir=str(self.run.run_dir), config=config, reinit="create_new",
                                         settings=settings)
            _keep_id(self.run.run_dir, "wandb", {"id": run_id})
            logger.info("wandb: offline run %s in %s", run_id, self._run.dir)
        return self._run

    def log_config(self, config: dict[str, Any]) -> None:
        if self._run is None:
            self._open(config)
        else:
            self._run.config.update(config, allow_val_change=True)

    def log_scalars(self, step: int, scalars: dict[str, float]) -> None:
        self._open().log(dict(scalars), step=step)

    def close(self, failed: bool = False) -> None:
        if self._run is not None:
            self._run.finish(exit_code=1 if failed else 0)
            self._run = None


TRACKERS: dict[str, type] = {cls.name: cls for cls in (TensorBoardTracker, MlflowTracker, WandbTracker)}
"""The trackers ``report_to`` may name; a new one registers here."""
