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

import dataclasses
import math
from collections.abc import Collection
from typing import TypeVar

from muppets.errors import ConfigError

SCHEDULES = ("linear", "cosine", "constant")
SCALED_WITH_STEPS = ("warmup_steps", "eval_every")  # train settings that follow train.steps when not set
C = TypeVar("C")  # a TrainConfig (imported by the trainer, which imports this module)


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


def scale_with_steps(train: C, planned_steps: int, keep: Collection[str] = ()) -> tuple[C, dict[str, tuple[int, int]]]:
    """``train`` (a :class:`~muppets.train.TrainConfig`) with the settings of
    :data:`SCALED_WITH_STEPS` not named in ``keep`` scaled by ``train.steps / planned_steps``:
    a recipe planned for ``planned_steps`` updates and shortened (or lengthened) keeps its warmup
    and its number of evaluations in proportion (0 stays 0, anything else at least 1). Returns
    the new config and ``{name: (old, new)}`` of what changed.

    >>> from muppets.train import TrainConfig
    >>> scale_with_steps(TrainConfig(steps=40, warmup_steps=300, eval_every=250), 3200)[1]
    {'warmup_steps': (300, 4), 'eval_every': (250, 3)}
    """
    steps = getattr(train, "steps")
    if planned_steps <= 0 or steps == planned_steps:
        return train, {}
    changed = {}
    for name in SCALED_WITH_STEPS:
        old = getattr(train, name)
        new = max(1, round(old * steps / planned_steps)) if old > 0 and name not in keep else old
        if new != old:
            changed[name] = (old, new)
    return dataclasses.replace(train, **{k: new for k, (_, new) in changed.items()}), changed  # type: ignore[type-var]


def warmup_warning(steps: int, warmup_steps: int) -> str | None:
    """What to warn about when warmup lasts the whole run (``warmup_steps >= steps``): the
    learning rate ends below its peak (or just reaches it) and never decays. None otherwise.

    >>> warmup_warning(40, 300)
    'train.warmup_steps=300 >= train.steps=40: the whole run is warmup; the learning rate ends at 13% of train.lr and never decays'
    """
    if steps <= 0 or warmup_steps < steps:
        return None
    end = lr_factor(steps, total_steps=steps, warmup_steps=warmup_steps)
    return (f"train.warmup_steps={warmup_steps} >= train.steps={steps}: the whole run is warmup; the learning "
            f"rate ends at {end:.0%} of train.lr and never decays")
