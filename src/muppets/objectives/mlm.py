"""Masked language model targets (Devlin et al. 2019, §3.1 and App. A.1).

For every sequence, ``round(masked_lm_prob * n)`` of its ``n`` maskable tokens (at least one,
at most ``max_predictions``) are chosen; ``[CLS]``, ``[SEP]`` and padding never are. Each chosen
token is replaced by ``[MASK]`` 80% of the time, by a random (non-special) token 10% of the time
and left unchanged 10% of the time; the model must predict the original. With whole-word
masking, the choice is made over words (a token plus its ``##`` continuations), never taking a
word that would exceed the budget — google-research/bert's ``create_masked_lm_predictions``.
The masking is drawn from the generator it is given, i.e. afresh for every batch.

Masking levels (``MaskingConfig.level``) choose *units* instead of pieces, from the unit
boundaries stored with the prepared corpus (:mod:`muppets.data.units`): ``whole_word`` (words of
a segmenter: jieba for Chinese, as Chinese-BERT-wwm; the pre-tokenizer for English), ``phrase``
and ``entity`` (ERNIE 1.0's knowledge masking, Sun et al. 2019 §3.2), and ``mixture``, which
draws one level per sequence with the probabilities of ``MaskingConfig.mixture``. The budget
is the same as for pieces, and units are taken in random order until it is reached; the unit
that would cross it is taken with probability ``(budget - taken) / its size`` and the draw
stops there, so the *expected* number of targets is exactly the budget (the masked fraction
stays the configured rate). Google's rule of skipping such a unit instead falls short when no
unit is a single piece (units of 2-4 pieces: 18.7 targets for a budget of 19, 1.5% fewer;
``tests/test_masking_levels.py`` measures both). Targets are still single pieces: each is
replaced 80/10/10 on its own and the loss is per piece. A sequence may thus hold up to one
unit minus one piece more than its budget, and so more than ``max_predictions`` targets (the
batch pads to the longest); when the rate asks for more than ``max_predictions`` the cap holds
and Google's rule applies.

Pretraining on MLM alone (no NSP) reads fixed-length blocks cut from the running text of the
corpus: :func:`plan_packed` plans them for one epoch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from muppets.data.units import UNIT_BITS
from muppets.errors import ConfigError

IGNORE = -100
LEVELS = ("piece", "whole_word", "phrase", "entity", "mixture")


@dataclass
class MaskingMixture:
    """Probability of each level for ``level: mixture``, drawn per sequence (weights are
    normalised; a level at 0 is never drawn). ERNIE 1.0 published no mixing ratio (it moved
    through the levels in stages), so the default weighs the four alike."""

    piece: float = 0.25  # single pieces (BERT)
    whole_word: float = 0.25  # whole words of the corpus' segmenter
    phrase: float = 0.25  # phrase chunks (ERNIE)
    entity: float = 0.25  # lexicon entities (ERNIE); needs corpus.entity_lexicon

    def weights(self) -> dict[str, float]:
        """Level -> probability, levels at 0 left out."""
        raw = {name: getattr(self, name) for name in ("piece", "whole_word", "phrase", "entity")}
        bad = {k: v for k, v in raw.items() if not (math.isfinite(v) and v >= 0)}
        if bad or not sum(raw.values()) > 0:
            raise ConfigError(f"data.masking.mixture={raw}: weights must be >= 0 with a positive sum")
        total = sum(raw.values())
        return {k: v / total for k, v in raw.items() if v > 0}


@dataclass
class MaskingConfig:
    masked_lm_prob: float = 0.15  # share of maskable tokens that become prediction targets
    max_predictions: int = 20  # cap per sequence (20 for 128 tokens as in the paper's code)
    mask_prob: float = 0.8  # of the targets: replaced by [MASK]
    random_prob: float = 0.1  # of the targets: replaced by a random token (the rest stay)
    whole_word: bool = False  # Google's whole-word masking: a piece and its ## continuations together (level piece only)
    level: str = "piece"  # piece | whole_word | phrase | entity | mixture: units from the corpus' stored boundaries
    mixture: MaskingMixture = field(default_factory=MaskingMixture)  # level probabilities for level=mixture

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ConfigError(f"data.masking.level={self.level!r}: one of {list(LEVELS)}")
        if self.whole_word and self.level != "piece":
            raise ConfigError(f"data.masking.whole_word=true is Google's ##-piece rule; with level={self.level} "
                              "set it to false (level=whole_word masks the segmenter's words)")
        if self.level == "mixture":
            self.mixture.weights()  # checks them

    def unit_levels(self) -> list[str]:
        """The levels that need unit boundaries stored with the corpus."""
        levels = list(self.mixture.weights()) if self.level == "mixture" else [self.level]
        return [name for name in levels if name != "piece"]


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
                   rng: np.random.Generator, exact: bool = False) -> np.ndarray:
    """Positions to predict, sorted; ``continuation`` given = whole units (a ``True`` position
    continues the unit of the one before). ``exact``: the unit crossing the budget is taken
    with probability ``(budget - taken) / size`` and the draw stops (the expected count is the
    budget); else it is skipped and smaller units are tried (google-research/bert)."""
    n = len(maskable)
    if n == 0:
        return maskable
    wanted = max(1, int(round(n * cfg.masked_lm_prob)))
    budget = min(cfg.max_predictions, wanted)
    if continuation is None:
        return np.sort(rng.choice(maskable, size=min(budget, n), replace=False))
    exact = exact and wanted <= cfg.max_predictions  # a capped sequence keeps the cap
    chosen: list[np.ndarray] = []
    taken = 0
    groups = word_groups(maskable, continuation)
    for g in rng.permutation(len(groups)):
        if taken >= budget:
            break
        size = len(groups[g])
        if taken + size > budget:
            if not exact:
                continue
            if rng.random() < (budget - taken) / size:
                chosen.append(groups[g])
            break
        chosen.append(groups[g])
        taken += size
    return np.sort(np.concatenate(chosen)) if chosen else maskable[:0]


def draw_level(cfg: MaskingConfig, rng: np.random.Generator) -> str:
    """The level of one sequence: ``cfg.level``, or a draw from ``cfg.mixture``."""
    if cfg.level != "mixture":
        return cfg.level
    weights = cfg.mixture.weights()
    return list(weights)[int(rng.choice(len(weights), p=list(weights.values())))]


def mask_sequence(ids: np.ndarray, maskable: np.ndarray, cfg: MaskingConfig, mask_id: int,
                  random_ids: np.ndarray, rng: np.random.Generator,
                  is_continuation: np.ndarray | None = None,
                  units: np.ndarray | None = None) -> MaskedSequence:
    """Apply MLM masking to one sequence.

    Args:
        ids: ``(T,)`` token ids including special tokens.
        maskable: sorted positions that may be chosen (not [CLS]/[SEP]/[PAD]).
        random_ids: the ids a "random token" replacement is drawn from (the non-special vocab).
        is_continuation: ``(V,)`` bool lookup of ``##`` pieces, required for ``cfg.whole_word``.
        units: ``(T,)`` uint8 unit-start bits (:data:`~muppets.data.units.UNIT_BITS`) of the
            sequence, required for the levels other than ``piece``.
    """
    cont, level = None, draw_level(cfg, rng)
    if level != "piece":
        assert units is not None, f"level {level} needs the corpus' unit boundaries"
        cont = (units[maskable] & UNIT_BITS[level]) == 0
    elif cfg.whole_word:
        assert is_continuation is not None, "whole-word masking needs the ##-piece lookup"
        cont = is_continuation[ids[maskable]]
    positions = choose_targets(maskable, cont, cfg, rng, exact=level != "piece")
    labels = ids[positions].copy()
    out = ids.copy()
    u = rng.random(len(positions))
    to_mask = u < cfg.mask_prob
    to_random = (u >= cfg.mask_prob) & (u < cfg.mask_prob + cfg.random_prob)
    out[positions[to_mask]] = mask_id
    out[positions[to_random]] = random_ids[rng.integers(len(random_ids), size=int(to_random.sum()))]
    return MaskedSequence(out, positions, labels)


# ----------------------------------------------------------------------------- MLM-only sequences


@dataclass
class PackedPlan:
    """One epoch's MLM-only sequences (see :func:`plan_packed`). The *stream* is the documents
    laid end to end in a shuffled order, one separator between two documents; sequence ``k``
    is ``[starts[k], stops[k])`` of the stream (rows shuffled)."""

    starts: np.ndarray  # (N,) int64 stream offset where each sequence starts
    stops: np.ndarray  # (N,) int64 stream offset where it ends (exclusive)
    doc_lo: np.ndarray  # (D,) int64 corpus token offset of the stream's k-th document
    doc_len: np.ndarray  # (D,) int64 its tokens
    doc_starts: np.ndarray  # (D,) int64 its stream offset (its separator, if any, follows its last token)

    def __len__(self) -> int:
        return len(self.starts)

    def sequence(self, row: int, tokens: np.ndarray, sep_id: int) -> tuple[np.ndarray, np.ndarray]:
        """Sequence ``row`` as ``(ids (L,) int64, is_separator (L,) bool)``; a separator at either
        edge is dropped (the sequence's own [CLS] / [SEP] stand there)."""
        lo, hi = int(self.starts[row]), int(self.stops[row])
        parts, k = [], int(np.searchsorted(self.doc_starts, lo, side="right")) - 1
        while k < len(self.doc_starts) and self.doc_starts[k] < hi:
            start, n = int(self.doc_starts[k]), int(self.doc_len[k])
            a, b = max(lo, start) - start, min(hi, start + n) - start  # this document's part, in its own offsets
            if b > a:
                parts.append(np.asarray(tokens[self.doc_lo[k] + a:self.doc_lo[k] + b], dtype=np.int64))
            if lo <= start + n < hi:
                parts.append(np.array([-1], dtype=np.int64))  # the separator after document k
            k += 1
        ids = np.concatenate(parts)
        if ids[-1] < 0:
            ids = ids[:-1]
        if len(ids) and ids[0] < 0:
            ids = ids[1:]
        is_sep = ids < 0
        ids[is_sep] = sep_id
        return ids, is_sep


def plan_packed(sent_ends: np.ndarray, doc_ends: np.ndarray, docs: np.ndarray, max_seq_len: int,
                short_seq_prob: float, rng: np.random.Generator) -> PackedPlan:
    """MLM-only sequences over documents ``docs``: contiguous fixed-length blocks of the running
    text, across document boundaries (like fairseq's ``--sample-break-mode none``).

    The documents, in a new random order every epoch, are laid end to end with a separator
    ([SEP]) between two of them, and the stream is cut into blocks of ``max_seq_len - 2`` tokens
    (``[CLS]`` and the final ``[SEP]`` make up the rest), each starting where the previous ended:
    every token is read once an epoch. A cut falls wherever the count ends, inside a sentence
    and even inside a word, so a sequence can start with a ``##`` piece (whole-word masking then
    takes that piece as a word of its own) and a cut word's pieces are predicted without the
    other half. This is *not* RoBERTa's FULL-SENTENCES (Liu et al. 2019, §4.2; fairseq's
    ``complete``), which packs whole sentences only: at 128 tokens whole sentences leave 16% of
    the positions padding on the quickstart corpus (28.6 tokens a sentence), blocks only the stream's last. Nor
    DOC-SENTENCES, which also stops at every document end (a padded tail per document, most of
    the positions on a corpus of short documents). Cutting words costs little: at most one word
    per sequence end, and google-research/bert's own instances lose tokens at either end when
    ``truncate_seq_pair`` shortens them, so they start and end inside words too. (Ending blocks
    before a ``##`` piece instead would make the plan depend on the tokenizer and read the
    corpus while planning, for under one word of context a sequence.)

    With probability ``short_seq_prob`` a sequence is short instead, as in BERT (to resemble short
    fine-tuning inputs): it ends at the first sentence end at or after a target drawn uniformly
    from ``[2, max_tokens]`` (google-research/bert gathers whole sentences up to such a target),
    at ``max_tokens`` at most, and the next sequence starts there. Short sequences are padded in
    their batches: at ``short_seq_prob = 0.1`` and 128 tokens 96.3% of the positions stay real
    tokens on the quickstart corpus (100% at 0).

    Args:
        sent_ends: ``(S,)`` token end offset of every sentence in the corpus.
        doc_ends: ``(D,)`` sentence end offset of every document.
        docs: the document indices to use.
        max_seq_len: full length including ``[CLS]`` and the final ``[SEP]``.
    """
    max_tokens = max_seq_len - 2
    order = rng.permutation(np.asarray(docs, dtype=np.int64))  # (D,)
    sent_ends, doc_ends = np.asarray(sent_ends, dtype=np.int64), np.asarray(doc_ends, dtype=np.int64)
    s0 = np.where(order > 0, doc_ends[np.maximum(order - 1, 0)], 0)  # (D,) first sentence
    s1 = doc_ends[order]  # (D,) sentence stop
    doc_lo = np.where(s0 > 0, sent_ends[np.maximum(s0 - 1, 0)], 0)
    doc_len = sent_ends[s1 - 1] - doc_lo
    doc_starts = np.cumsum(doc_len + 1) - (doc_len + 1)
    total = int(doc_starts[-1] + doc_len[-1]) if len(order) else 0
    if short_seq_prob > 0:
        bounds = _cut_with_short(total, _stream_sentence_ends(sent_ends, s0, s1, doc_lo, doc_starts),
                                 max_tokens, short_seq_prob, rng)
    else:
        bounds = np.append(np.arange(0, total, max_tokens, dtype=np.int64), total)
    shuffle = rng.permutation(len(bounds) - 1)
    return PackedPlan(bounds[:-1][shuffle], bounds[1:][shuffle], doc_lo, doc_len, doc_starts)


def _stream_sentence_ends(sent_ends: np.ndarray, s0: np.ndarray, s1: np.ndarray, doc_lo: np.ndarray,
                          doc_starts: np.ndarray) -> np.ndarray:
    """``(S_docs,)`` stream offset of every sentence end of the documents, ascending."""
    counts = s1 - s0  # (D,) sentences per document
    first = np.cumsum(counts) - counts
    sentence = np.repeat(s0 - first, counts) + np.arange(int(counts.sum()))  # (S_docs,) corpus sentence ids
    return sent_ends[sentence] + np.repeat(doc_starts - doc_lo, counts)


def _cut_with_short(total: int, sentence_ends: np.ndarray, max_tokens: int, short_seq_prob: float,
                    rng: np.random.Generator) -> np.ndarray:
    """Sequence bounds ``(N + 1,)`` over a stream of ``total`` tokens: full sequences of
    ``max_tokens``, and with probability ``short_seq_prob`` a short one (see :func:`plan_packed`)."""
    bounds, pos = [0], 0
    while pos < total:
        if rng.random() < short_seq_prob:
            target = pos + int(rng.integers(2, max_tokens + 1))
            k = int(np.searchsorted(sentence_ends, target))
            end = int(sentence_ends[k]) if k < len(sentence_ends) else total
            pos = min(end, pos + max_tokens, total)
        else:
            pos = min(pos + max_tokens, total)
        bounds.append(pos)
    return np.asarray(bounds, dtype=np.int64)
