"""word2vec training examples: subsampling, dynamic windows, negative sampling, chunked corpus.

Mikolov et al. 2013a ("Efficient estimation of word representations") and 2013b ("Distributed
representations of words and phrases"), with the choices of the reference C tool and gensim:

* **Vocabulary.** Words seen at least ``min_count`` times, most frequent first; the others (and
  the corpus' special tokens) are dropped from the text *before* windows are taken, so a window
  spans over them.
* **Subsampling** (2013b §2.3, in the form word2vec.c and gensim use): with ``t = sample * T``
  (T = retained words in the corpus) a word of count f is kept with probability
  ``min(1, (sqrt(f / t) + 1) * t / f)``; dropped words are removed before windowing too.
* **Dynamic window**: every kept centre word draws b ~ U{0, …, window-1} and uses the
  ``window - b`` words on each side, inside its sentence (nearer words are thus sampled more).
* **Skip-gram pairs**: (input = a context word, output = the centre word), as word2vec.c and
  gensim pair them. **CBOW**: the centre word's contexts (up to ``2 window``) are averaged.
* **Negative sampling**: K noise words per pair (per centre word for CBOW) from the unigram
  distribution raised to 3/4, P_n(w) ∝ count(w)^0.75. The C tool keeps a 10^8-entry table of
  word ids; here Walker's alias method (Walker 1977) draws exactly from P_n with two lookups in
  two V-long arrays that stay in cache. A noise word equal to the positive word is skipped
  (weight 0), as in both references.

The corpus (a prepared :class:`~muppets.data.shards.TokenCorpus`) is cut into chunks of whole
sentences of about ``chunk_tokens`` tokens. Chunk ``k`` of epoch ``e`` draws its randomness from
``np.random.default_rng([seed, e, k])`` alone, so any chunk can be rebuilt in any order by any
worker: resuming at a chunk boundary is exact.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch

from muppets.data.shards import TokenCorpus
from muppets.errors import ConfigError

__all__ = ["TrainingVocab", "keep_probabilities", "NoiseSampler", "reduced_windows",
           "context_positions", "skipgram_pairs", "cbow_contexts", "plan_chunks", "lanes", "ChunkBatches",
           "Word2VecExamples"]

log = logging.getLogger(__name__)

NUM_SPECIALS = 4  # WordVocab ids 0..3 (<pad> <unk> <s> </s>) are never trained
LAYOUTS = ("lanes", "consecutive")  # how a chunk's examples are cut into batches (see lanes())
UPDATES = ("pair", "window", "window-shared")  # skip-gram: batches of pairs (ChunkBatches) | a centre's window (ChunkWindows)


@dataclass
class TrainingVocab:
    """The words word2vec trains, most frequent first, and how corpus ids map onto them."""

    corpus_ids: np.ndarray  # (V,) corpus token id of each trained word
    counts: np.ndarray  # (V,) int64 corpus count of each trained word
    remap: np.ndarray  # (corpus vocab size + 1,) int64 trained index of each corpus id, V = dropped

    @classmethod
    def from_corpus(cls, corpus: TokenCorpus, min_count: int, skip_ids: int = NUM_SPECIALS,
                    max_size: int = 0) -> TrainingVocab:
        """Count ``corpus`` (in place, chunk by chunk); keep the ids >= ``skip_ids`` seen
        ``min_count`` times (the ``max_size`` most frequent when > 0), by count descending, ties by id."""
        counts = corpus.count_tokens(minlength=corpus.vocab_size)  # (corpus vocab size,) int64
        counts[:skip_ids] = 0
        order = np.argsort(-counts, kind="stable")
        kept = order[counts[order] >= max(min_count, 1)]
        kept = kept[:max_size] if max_size > 0 else kept
        if len(kept) == 0:
            raise ConfigError(f"{corpus.directory}: no word is seen min_count={min_count} times")
        remap = np.full(corpus.vocab_size + 1, len(kept), dtype=np.int64)
        remap[kept] = np.arange(len(kept))
        return cls(kept.astype(np.int64), counts[kept], remap)

    def __len__(self) -> int:
        return len(self.corpus_ids)


def keep_probabilities(counts: np.ndarray, sample: float) -> np.ndarray:
    """(V,) P(keep) = min(1, (sqrt(f / t) + 1) t / f), t = ``sample`` x total count (word2vec.c,
    gensim); all ones when ``sample`` is 0."""
    counts = np.asarray(counts, dtype=np.float64)
    if sample <= 0:
        return np.ones_like(counts)
    t = sample * counts.sum()
    return np.minimum(1.0, (np.sqrt(counts / t) + 1.0) * t / counts)


class NoiseSampler:
    """Draws word ids from P_n(w) ∝ count(w)^exponent with Walker's alias method.

    Bucket i (chosen uniformly among V) returns i with probability ``threshold[i]`` and
    ``alias[i]`` otherwise; the tables are built so that every word's total mass is exactly P_n.
    """

    def __init__(self, counts: np.ndarray, exponent: float = 0.75) -> None:
        weights = np.asarray(counts, dtype=np.float64) ** exponent
        if len(weights) == 0 or weights.sum() <= 0:
            raise ConfigError("the noise distribution needs at least one word with a positive count")
        self.probabilities = weights / weights.sum()  # (V,) P_n
        self.threshold, self.alias = _alias_tables(self.probabilities)

    def sample(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        """int64 array of ``shape`` noise word ids."""
        buckets = rng.integers(0, len(self.alias), size=shape)
        coins = rng.random(size=shape, dtype=np.float32)
        return np.where(coins < self.threshold[buckets], buckets, self.alias[buckets])

    def mass(self) -> np.ndarray:
        """(V,) the probability each word receives from the tables (equals P_n up to rounding)."""
        V = len(self.alias)
        mass = self.threshold.astype(np.float64) / V
        np.add.at(mass, self.alias, (1.0 - self.threshold.astype(np.float64)) / V)
        return mass


def _alias_tables(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vose's O(V) construction of the alias tables of distribution ``p``."""
    V = len(p)
    scaled = p * V
    threshold = np.ones(V, dtype=np.float64)
    alias = np.arange(V, dtype=np.int64)
    small = [i for i in range(V) if scaled[i] < 1.0]
    large = [i for i in range(V) if scaled[i] >= 1.0]
    while small and large:
        s, g = small.pop(), large.pop()
        threshold[s], alias[s] = scaled[s], g
        scaled[g] -= 1.0 - scaled[s]
        (small if scaled[g] < 1.0 else large).append(g)
    return threshold.astype(np.float32), alias  # leftovers keep threshold 1 (rounding only)


