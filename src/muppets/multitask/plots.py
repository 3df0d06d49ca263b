"""``run_dir/multitask.png``: each task's selection score and each task's weight over training,
drawn from ``log.jsonl`` (``eval/<task>/<metric>``, ``eval/weight/<task>``) with the trainer's
plotting (:mod:`muppets.train.plots`); drawing never raises."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from muppets.train.logger import read_log
from muppets.train.plots import Panel, Series, render

logger = logging.getLogger(__name__)

PLOT_FILE = "multitask.png"


def plan(records: list[dict], keys: Mapping[str, str]) -> list[Panel]:
    """Two panels: every task's primary selection score (``keys``: task -> metric key) and,
    when they moved, the task weights."""
    scores, weights = Panel("selection score per task"), Panel("task weight")
    for task, key in keys.items():
        for panel, name in ((scores, f"eval/{task}/{key}"), (weights, f"eval/weight/{task}")):
            rows = [(r["step"], r[name]) for r in records if name in r and np.isfinite(r[name])]
            if rows:
                steps, values = map(np.asarray, zip(*rows))
                panel.series.append(Series(task if panel is weights else f"{task} ({key})", steps, values))
    moved = any(np.ptp(s.values) > 0 for s in weights.series)
    return [p for p in (scores, weights if moved else None) if p is not None and p.series]


def write_multitask_plot(run_dir: Path, keys: Mapping[str, str]) -> Path | None:
    """Draw :func:`plan` into ``run_dir/multitask.png`` atomically; None when nothing was drawn."""
    path = Path(run_dir) / PLOT_FILE
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fig = render(plan(read_log(Path(run_dir), strict=False), keys), Path(run_dir).name)
        fig.savefig(tmp, format="png", dpi=90)
        os.replace(tmp, path)
        return path
    except Exception as error:  # a picture must never end a run
        logger.warning("could not draw %s: %s: %s", path, type(error).__name__, error)
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        return None
