"""Sentence-pair instances for next sentence prediction (Devlin et al. 2019, §3.1, App. A.2).

An *epoch plan* walks every document sentence by sentence, as google-research/bert's
``create_instances_from_document`` does: sentences are gathered until a target length is
reached (``max_seq_len - 3``, or with probability ``short_seq_prob`` a random shorter one),
split at a random sentence boundary into segment A and B; with probability 1/2 B is replaced by
text from a random other document and the unused sentences are put back. The reference forces
NotNext whenever only one sentence was gathered, which skews the labels towards NotNext (56% on
short documents); here an IsNext draw on a one-sentence chunk takes the next sentence as B, and
a document's lone last sentence is skipped (before the coin is drawn: emitting it as NotNext
only would skew the labels, 52% NotNext on documents of 3-30 sentences) — so every chunk is a
fair coin and the labels are 50/50 in expectation.
The reference also draws the random document uniformly, so on a corpus of a few long books and
many short articles almost every NotNext B of a book is Wikipedia text and NSP degenerates into
telling style apart; here the document is drawn in proportion to its length, so NotNext B
segments come from the same mixture of text as A segments. The draw leaves A's own document out
(its tokens are skipped, not redrawn: the reference redraws up to 10 times and gives up, which
beside a dominant document loses most NotNext pairs), so it fails only when no other document
has text; the plan counts NotNext draws and failures (``not_next_drawn``, ``not_next_failed``).
Pairs longer than the budget are trimmed one token at a time from the front or back (at random)
of the longer segment.

Because the sentences of a document are contiguous in the token shards, each segment is one
token range, so a plan is five integer columns — ``a_lo, a_hi, b_lo, b_hi, is_random`` — and
building it costs O(#sentences) time and O(#instances) memory. Other differences from the
reference: the short target length is drawn per instance (the reference draws it once per
document), and documents come from a held-in/held-out split.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class PairPlan:
    """One row per instance; token offsets index the corpus' flat token array."""

    a_lo: np.ndarray  # (N,) int64
    a_hi: np.ndarray  # (N,) int64
    b_lo: np.ndarray  # (N,) int64
    b_hi: np.ndarray  # (N,) int64
    is_random: np.ndarray  # (N,) bool: True = NotNext
    not_next_drawn: int = 0  # NotNext B segments asked for while building the plan
    not_next_failed: int = 0  # of those, draws that found no other document (the instance is dropped)

    def __len__(self) -> int:
        return len(self.a_lo)

    def summary(self) -> str:
        """``"N pairs, NotNext x%, f of n NotNext draws failed"`` (for the logs)."""
        share = float(self.is_random.mean()) if len(self) else 0.0
        return (f"{len(self):,} pairs, NotNext {share:.1%}, {self.not_next_failed:,} of "
                f"{self.not_next_drawn:,} NotNext draws failed")


