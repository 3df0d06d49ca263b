"""``run_dir/multitask.png``, redrawn from ``log.jsonl`` at every evaluation (with the trainer's
``training_curves.png``) and at the end: per task,

* its selection score (``eval/<task>/<metric>``, one point per evaluation);
* its weight, step by step (``weight/<task>``, logged after every update by adaptive
  weightings; ``eval/weight/<task>`` otherwise), drawn only when some weight moved;
* its own training loss, **unweighted** (the logged term ``loss/task:<task>`` divided by the
  weight that step used), smoothed like the trainer's loss line. This is where a task that fits
  more slowly when it shares the updates shows itself; the weighted terms hide it.

Drawing uses the trainer's plotting (:mod:`muppets.train.plots`) and never raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from muppets.train.plots import Panel, Series, moving_average, smoothing_window, write_run_plot

PLOT_FILE = "multitask.png"


def _series(records: list[dict], name: str) -> tuple[np.ndarray, np.ndarray]:
    """The steps and finite values of ``name`` in the records that have it."""
    rows = [(r["step"], r[name]) for r in records
            if type(r.get("step")) is int and type(r.get(name)) in (int, float) and np.isfinite(r[name])]
    return (np.array([s for s, _ in rows], dtype=np.int64), np.array([v for _, v in rows], dtype=np.float64))


def unweighted_losses(records: list[dict], task: str, start_weight: float) -> tuple[np.ndarray, np.ndarray]:
    """``loss/task:<task>`` divided by the weight its step used: the ``weight/<task>`` logged
    after the previous update (``start_weight`` before the first one). Steps whose weight is 0
    are left out (their term carries no loss to recover).

    >>> recs = [{"step": 1, "loss/task:a": 2.0, "weight/a": 4.0}, {"step": 2, "loss/task:a": 8.0}]
    >>> [v.tolist() for v in unweighted_losses(recs, "a", 1.0)]
    [[1, 2], [2.0, 2.0]]
    """
    weight, steps, values = start_weight, [], []
    for r in records:
        loss = r.get(f"loss/task:{task}")
        if type(r.get("step")) is int and type(loss) in (int, float) and weight != 0 and np.isfinite(loss):
            steps.append(r["step"])
            values.append(loss / weight)
        new = r.get(f"weight/{task}")
        if type(new) in (int, float) and np.isfinite(new):
            weight = new
    return np.array(steps, dtype=np.int64), np.array(values, dtype=np.float64)


def plan(records: list[dict], keys: Mapping[str, str], start_weights: Mapping[str, float] | None = None
         ) -> list[Panel]:
    """Up to three panels (see the module docstring). ``keys``: task -> its primary metric;
    ``start_weights``: task -> the weight of its first step (1 when not given)."""
    start_weights = start_weights or {}
    scores, weights = Panel("selection score per task"), Panel("task weight")
    losses = Panel("task training loss, unweighted")
    for task, key in keys.items():
        steps, values = _series(records, f"eval/{task}/{key}")
        if len(values):
            scores.series.append(Series(f"{task} ({key})", steps, values))
        steps, values = _series(records, f"weight/{task}")
        style = "smooth"
        if not len(values):
            (steps, values), style = _series(records, f"eval/weight/{task}"), "points"
        if len(values):
            weights.series.append(Series(task, steps, values, style))
        steps, values = unweighted_losses(records, task, start_weights.get(task, 1.0))
        if len(values):
            smooth = moving_average(values, smoothing_window(len(values)))
            losses.series.append(Series(task, steps, smooth, "smooth"))
    moved = any(np.ptp(s.values) > 0 for s in weights.series)
    losses.log_y = all(bool((s.values > 0).all()) for s in losses.series)  # a regression loss can dwarf the rest
    return [p for p in (scores, weights if moved else None, losses) if p is not None and p.series]


def write_multitask_plot(run_dir: Path, keys: Mapping[str, str],
                         start_weights: Mapping[str, float] | None = None) -> Path | None:
    """Draw :func:`plan` into ``run_dir/multitask.png`` atomically; None when nothing was drawn."""
    run_dir = Path(run_dir)
    return write_run_plot(run_dir, run_dir / PLOT_FILE, "/".join(run_dir.resolve().parts[-2:]),  # e.g. dwa/seed-4
                          panels=lambda records: plan(records, keys, start_weights))
