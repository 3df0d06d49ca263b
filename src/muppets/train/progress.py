"""The training progress bar and the ETA of the whole run.

A run ends at whichever comes first: the last step, or the ``max_minutes`` budget of this
``train()`` call. tqdm's own estimate knows neither the budget nor the evaluations (it follows
the recent step rate), so the bar shows :func:`run_eta` instead::

    train:  12%|██▍                 | 120/1000 [01:40, ETA 12:13, loss 2.3141, 2310 tok/s]
    train:  12%|██▍                 | 120/1000 [01:40, ETA 03:20 (time budget), loss 2.3141, …]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tqdm.auto import tqdm

from muppets.progress import progress_bar

# tqdm's layout with the remaining time replaced by our postfix (which starts with the ETA)
BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"


@dataclass(frozen=True)
class Eta:
    """Seconds until the run ends (None: not known yet) and what ends it: ``steps`` or ``budget``."""

    seconds: float | None
    by: str = "steps"

    def __str__(self) -> str:
        if self.seconds is None:
            return "ETA ?"
        text = f"ETA {tqdm.format_interval(self.seconds)}"
        return text + " (time budget)" if self.by == "budget" else text


def run_eta(step: int, total_steps: int, start_step: int, elapsed_s: float, budget_s: float = 0.0) -> Eta:
    """When this ``train()`` call ends, from its pace so far.

    Args:
        step: optimizer steps done in total.
        total_steps: the run's last step.
        start_step: the step this call started (resumed) from; its pace counts only its own steps.
        elapsed_s: wall time of this call so far, evaluations and checkpoints included (so
            their share is spread over the remaining steps).
        budget_s: the call's time budget (``max_minutes * 60``); 0 = none.

    Returns the smaller of the steps-based estimate and the budget left.

    >>> run_eta(step=30, total_steps=100, start_step=20, elapsed_s=5.0)
    Eta(seconds=35.0, by='steps')
    >>> run_eta(step=30, total_steps=100, start_step=20, elapsed_s=5.0, budget_s=20.0)
    Eta(seconds=15.0, by='budget')
    """
    done, left = step - start_step, max(total_steps - step, 0)
    by_steps = elapsed_s / done * left if done > 0 else None
    by_budget = max(budget_s - elapsed_s, 0.0) if budget_s > 0 else None
    if by_budget is not None and (by_steps is None or by_budget < by_steps):
        return Eta(by_budget, "budget")
    return Eta(by_steps, "steps")


def training_bar(total: int, initial: int, enabled: bool) -> Any:
    """The bar of a run, from ``initial`` (the resumed step) to ``total`` steps; shown only when
    ``enabled`` and stderr is a terminal (:func:`muppets.progress.progress_bar`; elsewhere the
    trainer's own ``log_every`` lines tell the progress). Update with
    ``bar.set_postfix_str(f"{eta}, …")``."""
    return progress_bar(total=total, initial=initial, unit="step", desc="train", enabled=enabled,
                        log_every_s=0, bar_format=BAR_FORMAT)
