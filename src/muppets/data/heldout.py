"""The held-out split of a prepared corpus: whole documents when there are many, blocks of text
when they are few or long.

Every pretraining objective evaluates on text it never trains on. On a corpus of many documents
(Wikipedia articles, a shelf of books) ``eval_fraction`` of the documents are held out whole
(:func:`split_documents`: a permutation drawn from ``split_seed``), as before. That fails on a
small corpus of one's own: two Gutenberg books are two documents, so holding out one wastes half
the text, and NSP, which needs two documents on each side, cannot start. So whole documents are
held out only while they hold at most ``max(2 * eval_fraction, 10%)`` of the tokens
(:data:`WHOLE_DOCUMENTS_MAX_SHARE`); otherwise :func:`split_corpus` holds out text:

1. every document is cut into blocks of nearly equal length at sentence boundaries (about
   ``eval_fraction × tokens / 8`` tokens each, at least 512: :data:`HELD_OUT_BLOCKS`,
   :data:`MIN_BLOCK_TOKENS`), so no sentence is on both sides;
2. blocks are held out in an order drawn from ``split_seed`` until they come closest to
   ``eval_fraction`` of the tokens (at least ``min_each`` blocks), each block a document of its own;
3. the text between held-out blocks of one document is one training document, cut into pieces
   of about ``document_tokens`` when that is given (NSP: pseudo-documents the size of a chapter,
   so that NotNext segments come from the same book as well as from the other one).

The split is a function of the corpus' sentence and document offsets, ``eval_fraction``,
``split_seed`` and ``min_each`` alone: the same in every run and on every rank. The objectives
then read the corpus as :meth:`~muppets.data.shards.TokenCorpus.regrouped` into these documents;
nothing is prepared again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from muppets.data.shards import TokenCorpus
from muppets.errors import ConfigError

__all__ = ["CorpusSplit", "split_corpus", "split_documents", "WHOLE_DOCUMENTS_MAX_SHARE", "HELD_OUT_BLOCKS",
           "MIN_BLOCK_TOKENS"]

log = logging.getLogger(__name__)

WHOLE_DOCUMENTS_MAX_SHARE = 0.1  # whole documents are held out while they hold <= max(2 f, this) of the tokens
HELD_OUT_BLOCKS = 8  # a text split holds out about this many blocks (fewer when blocks would be shorter than:)
MIN_BLOCK_TOKENS = 512  # the shortest block (four 128-token sequences), unless the corpus is tiny


@dataclass
class CorpusSplit:
    """Which documents of ``corpus`` are trained on and which are held out.

    ``corpus`` is the corpus given, or after a text split a :meth:`~TokenCorpus.regrouped` view
    whose documents are the training pieces and the held-out blocks; ``train_docs`` and
    ``eval_docs`` index its documents (each sorted).
    """

    corpus: TokenCorpus
    train_docs: np.ndarray  # (D_train,) int64
    eval_docs: np.ndarray  # (D_eval,) int64
    stored_documents: int  # documents of the prepared corpus
    text_from: int = 0  # after a text split, the stored documents its held-out blocks come from (0: whole documents)
    whole_share: float | None = None  # the share whole documents held out, or would have (None: too few of them)

    @property
    def by_text(self) -> bool:
        """True when blocks of text were held out, not whole documents."""
        return self.text_from > 0

    @property
    def held_out_tokens(self) -> int:
        return int(_doc_lengths(self.corpus)[self.eval_docs].sum())

    @property
    def held_out_share(self) -> float:
        return self.held_out_tokens / max(self.corpus.num_tokens, 1)

    def describe(self) -> str:
        """What was held out, for the log: e.g. ``held out 1,732 of 88,164 tokens (2.0%): …``."""
        head = (f"held out {self.held_out_tokens:,} of {self.corpus.num_tokens:,} tokens "
                f"({self.held_out_share:.1%})")
        if not self.by_text:
            return f"{head}: {len(self.eval_docs):,} of {self.stored_documents:,} documents, whole"
        why = ("too few documents to hold out whole ones" if self.whole_share is None else
               f"whole documents would hold out {self.whole_share:.1%}")
        return (f"{head}: {len(self.eval_docs):,} blocks of text, cut at sentence boundaries, from "
                f"{self.text_from:,} of the {self.stored_documents:,} documents ({why}); training on the "
                f"rest as {len(self.train_docs):,} documents")


def split_corpus(corpus: TokenCorpus, eval_fraction: float, seed: int, min_each: int = 1,
                 document_tokens: int = 0) -> CorpusSplit:
    """Hold out whole documents of ``corpus`` or, when they are too few or too long, blocks of
    text (see the module docstring); log what was held out.

    Args:
        eval_fraction: the share to hold out, in (0, 1).
        seed: ``split_seed``: which documents (or blocks) are held out.
        min_each: documents wanted on either side (2 for NSP: NotNext needs another document).
        document_tokens: with a text split, cut the training text into documents of about this
            many tokens (0 = one document per stretch between held-out blocks).
    """
    _check_fraction(eval_fraction)
    lengths = _doc_lengths(corpus)  # (D,)
    whole = None
    if corpus.num_documents >= 2 * min_each:
        train, held = split_documents(corpus.num_documents, eval_fraction, seed, min_each)
        whole = float(lengths[held].sum()) / max(corpus.num_tokens, 1)
        if whole <= max(2 * eval_fraction, WHOLE_DOCUMENTS_MAX_SHARE):
            split = CorpusSplit(corpus, train, held, corpus.num_documents, whole_share=whole)
            log.info("held-out split: %s", split.describe())
            return split
    split = _split_text(corpus, eval_fraction, seed, min_each, document_tokens, whole)
    log.info("held-out split: %s", split.describe())
    if split.held_out_share > max(2 * eval_fraction, WHOLE_DOCUMENTS_MAX_SHARE):
        log.warning("the corpus (%s tokens) is too small to hold out only eval_fraction=%g of it: %.1f%% is held "
                    "out", f"{corpus.num_tokens:,}", eval_fraction, 100 * split.held_out_share)
    return split


def split_documents(num_docs: int, eval_fraction: float, seed: int,
                    min_each: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic held-in / held-out document indices (each sorted): ``eval_fraction`` of
    the documents held out, and at least ``min_each`` documents on either side."""
    _check_fraction(eval_fraction)
    if num_docs < 2 * min_each:
        raise ConfigError(f"need at least {2 * min_each} documents for a train/eval split, got {num_docs}")
    n_eval = min(num_docs - min_each, max(min_each, int(round(num_docs * eval_fraction))))
    order = np.random.default_rng([seed, 3]).permutation(num_docs)
    return np.sort(order[n_eval:]), np.sort(order[:n_eval])


