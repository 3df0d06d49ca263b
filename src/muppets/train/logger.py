"""Run logs: ``run_dir/log.jsonl`` (one JSON object per line), and the experiment trackers
(TensorBoard, MLflow, W&B: :mod:`muppets.train.trackers`) that get its numbers.

Record kinds, all with an integer ``step`` (optimizer updates done):

- every step: ``{"step", "loss", "loss/<term>"..., "lr", "grad_norm", "tokens_per_s",
  "real_tokens", "elapsed_s"}`` (``real_tokens``: the step's non-padding tokens over every
  micro-batch and rank, so padding waste stays visible) — written for *every* step (not only every ``log_every``), so two runs
  can be compared step by step from their logs;
- every evaluation: ``{"step", "eval/<name>": value, ...}``;
- every checkpoint: ``{"step", "checkpoint": "<path>"}``.

On resume from step ``s`` the records with ``step > s`` (from the interrupted timeline) are
dropped first, so the log always describes one history. Only the main rank writes.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from muppets.config import atomic_path
from muppets.errors import DataError
from muppets.train.checkpoint import preserved_rng

if TYPE_CHECKING:  # (trackers imports rundir, which imports this module)
    from muppets.train.trackers import Tracker

logger = logging.getLogger(__name__)

LOG_FILE = "log.jsonl"


def read_log(run_dir: Path, *, strict: bool = True) -> list[dict[str, Any]]:
    """All records of ``run_dir/log.jsonl`` in order (empty when there is no log).

    With ``strict=False`` lines that are not a JSON object (e.g. the half-written last line of
    a killed run) are skipped instead of raising ``ValueError``."""
    path = Path(run_dir) / LOG_FILE
    if not path.is_file():
        return []
    with path.open(encoding="utf-8") as fh:
        if strict:
            return [json.loads(line) for line in fh if line.strip()]
        return [r for r in map(_try_record, fh) if r is not None]


def _try_record(line: str) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def _resumable_records(path: Path) -> list[dict[str, Any]]:
    """The records of a log a run resumes from: a half-written last line (the run was killed
    while writing it) is dropped with a warning; a bad line anywhere else is a DataError."""
    if not path.is_file():
        return []
    lines = [(n, line) for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if line.strip()]
    out = []
    for i, (number, line) in enumerate(lines):
        record = _try_record(line)
        if record is not None:
            out.append(record)
        elif i == len(lines) - 1:
            logger.warning("%s: dropped a half-written last line %d (the run was stopped while writing it)",
                           path, number)
        else:
            raise DataError("not a JSON object: the log is damaged", path=path, line=number, value=line[:80])
    return out


def step_losses(run_dir: Path) -> dict[int, float]:
    """``{step: loss}`` for every step record of the log."""
    return {r["step"]: r["loss"] for r in read_log(run_dir) if "loss" in r}


class RunLogger:
    """Appends records to ``log.jsonl`` and reports their numbers to experiment trackers
    (:mod:`muppets.train.trackers`); inert when not enabled.

    Args:
        run_dir: where ``log.jsonl`` goes.
        enabled: False on every rank but the main one: nothing is written.
        trackers: where the numbers of reported records also go; they are given ``config`` (the
            run's resolved config) first, at the first record with a number to report, so a run
            with nothing to log opens no tracker run (and leaves no empty TensorBoard file).
        config: the run's resolved config, for the trackers.
    """

    def __init__(self, run_dir: Path, *, enabled: bool = True, trackers: Sequence[Tracker] = (),
                 config: dict[str, Any] | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.enabled = enabled
        self._file = None
        self._trackers = list(trackers) if enabled else []
        self._config = config if config is not None else {}
        self._started = False
        if enabled:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._file = (self.run_dir / LOG_FILE).open("a", encoding="utf-8")

    def log(self, record: dict[str, Any], *, report: bool = True) -> None:
        """Append ``record`` (must have ``step``); its finite numbers also go to the trackers if
        ``report``."""
        if self._file is None:
            return
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        if not (report and self._trackers):
            return
        scalars = {k: v for k, v in record.items()
                   if k != "step" and isinstance(v, (int, float)) and math.isfinite(v)}
        if not scalars:
            return
        if not self._started:  # opening a tracker's run must not move the training's random streams
            self._started = True
            with preserved_rng():
                for tracker in self._trackers:
                    tracker.log_config(self._config)
        for tracker in self._trackers:
            tracker.log_scalars(int(record["step"]), scalars)

    def truncate_after(self, step: int) -> None:
        """Drop the records with ``step`` greater than ``step`` (atomic rewrite)."""
        if self._file is None:
            return
        self._file.close()
        path = self.run_dir / LOG_FILE
        records = _resumable_records(path)
        kept = [r for r in records if int(r.get("step", 0)) <= step]
        if len(kept) < len(records):
            self._warn_rewind(step, max(int(r.get("step", 0)) for r in records))
        with atomic_path(path) as tmp:
            tmp.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
        self._file = path.open("a", encoding="utf-8")

    def _warn_rewind(self, step: int, last: int) -> None:
        kept = [t.name for t in self._trackers if not t.rewinds]
        if kept:
            logger.warning("%s dropped steps %d-%d of the interrupted attempt; %s cannot: they keep that attempt's "
                           "points of those steps, and this one logs them again", LOG_FILE, step + 1, last,
                           " and ".join(kept))

    def close(self, failed: bool = False) -> None:
        """Flush and close the log, and end the trackers' runs (as failed when training raised)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        trackers, self._trackers = self._trackers, []
        for tracker in trackers:
            tracker.close(failed)
