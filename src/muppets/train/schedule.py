"""Learning-rate schedules as pure functions of the step, so resuming needs only the step.

The factor multiplies the peak learning rate for update number ``step`` (1-based: ``step=1``
is the first optimizer update, ``step=total_steps`` the last):

- warmup (``step <= warmup_steps``): ``step / warmup_steps``, a linear ramp from 0 that reaches
  the peak on update ``warmup_steps`` (BERT, Devlin et al. 2019, sec. A.2);
- then decay over the remaining updates, with ``p = (step - warmup) / (total - warmup)`` in
  ``[0, 1]``: ``linear`` ``1 - p``; ``cosine`` ``(1 + cos(pi p)) / 2`` (Loshchilov & Hutter
  2017, without restarts); ``constant`` ``1``. The decayed value is mapped to
  ``[min_lr_ratio, 1]``: ``min_lr_ratio + (1 - min_lr_ratio) * decay``.

>>> lr_factor(5, total_steps=20, warmup_steps=10, schedule="linear")
0.5
>>> lr_factor(20, total_steps=20, warmup_steps=10, schedule="linear", min_lr_ratio=0.1)
0.1
>>> round(lr_factor(15, total_steps=20, warmup_steps=10, schedule="cosine"), 6)
0.5
"""

from __future__ import annotations

import math

from muppets.errors import ConfigError

SCHEDULES = ("linear", "cosine", "constant")


def check_schedule(schedule: str, min_lr_ratio: float) -> None:
    """Raise :class:`ConfigError` for an unknown schedule name or a ratio outside ``[0, 1]``."""
    if schedule not in SCHEDULES:
        raise ConfigError(f"train.schedule: {schedule!r} is not one of {list(SCHEDULES)}")
    if not 0.0 <= min_lr_ratio <= 1.0:
        raise ConfigError(f"train.min_lr_ratio: {min_lr_ratio!r} is not in [0, 1]")


def _decay(progress: float, schedule: str) -> float:
    if schedule == "linear":
        return 1.0 - progress
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    return 1.0


def lr_factor(
    step: int,
    *,
    total_steps: int,
    warmup_steps: int = 0,
    schedule: str = "linear",
    min_lr_ratio: float = 0.0,
) -> float:
    """Multiplier of the peak learning rate for update ``step`` (1-based); see the module doc."""
    check_schedule(schedule, min_lr_ratio)
    if warmup_steps > 0 and step <= warmup_steps:
        return max(step, 0) / warmup_steps
    span = max(total_steps - warmup_steps, 1)
    progress = min(max((step - warmup_steps) / span, 0.0), 1.0)
    return min_lr_ratio + (1.0 - min_lr_ratio) * _decay(progress, schedule)