# ----------------------------------------------------------------------------- the text split


def _split_text(corpus: TokenCorpus, eval_fraction: float, seed: int, min_each: int, document_tokens: int,
                whole: float | None) -> CorpusSplit:
    """Blocks held out, the text between them trained on (steps 1-3 of the module docstring)."""
    total, sentence_ends = corpus.num_tokens, corpus.sentence_ends
    target = eval_fraction * total
    size = max(target / HELD_OUT_BLOCKS, MIN_BLOCK_TOKENS)
    size = max(1.0, min(size, total / (4 * min_each)))  # a tiny corpus still gets blocks to choose from
    blocks, owner = _cut(sentence_ends, np.asarray(corpus.doc_sentence_bounds), size)  # (B, 2), (B,)
    held = _pick(_token_lengths(sentence_ends, blocks), target, min_each, np.random.default_rng([seed, 5]))
    pieces, is_held = _pieces(sentence_ends, blocks, owner, held, document_tokens)
    if is_held.sum() < min_each or (~is_held).sum() < min_each:
        raise ConfigError(f"{corpus.directory}: {total:,} tokens in {corpus.num_sentences:,} sentences are too "
                          f"little text for {min_each} training and {min_each} held-out documents"
                          + (" (NSP needs two on each side: set data.nsp=false)" if min_each > 1 else ""))
    docs = np.arange(len(pieces))
    return CorpusSplit(corpus.regrouped(pieces[:, 1]), docs[~is_held], docs[is_held], corpus.num_documents,
                       text_from=len(np.unique(owner[held])), whole_share=whole)


