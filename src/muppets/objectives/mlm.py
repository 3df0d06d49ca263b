"""Masked language model targets (Devlin et al. 2019, §3.1 and App. A.1).

For every sequence, ``round(masked_lm_prob * n)`` of its ``n`` maskable tokens (at least one,
at most ``max_predictions``) are chosen; ``[CLS]``, ``[SEP]`` and padding never are. Each chosen
token is replaced by ``[MASK]`` 80% of the time, by a random (non-special) token 10% of the time
and left unchanged 10% of the time; the model must predict the original. With whole-word
masking, the choice is made over words (a token plus its ``##`` continuations), never taking a
word that would exceed the budget — google-research/bert's ``create_masked_lm_predictions``.
The masking is drawn from the generator it is given, i.e. afresh for every batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

IGNORE = -100


@dataclass
class MaskingConfig:
    masked_lm_prob: float = 0.15  # share of maskable tokens that become prediction targets
    max_predictions: int = 20  # cap per sequence (20 for 128 tokens as in the paper's code)
    mask_prob: float = 0.8  # of the targets: replaced by [MASK]
    random_prob: float = 0.1  # of the targets: replaced by a random token (the rest stay)
    whole_word: bool = False  # mask all pieces of a word together


@dataclass
class MaskedSequence:
    input_ids: np.ndarray  # (T,) with the replacements applied
    positions: np.ndarray  # (P,) positions of the targets, sorted
    labels: np.ndarray  # (P,) original ids at those positions


def word_groups(maskable: np.ndarray, continuation: np.ndarray) -> list[np.ndarray]:
    """Group maskable positions into words: a ``##`` piece joins the position before it when
    that one is maskable too. maskable: ``(n,)`` positions, sorted; continuation: ``(n,)`` bool."""
    starts = np.ones(len(maskable), dtype=bool)
    if len(maskable) > 1:
        starts[1:] = ~(continuation[1:] & (np.diff(maskable) == 1))
    return np.split(maskable, np.flatnonzero(starts)[1:])


def choose_targets(maskable: np.ndarray, continuation: np.ndarray | None, cfg: MaskingConfig,
                   rng: np.random.Generator) -> np.ndarray:
    """Positions to predict, sorted; ``continuation`` given = whole-word masking."""
    n = len(maskable)
    if n == 0:
        return maskable
    budget = min(cfg.max_predictions, max(1, int(round(n * cfg.masked_lm_prob))))
    if continuation is None:
        return np.sort(rng.choice(maskable, size=min(budget, n), replace=False))
    chosen: list[np.ndarray] = []
    taken = 0
    groups = word_groups(maskable, continuation)
    for g in rng.permutation(len(groups)):
        if taken >= budget:
            break
        if taken + len(groups[g]) > budget:
            continue
        chosen.append(groups[g])
        taken += len(groups[g])
    return np.sort(np.concatenate(chosen)) if chosen else maskable[:0]


def mask_sequence(ids: np.ndarray, maskable: np.ndarray, cfg: MaskingConfig, mask_id: int,
                  random_ids: np.ndarray, rng: np.random.Generator,
                  is_continuation: np.ndarray | None = None) -> MaskedSequence:
    """Apply MLM masking to one sequence.

    Args:
        ids: ``(T,)`` token ids including special tokens.
        maskable: sorted positions that may be chosen (not [CLS]/[SEP]/[PAD]).
        random_ids: the ids a "random token" replacement is drawn from (the non-special vocab).
        is_continuation: ``(V,)`` bool lookup of ``##`` pieces, required for whole-word masking.
    """
    cont = None
    if cfg.whole_word:
        assert is_continuation is not None, "whole-word masking needs the ##-piece lookup"
        cont = is_continuation[ids[maskable]]
    positions = choose_targets(maskable, cont, cfg, rng)
    labels = ids[positions].copy()
    out = ids.copy()
    u = rng.random(len(positions))
    to_mask = u < cfg.mask_prob
    to_random = (u >= cfg.mask_prob) & (u < cfg.mask_prob + cfg.random_prob)
    out[positions[to_mask]] = mask_id
    out[positions[to_random]] = random_ids[rng.integers(len(random_ids), size=int(to_random.sum()))]
    return MaskedSequence(out, positions, labels)