class _Walker:
    """State shared by the per-document walk: token offsets of sentences, rng, budget."""

    def __init__(self, sent_ends: np.ndarray, doc_ends: np.ndarray, docs: np.ndarray,
                 max_tokens: int, short_seq_prob: float, rng: np.random.Generator) -> None:
        self.sent_ends = sent_ends
        self.doc_ends = doc_ends
        self.docs = docs
        self.max_tokens = max_tokens
        self.short_seq_prob = short_seq_prob
        self.rng = rng
        self.rows = _Rows(5)  # a_lo, a_hi, b_lo, b_hi, is_random
        self.doc_cum_tokens = np.cumsum(self._doc_lengths(docs))  # (D,) for length-weighted draws
        self.doc_index = {int(d): k for k, d in enumerate(docs)}  # document -> its place in docs
        self.not_next_drawn = self.not_next_failed = 0

    def _doc_lengths(self, docs: np.ndarray) -> np.ndarray:
        """Tokens in each of ``docs``."""
        docs = np.asarray(docs, dtype=np.int64)
        s0 = np.where(docs > 0, np.asarray(self.doc_ends)[np.maximum(docs - 1, 0)], 0)
        s1 = np.asarray(self.doc_ends)[docs]
        lo = np.where(s0 > 0, np.asarray(self.sent_ends)[np.maximum(s0 - 1, 0)], 0)
        return np.asarray(self.sent_ends)[s1 - 1] - lo

    def tok(self, sent: int) -> int:
        """Token offset where sentence ``sent`` starts."""
        return 0 if sent == 0 else int(self.sent_ends[sent - 1])

    def doc_sents(self, d: int) -> tuple[int, int]:
        return (0 if d == 0 else int(self.doc_ends[d - 1])), int(self.doc_ends[d])

    def target(self) -> int:
        if self.rng.random() < self.short_seq_prob:
            return int(self.rng.integers(2, self.max_tokens + 1))
        return self.max_tokens

    def walk(self, d: int) -> None:
        """Append every instance of document ``d`` (google-research/bert's loop)."""
        s0, s1 = self.doc_sents(d)
        start = [self.tok(s0), *self.sent_ends[s0:s1].tolist()]  # start[k]: token offset of sentence s0+k
        tok = lambda sent: start[sent - s0]  # noqa: E731 - local, hot loop
        target, chunk_start, i = self.target(), s0, s0
        while i < s1:
            if i == s1 - 1 or tok(i + 1) - tok(chunk_start) >= target:
                if i == chunk_start and i + 1 == s1:
                    break  # a lone last sentence cannot be IsNext: skip it whatever the coin, keep labels 50/50
                want_random = self.rng.random() < 0.5
                if i == chunk_start and not want_random:
                    i += 1  # IsNext needs two sentences: take the next one as B
                n = i + 1 - chunk_start
                a_end = chunk_start + (int(self.rng.integers(1, n)) if n >= 2 else 1)
                if n == 1 or want_random:
                    b = self.random_b(d, target - (tok(a_end) - tok(chunk_start)))
                    if b is not None:
                        self.emit(tok(chunk_start), tok(a_end), *b, True)
                    i = a_end - 1  # put the unused sentences back
                else:
                    self.emit(tok(chunk_start), tok(a_end), tok(a_end), tok(i + 1), False)
                chunk_start, target = i + 1, self.target()
            i += 1

    def random_b(self, d: int, want: int) -> tuple[int, int] | None:
        """Token range of ``>= want`` tokens of whole sentences from a random other document
        (None, counted, when there is none)."""
        self.not_next_drawn += 1
        other = self.other_document(d)
        if other is None:
            self.not_next_failed += 1
            return None
        s0, s1 = self.doc_sents(other)
        first = int(self.rng.integers(s0, s1))
        lo = self.tok(first)
        # the first sentence end at or beyond lo + want (whole sentences, at least one)
        last = first + int(np.searchsorted(self.sent_ends[first:s1], lo + max(want, 1)))
        return lo, int(self.sent_ends[min(last, s1 - 1)])

    def other_document(self, d: int) -> int | None:
        """A document of ``docs`` other than ``d``, drawn in proportion to its length: a token
        is drawn among all but ``d``'s, and its document taken."""
        k = self.doc_index[d]
        lo = int(self.doc_cum_tokens[k - 1]) if k > 0 else 0
        own = int(self.doc_cum_tokens[k]) - lo
        rest = int(self.doc_cum_tokens[-1]) - own
        if rest <= 0:
            return None
        token = int(self.rng.integers(rest))
        token += own if token >= lo else 0  # skip d's own tokens
        return int(self.docs[int(np.searchsorted(self.doc_cum_tokens, token, side="right"))])

    def emit(self, a_lo: int, a_hi: int, b_lo: int, b_hi: int, is_random: bool) -> None:
        a_lo, a_hi, b_lo, b_hi = truncate_pair(a_lo, a_hi, b_lo, b_hi, self.max_tokens, self.rng)
        if a_hi > a_lo and b_hi > b_lo:
            self.rows.append(a_lo, a_hi, b_lo, b_hi, int(is_random))


class _Rows:
    """Growing ``(n, width)`` int64 rows, their storage doubled when full: 8 bytes a value (a
    Python tuple of ints costs about 25)."""

    def __init__(self, width: int, capacity: int = 1024) -> None:
        self.data = np.empty((capacity, width), dtype=np.int64)
        self.n = 0

    def append(self, *values: int) -> None:
        if self.n == len(self.data):
            self.data = np.concatenate([self.data, np.empty_like(self.data)])
        self.data[self.n] = values
        self.n += 1

    def array(self) -> np.ndarray:
        """``(n, width)``: the rows so far (a view)."""
        return self.data[:self.n]


def truncate_pair(a_lo: int, a_hi: int, b_lo: int, b_hi: int, budget: int,
                  rng: np.random.Generator) -> tuple[int, int, int, int]:
    """Trim the longer segment one token at a time, from its front or back at random,
    until both fit in ``budget`` tokens (google-research/bert's ``truncate_seq_pair``)."""
    while (a_hi - a_lo) + (b_hi - b_lo) > budget:
        if (a_hi - a_lo) > (b_hi - b_lo):
            over = min((a_hi - a_lo) + (b_hi - b_lo) - budget, (a_hi - a_lo) - (b_hi - b_lo))
            front = int(rng.binomial(over, 0.5))
            a_lo, a_hi = a_lo + front, a_hi - (over - front)
        else:
            over = min((a_hi - a_lo) + (b_hi - b_lo) - budget, max(1, (b_hi - b_lo) - (a_hi - a_lo)))
            front = int(rng.binomial(over, 0.5))
            b_lo, b_hi = b_lo + front, b_hi - (over - front)
    return a_lo, a_hi, b_lo, b_hi


def plan_pairs(sent_ends: np.ndarray, doc_ends: np.ndarray, docs: np.ndarray, max_seq_len: int,
               short_seq_prob: float, rng: np.random.Generator) -> PairPlan:
    """Build one epoch's instances over documents ``docs`` (indices), shuffled.

    Args:
        sent_ends: ``(S,)`` token end offset of every sentence in the corpus.
        doc_ends: ``(D,)`` sentence end offset of every document.
        docs: the document indices to use (e.g. the training split); B segments of random
            pairs are drawn from these too.
        max_seq_len: full length including ``[CLS]`` and two ``[SEP]``.
    """
    walker = _Walker(sent_ends, doc_ends, docs, max_seq_len - 3, short_seq_prob, rng)
    for d in docs:
        walker.walk(int(d))
    rows = walker.rows.array()
    rows = rows[rng.permutation(len(rows))]  # (N, 5), a copy: the walker's storage is freed
    return PairPlan(rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3], rows[:, 4].astype(bool),
                    walker.not_next_drawn, walker.not_next_failed)