def _cut(sentence_ends: np.ndarray, ranges: np.ndarray, size: float) -> tuple[np.ndarray, np.ndarray]:
    """Each ``[start, stop)`` sentence range of ``ranges (R, 2)`` cut into ``round(tokens / size)``
    (at least 1) parts of nearly equal length at sentence boundaries: a sentence goes to the part
    its first token falls in. Returns the parts' ``(P, 2)`` sentence ranges, in order, and the
    range each comes from ``(P,)``. Only the cuts are computed (a search in the sentence ends
    each), so memory does not grow with the number of sentences."""
    tokens = _token_lengths(sentence_ends, ranges)  # (R,)
    first = _token_starts(sentence_ends, ranges[:, 0])  # (R,)
    n = np.maximum(np.rint(tokens / size), 1).astype(np.int64)  # (R,) parts per range
    offsets = np.cumsum(n) - n  # (R,) each range's first part
    inner = np.ones(int(n.sum()), bool)  # parts that begin at a cut, not at their range's start
    inner[offsets] = False
    owner = np.repeat(np.arange(len(ranges)), n)  # (P,)
    j = np.arange(len(owner)) - offsets[owner]  # (P,) part number inside its range
    cut_at = first[owner] - (-j * tokens[owner] // n[owner])  # (P,) first token of part j: ceil(j T / n)
    begin = np.searchsorted(sentence_ends, cut_at, side="left") + 1  # the first sentence starting there
    begin = np.where(inner, np.clip(begin, ranges[owner, 0], ranges[owner, 1]), ranges[owner, 0])
    end = np.append(begin[1:], 0)
    end[offsets + n - 1] = ranges[:, 1]
    keep = end > begin  # a sentence longer than a part leaves the next one empty
    return np.stack([begin, end], axis=1)[keep], owner[keep]


def _token_starts(sentence_ends: np.ndarray, sentences: np.ndarray) -> np.ndarray:
    """Token offset where each of ``sentences`` begins."""
    return np.where(sentences > 0, sentence_ends[np.maximum(sentences - 1, 0)], 0)


def _token_lengths(sentence_ends: np.ndarray, ranges: np.ndarray) -> np.ndarray:
    """(R,) tokens in each ``[start, stop)`` sentence range of ``ranges (R, 2)``."""
    return np.asarray(sentence_ends[ranges[:, 1] - 1], dtype=np.int64) - _token_starts(sentence_ends, ranges[:, 0])


def _pick(lengths: np.ndarray, target: float, min_each: int, rng: np.random.Generator) -> np.ndarray:
    """(B,) bool: blocks held out, taken in the order ``rng`` draws until their tokens come
    closest to ``target`` (at least ``min_each`` blocks, and ``min_each`` left over)."""
    held = np.zeros(len(lengths), bool)
    taken = 0
    for n, b in enumerate(rng.permutation(len(lengths))):
        if n >= len(lengths) - min_each:
            break
        if n >= min_each and abs(taken + lengths[b] - target) >= abs(taken - target):
            break
        held[b], taken = True, taken + int(lengths[b])
    return held


def _pieces(sentence_ends: np.ndarray, blocks: np.ndarray, owner: np.ndarray, held: np.ndarray,
            document_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """The documents of a text split, in corpus order: ``(P, 2)`` sentence ranges and ``(P,)``
    whether each is held out. A held-out block is one; the training blocks of one stored
    document between two held-out ones (or its ends) join into one, cut into pieces of about
    ``document_tokens`` when that is given."""
    joins = np.zeros(len(blocks), bool)  # the block continues the training stretch before it
    joins[1:] = (owner[1:] == owner[:-1]) & ~held[1:] & ~held[:-1]
    first = np.flatnonzero(~joins)
    last = np.append(first[1:], len(blocks)) - 1
    ranges, is_held = np.stack([blocks[first, 0], blocks[last, 1]], axis=1), held[first]  # (R, 2), (R,)
    if document_tokens <= 0:
        return ranges, is_held
    train, _ = _cut(sentence_ends, ranges[~is_held], float(document_tokens))
    merged = np.concatenate([train, ranges[is_held]])
    flags = np.concatenate([np.zeros(len(train), bool), np.ones(int(is_held.sum()), bool)])
    order = np.argsort(merged[:, 0], kind="stable")
    return merged[order], flags[order]


def _doc_lengths(corpus: TokenCorpus) -> np.ndarray:
    """(D,) tokens in each document of ``corpus``."""
    ends = np.asarray(corpus.document_token_ends)
    return np.diff(ends, prepend=np.int64(0))


def _check_fraction(eval_fraction: float) -> None:
    if not 0.0 < eval_fraction < 1.0:
        raise ConfigError(f"data.eval_fraction: {eval_fraction!r} must be in (0, 1)", key="data.eval_fraction")
