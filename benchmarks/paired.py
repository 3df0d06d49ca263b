"""Seed-paired comparisons shared by the benchmark tables: mean ± sample std over seeds, and the
paired difference of two arms run with the same seeds (its 95% t interval, wins and losses).

>>> d = paired({1: 80.0, 2: 82.0, 3: 81.0}, {1: 79.0, 2: 80.0, 3: 81.0})
>>> d["mean"], d["wins"], d["losses"], d["seeds"]
(1.0, 2, 0, [1, 2, 3])
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping

# two-sided 95% Student t quantiles by number of pairs (n - 1 degrees of freedom)
_T95 = {2: 12.706, 3: 4.303, 4: 3.182, 5: 2.776, 6: 2.571, 7: 2.447, 8: 2.365, 9: 2.306, 10: 2.262}


def t_interval(diffs: list[float]) -> tuple[float, float]:
    """95% t interval of the mean paired difference (two-sided); NaN for fewer than 2 pairs."""
    n = len(diffs)
    if n < 2:
        return (math.nan, math.nan)
    t = _T95.get(n, 2.262 if n <= 30 else 1.96)  # beyond 10 pairs: the n = 10 value, conservative
    half = t * statistics.stdev(diffs) / math.sqrt(n)
    return (statistics.mean(diffs) - half, statistics.mean(diffs) + half)


def summary(by_seed: Mapping[int, float]) -> dict:
    """Mean, sample std (0 for one seed), the seeds and their values in seed order."""
    seeds = sorted(by_seed)
    values = [by_seed[s] for s in seeds]
    return {"mean": statistics.mean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "seeds": seeds, "values": values}


def paired(arm: Mapping[int, float], base: Mapping[int, float]) -> dict | None:
    """``arm − base`` over the seeds both have (None if none): mean ± std, t95, wins-losses."""
    seeds = sorted(set(arm) & set(base))
    if not seeds:
        return None
    diffs = [arm[s] - base[s] for s in seeds]
    return {"mean": statistics.mean(diffs), "std": statistics.stdev(diffs) if len(diffs) > 1 else 0.0,
            "t95": t_interval(diffs), "seeds": seeds,
            "wins": sum(d > 0 for d in diffs), "losses": sum(d < 0 for d in diffs)}


def with_recorded(recorded: Mapping[int, float], rerun: Mapping[int, float], what: str) -> dict[int, float]:
    """An arm's per-seed scores from an earlier table (``recorded``) completed by the seeds run again
    now (``rerun``), which must reproduce the recorded ones (to 1e-6 points): fine-tuning is
    deterministic per seed on one thread, so a mismatch means the code or data changed since.
    Raises ``ValueError`` naming ``what`` on a mismatch."""
    for seed, score in rerun.items():
        if seed in recorded and abs(recorded[seed] - score) > 1e-6:
            raise ValueError(f"{what}: seed {seed} was {recorded[seed]:.6f}, its re-run gives {score:.6f}; "
                             "the recorded arm does not reproduce")
    return {**recorded, **rerun}