def reduced_windows(n: int, window: int, rng: np.random.Generator) -> np.ndarray:
    """(n,) effective half-widths ``window - b`` with b ~ U{0, …, window-1} (word2vec.c)."""
    return window - rng.integers(0, window, size=n)


def context_positions(sentence: np.ndarray, windows: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Context positions of every centre: ``(positions (n, 2W), valid (n, 2W))``.

    Column j holds offset ``-W..-1, 1..W``; a context is valid when its offset is within the
    centre's reduced window and it lies in the same sentence (``sentence`` (n,) ids, sorted).
    """
    offsets = np.concatenate([np.arange(-window, 0), np.arange(1, window + 1)])  # (2W,)
    n = len(sentence)
    positions = np.arange(n)[:, None] + offsets[None, :]  # (n, 2W)
    clipped = np.clip(positions, 0, max(n - 1, 0))
    valid = (np.abs(offsets)[None, :] <= windows[:, None]) & (positions >= 0) & (positions < n)
    valid &= sentence[clipped] == sentence[:, None]
    return clipped, valid


def skipgram_pairs(ids: np.ndarray, sentence: np.ndarray, windows: np.ndarray,
                   window: int) -> tuple[np.ndarray, np.ndarray]:
    """``(inputs (P,), outputs (P,))``: every (context, centre) pair, in centre order."""
    positions, valid = context_positions(sentence, windows, window)
    centres = np.broadcast_to(ids[:, None], positions.shape)[valid]
    return ids[positions[valid]], centres


def cbow_contexts(ids: np.ndarray, sentence: np.ndarray, windows: np.ndarray,
                  window: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(centres (C,), contexts (C, 2W), mask (C, 2W) bool)`` for the centres with a context."""
    positions, valid = context_positions(sentence, windows, window)
    has = valid.any(axis=1)
    return ids[has], np.where(valid[has], ids[positions[has]], 0), valid[has]


def plan_chunks(sentence_ends: np.ndarray, chunk_tokens: int) -> np.ndarray:
    """(C + 1,) sentence boundaries: chunk k = sentences ``[b[k], b[k+1])``, each of about
    ``chunk_tokens`` tokens (whole sentences; at least one each)."""
    ends = np.asarray(sentence_ends, dtype=np.int64)
    if len(ends) == 0:
        raise ConfigError("the corpus has no sentence")
    targets = np.arange(chunk_tokens, int(ends[-1]), chunk_tokens)
    cuts = np.searchsorted(ends, targets, side="left") + 1  # first sentence ending at/after target
    return np.unique(np.concatenate([[0], cuts, [len(ends)]]))


@dataclass
class ChunkBatches:
    """The examples of one chunk as ``num_batches`` equal batches in lanes (:func:`lanes`; or
    ``consecutive``: batch n holds examples nB .. nB+B-1, for comparison), padded with
    zero-weight examples at the end of the text to a multiple of ``updates_multiple``.

    Skip-gram: ``inputs`` (N, B) context ids. CBOW: ``inputs`` (N, B, 2W) context ids and
    ``input_mask`` (N, B, 2W). Both: ``targets`` (N, B, 1 + K) = the positive word then K noise
    words, ``weights`` (N, B, 1 + K) float32 (0 for padding and for noise = positive).
    """

    raw_words: int  # corpus tokens of the chunk
    effective_words: int  # words left after min_count and subsampling (gensim's definition)
    examples: int  # real (unpadded) pairs or CBOW centres
    inputs: torch.Tensor
    targets: torch.Tensor
    weights: torch.Tensor
    input_mask: torch.Tensor | None = None

    @property
    def num_batches(self) -> int:
        return int(self.targets.shape[0])


@dataclass
class ChunkWindows:
    """The centres of one chunk for ``update=window`` / ``window-shared`` (skip-gram): each kept
    word in order, its sentence and reduced window (int32 ``(n,)``), and the seed of the noise
    draws, which the native loop makes itself (:func:`~muppets.models.word2vec_native.sgns_windows`)."""

    raw_words: int
    effective_words: int
    ids: torch.Tensor
    sentence: torch.Tensor
    windows: torch.Tensor
    seed: int


class Word2VecExamples:
    """Builds chunk ``k`` of epoch ``e`` of a corpus as :class:`ChunkBatches`, deterministically."""

    def __init__(self, corpus: TokenCorpus, vocab: TrainingVocab, *, sg: bool, window: int,
                 negative: int, sample: float, ns_exponent: float, batch_size: int,
                 chunk_tokens: int, seed: int, updates_multiple: int = 1, layout: str = "lanes",
                 update: str = "pair") -> None:
        if layout not in LAYOUTS:
            raise ConfigError(f"batch layout {layout!r} is not one of {', '.join(LAYOUTS)}")
        if update not in UPDATES or (update != "pair" and not sg):
            raise ConfigError(f"update {update!r} is not one of {', '.join(UPDATES)} (windows: skip-gram only)")
        self.update = update
        if window < 1 or negative < 1 or batch_size < 1 or chunk_tokens < 1:
            raise ConfigError(f"window={window}, negative={negative}, batch_size={batch_size} and "
                              f"chunk_tokens={chunk_tokens} must all be >= 1")
        self.corpus, self.vocab, self.sg, self.window = corpus, vocab, sg, window
        self.negative, self.batch_size, self.seed, self.layout = negative, batch_size, seed, layout
        self.updates_multiple = max(1, updates_multiple)  # batches per chunk: a multiple of this
        self.keep = np.append(keep_probabilities(vocab.counts, sample), 0.0)  # (V + 1,) V = dropped
        self.noise = NoiseSampler(vocab.counts, ns_exponent)
        self.bounds = plan_chunks(corpus.sentence_ends, chunk_tokens)  # (C + 1,)
        self.token_bounds = np.zeros(len(self.bounds), dtype=np.int64)  # (C + 1,) token offsets
        self.token_bounds[1:] = corpus.sentence_ends[self.bounds[1:] - 1]

    @property
    def num_chunks(self) -> int:
        return len(self.bounds) - 1

    @property
    def raw_words(self) -> int:
        """Corpus tokens per epoch."""
        return int(self.token_bounds[-1])

    def chunk(self, epoch: int, k: int) -> ChunkBatches | ChunkWindows:
        """The batches (``update=window``: the centres) of chunk ``k`` in epoch ``epoch``."""
        rng = np.random.default_rng([self.seed, epoch, k])
        ids, sentence = self._kept_words(k, rng)
        windows = reduced_windows(len(ids), self.window, rng)
        if self.update != "pair":
            raw = int(self.token_bounds[k + 1] - self.token_bounds[k])
            return ChunkWindows(raw, len(ids), *(torch.from_numpy(np.ascontiguousarray(a, dtype=np.int32))
                                                 for a in (ids, sentence, windows)), int(rng.integers(0, 2**63)))
        if self.sg:
            inputs, outputs = skipgram_pairs(ids, sentence, windows, self.window)
            return self._batches(k, len(ids), outputs, rng, inputs=inputs)
        centres, contexts, mask = cbow_contexts(ids, sentence, windows, self.window)
        return self._batches(k, len(ids), centres, rng, inputs=contexts, mask=mask)

    def _kept_words(self, k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, sentence)`` of the words of chunk ``k`` kept by min_count and subsampling."""
        first, last = int(self.bounds[k]), int(self.bounds[k + 1])
        start, stop = int(self.token_bounds[k]), int(self.token_bounds[k + 1])
        ends = np.asarray(self.corpus.sentence_ends[first:last], dtype=np.int64)
        lengths = np.diff(ends, prepend=start)  # (S,)
        words = self.vocab.remap[np.asarray(self.corpus.tokens[start:stop], dtype=np.int64)]  # (T,)
        keep = rng.random(len(words), dtype=np.float32) < self.keep[words]
        sentence = np.repeat(np.arange(len(lengths), dtype=np.int32), lengths)  # (T,)
        return words[keep], sentence[keep]

    def _batches(self, k: int, effective: int, positives: np.ndarray, rng: np.random.Generator,
                 inputs: np.ndarray, mask: np.ndarray | None = None) -> ChunkBatches:
        """Pad to whole batches, draw the noise words, lay out as (N, B, ...) lanes (see
        :func:`lanes`)."""
        n, B, K = len(positives), self.batch_size, self.negative
        group = B * self.updates_multiple
        total = max(1, -(-n // group)) * group
        shape = (total // B, B)  # (N, B)

        def in_lanes(examples: np.ndarray, dtype) -> np.ndarray:  # padded with zeros, (N, B, ...)
            padded = np.zeros((total,) + examples.shape[1:], dtype=dtype)
            padded[:n] = examples
            if self.layout == "consecutive":
                return padded.reshape(shape + examples.shape[1:])
            return lanes(padded, B)

        # noise words are i.i.d.: drawn straight into the batch layout, only the rest is reordered
        targets = np.empty(shape + (1 + K,), dtype=np.int64)
        targets[..., 0] = in_lanes(positives, np.int64)
        targets[..., 1:] = self.noise.sample(rng, shape + (K,))
        weights = (targets != targets[..., :1]).astype(np.float32)
        weights[..., 0] = 1.0
        weights *= in_lanes(np.ones(n, dtype=np.float32), np.float32)[..., None]  # padding: 0
        raw = int(self.token_bounds[k + 1] - self.token_bounds[k])
        out_mask = None if mask is None else torch.from_numpy(in_lanes(mask, np.float32))
        return ChunkBatches(raw, effective, n, torch.from_numpy(in_lanes(inputs, np.int64)),
                            torch.from_numpy(targets), torch.from_numpy(weights), out_mask)


def lanes(examples: np.ndarray, batch_size: int) -> np.ndarray:
    """``(N * B, ...)`` examples in corpus order -> ``(N, B, ...)`` batches whose row ``b`` is
    example ``n`` of lane ``b``, lane ``b`` being the ``b``-th contiguous run of ``N`` examples.

    A batched update reads every vector before it writes any, so two examples of one batch that
    share a word both see it stale and add their updates. Consecutive examples share many words
    (one centre has up to ``2 window`` pairs; neighbouring centres share contexts), so batches
    of consecutive examples changed the result: on the shared English corpus (skip-gram, 5
    epochs) WordSim-353 rose 2-3 points above gensim, word2vec.c and our own one-pair-at-a-time
    updates, at any batch size from 16 to 1024. In lanes, the examples of a batch are ``N``
    apart, so they share only words frequent anywhere, and each lane runs through its stretch
    of the text in order, one example per update, as each of ``B`` Hogwild threads would;
    over 3 seeds the scores then came within 2 points of gensim's (BENCHMARKS.md, issue 5)."""
    N = len(examples) // batch_size
    return examples.reshape((batch_size, N) + examples.shape[1:]).swapaxes(0, 1).copy()
