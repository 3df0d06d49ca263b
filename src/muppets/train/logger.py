"""Run logs: ``run_dir/log.jsonl`` (one JSON object per line) and optional TensorBoard.

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
from pathlib import Path
from typing import Any

from muppets.config import atomic_path
from muppets.errors import DataError

logger = logging.getLogger(__name__)

LOG_FILE = "log.jsonl"
TB_DIR = "tb"


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


def _tensorboard_writer() -> Any | None:
    """TensorBoard's ``SummaryWriter`` class, or None when tensorboard is not installed."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        logger.info("tensorboard is not installed; logging to %s only", LOG_FILE)
        return None
    return SummaryWriter


class RunLogger:
    """Appends records to ``log.jsonl`` and (optionally) TensorBoard; inert when not enabled.

    Args:
        run_dir: where ``log.jsonl`` and ``tb/`` go.
        enabled: False on every rank but the main one: nothing is written.
        tensorboard: also write scalars to ``run_dir/tb`` when tensorboard is importable.
    """

    def __init__(self, run_dir: Path, *, enabled: bool = True, tensorboard: bool = False) -> None:
        self.run_dir = Path(run_dir)
        self.enabled = enabled
        self._file = None
        self._tb = None
        # imported now (an import may draw random numbers; a caller restores its RNG after this),
        # opened at the first scalar: a run with nothing to log leaves no empty event file
        self._tb_class = None
        if enabled:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._file = (self.run_dir / LOG_FILE).open("a", encoding="utf-8")
            if tensorboard:
                self._tb_class = _tensorboard_writer()

    def log(self, record: dict[str, Any], *, tensorboard: bool = True) -> None:
        """Append ``record`` (must have ``step``); numbers also go to TensorBoard if asked."""
        if self._file is None:
            return
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        if self._tb_class is not None and tensorboard:
            if self._tb is None:
                self._tb = self._tb_class(log_dir=str(self.run_dir / TB_DIR))
            step = int(record["step"])
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)) and math.isfinite(value):
                    self._tb.add_scalar(key, value, step)

    def truncate_after(self, step: int) -> None:
        """Drop the records with ``step`` greater than ``step`` (atomic rewrite)."""
        if self._file is None:
            return
        self._file.close()
        path = self.run_dir / LOG_FILE
        kept = [r for r in _resumable_records(path) if int(r.get("step", 0)) <= step]
        with atomic_path(path) as tmp:
            tmp.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
        self._file = path.open("a", encoding="utf-8")

    def close(self) -> None:
        """Flush and close the files."""
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None
