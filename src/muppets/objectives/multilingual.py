"""Language-balanced BERT pretraining batches over one prepared corpus per language.

Multilingual BERT samples its pretraining data per language with the exponentially smoothed
probabilities ``p_l ∝ n_l^α`` (:mod:`muppets.data.language_sampling`; here ``n_l`` = the
training tokens of language ``l``). Every global batch of ``B`` sequences is composed with
those probabilities, stratified: language ``l`` gets ``floor(B p_l)`` sequences, and the
``B - Σ floor(B p_l)`` slots left over go to the languages by systematic sampling on the
fractional parts ``B p_l - floor(B p_l)`` (each language wins one with exactly that
probability), so the expected count of every language in every batch is ``B p_l`` and its
variance is as small as it can be. The slots are then shuffled, so that each DDP rank and
micro-batch gets a mix.

Each language keeps its own :class:`~muppets.objectives.mlm_nsp.BertPretrainingData` (its own
epochs of sentence pairs or packed sequences, held-out documents and masks, seeded from the run
seed and the language's index); the ``k``-th sequence a run draws from language ``l`` is that
language's example ``k``. A step's composition is drawn from ``(seed, step)`` alone and the
number of sequences each language gave to the steps before is a cumulative sum kept as it
grows, so every batch is a pure function of ``(seed, step)``: a resumed run sees exactly the
batches it would have seen, and a DDP rank builds only its own slice.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import torch

from muppets.errors import ConfigError
from muppets.objectives.mlm_nsp import BertPretrainingData
from muppets.objectives.step_data import EpochCache, PretrainingData

__all__ = ["allocate", "LanguageBalancedData", "language_seed"]

log = logging.getLogger(__name__)


def language_seed(seed: int, index: int) -> int:
    """The seed of language ``index``'s own data (plans, held-out split order, masks)."""
    return int(np.random.SeedSequence([seed, 29, index]).generate_state(1)[0])


def allocate(batch_size: int, probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``(L,)`` sequences per language in a batch of ``batch_size``: ``floor(B p)`` each, the
    rest by systematic sampling on the fractional parts (expected count exactly ``B p``).

    >>> allocate(10, np.array([0.5, 0.3, 0.2]), np.random.default_rng(0)).tolist()
    [5, 3, 2]
    """
    want = batch_size * np.asarray(probs, dtype=np.float64)  # (L,)
    counts = np.floor(want).astype(np.int64)
    left = batch_size - int(counts.sum())
    if left:
        cum = np.cumsum(want - counts)  # ends at `left` (up to rounding)
        points = rng.random() + np.arange(left)  # (left,) one per unit of the fractional mass
        winners = np.minimum(np.searchsorted(cum, points, side="right"), len(counts) - 1)
        np.add.at(counts, winners, 1)
    return counts


class LanguageBalancedData(PretrainingData):
    """The trainer's ``StepData`` mixing per-language BERT data with smoothed probabilities
    (see the module docstring). ``parts`` maps each language to its data; ``probs`` (same
    order) sums to 1."""

    order_salt = 31

    def __init__(self, parts: dict[str, BertPretrainingData], probs: Sequence[float], batch_size: int,
                 accumulation: int, seed: int) -> None:
        super().__init__(batch_size, accumulation, seed)
        if len(parts) != len(probs) or not parts:
            raise ConfigError(f"{len(parts)} languages but {len(probs)} sampling probabilities")
        self.languages = list(parts)
        self.parts = [parts[lang] for lang in self.languages]
        self.probs = np.asarray(probs, dtype=np.float64)
        if (self.probs < 0).any() or abs(self.probs.sum() - 1.0) > 1e-9:
            raise ConfigError(f"language probabilities {list(probs)} must be >= 0 and sum to 1")
        self.cfg = self.parts[0].cfg
        self._prefix = np.zeros((1, len(self.parts)), dtype=np.int64)  # (steps + 1, L) sequences before each step
        self._slots = EpochCache(self._draw_slots, size=4)

    # --- composition -------------------------------------------------------------------
    def _draw_slots(self, step: int) -> np.ndarray:
        """``(B,)`` language of each slot of global batch ``step``."""
        rng = np.random.default_rng([self.seed, self.order_salt, step])
        counts = allocate(self.batch_size, self.probs, rng)
        return rng.permutation(np.repeat(np.arange(len(counts)), counts))

    def composition(self, step: int) -> np.ndarray:
        """``(L,)`` sequences of each language in global batch ``step``."""
        return np.bincount(self._slots(step), minlength=len(self.parts))

    def before(self, step: int) -> np.ndarray:
        """``(L,)`` sequences each language gave to the steps before ``step`` (cumulative, kept)."""
        have = len(self._prefix) - 1
        if step > have:
            rows = [self.composition(s) for s in range(have, step)]
            self._prefix = np.concatenate([self._prefix, self._prefix[-1] + np.cumsum(rows, axis=0)])
        return self._prefix[step]

    def locate_language(self, g: int) -> tuple[int, int]:
        """Global example ``g`` -> ``(language index, its example number in that language)``."""
        step, slot = divmod(g, self.batch_size)
        slots = self._slots(step)
        lang = int(slots[slot])
        return lang, int(self.before(step)[lang] + np.count_nonzero(slots[:slot] == lang))

    # --- StepData protocol -------------------------------------------------------------
    def batch(self, examples: range) -> dict[str, torch.Tensor]:
        rows = []
        for g in examples:
            lang, k = self.locate_language(g)
            rows.append(self.parts[lang].example(k))
        return self.parts[0].collate(rows)

    def normalizers(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        return self.parts[0].normalizers(batch)

    def num_tokens(self, batch: dict[str, torch.Tensor]) -> int:
        return self.parts[0].num_tokens(batch)

    def eval_batches(self, batch_size: int) -> list[dict[str, torch.Tensor]]:
        """Every language's fixed held-out batches, one language after the other."""
        return [b for part in self.parts for b in part.eval_batches(batch_size)]

    def describe(self) -> dict:
        """Languages, their probabilities and the expected sequences per batch."""
        return {lang: {"probability": float(p), "per_batch": float(p * self.batch_size)}
                for lang, p in zip(self.languages, self.probs)}
