"""Bidirectional LM batches (ELMo) from a prepared word-id corpus, as a deterministic step source.

**Stream.** Every sentence of the corpus is framed ``<s> w_1 … w_n </s>`` (as ELMo reads
sentences, in training and at feature time) and a document is its sentences in order
(read in place from the memory-mapped corpus: :class:`~muppets.data.shards.FramedTokens`).

**Windows.** Training examples are windows of ``window`` consecutive tokens of one document,
consecutive windows overlapping by one token; a document's last window is shorter (padded).
With that overlap every token of a document is a forward target exactly once per epoch (the
first token of a window is context only) and a backward target exactly once (the last token of
a window is context only), and no window mixes two documents. bilm-tf cut 20-token windows and
carried the LSTM state from one batch to the next; ours is stateless, so that a batch is a pure
function of ``(seed, step)`` (exact resume, DDP slices, as :mod:`muppets.objectives.clm`) — and
the windows are longer (default 32) so that most sentences are seen whole with context.

**Targets.** ``next_ids[t] = x_{t+1}`` (forward LM), ``prev_ids[t] = x_{t−1}`` (backward LM),
-100 where there is none. Two targets are certain and carry no information, so they are not
scored: ``<s>`` after ``</s>`` (forward) and ``</s>`` before ``<s>`` (backward). Perplexity thus
counts every word plus one sentence boundary per sentence and direction, as usual for LMs.

**Words and characters.** The input is characters, the output a softmax over words. The
corpus holds ids of a large :class:`~muppets.tokenizers.words.WordVocab` (e.g. every word seen
once, up to a cap), so that the character input keeps the spelling of almost every word; the
vocabulary is sorted by frequency, so the softmax over its first ``softmax_size`` ids is the
most frequent words (plus the specials), and rarer targets become ``<unk>`` — but their
characters still reach the char CNN. Only words beyond the vocabulary cap lose their spelling.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from muppets.data.shards import FramedTokens, TokenCorpus, tokenizer_fingerprint
from muppets.errors import ConfigError, DataError
from muppets.data.heldout import split_corpus
from muppets.objectives.step_data import PretrainingData, in_batches, spread
from muppets.tokenizers.characters import CharacterMapper
from muppets.tokenizers.words import WordVocab

log = logging.getLogger(__name__)

IGNORE = -100  # target of a position that predicts nothing


@dataclass
class BiLMDataConfig:
    window: int = 32  # tokens per training window (consecutive <s> … </s> sentences of one document)
    eval_fraction: float = 0.02  # share held out for evaluation: of the documents (at least 1), or of the text when they are few or long (muppets.data.heldout)
    eval_windows: int = 256  # held-out windows scored at every evaluation (spread over the held-out documents)
    split_seed: int = 1234  # fixes which documents (or blocks of text) are held out, independent of the run seed

    def __post_init__(self) -> None:
        if self.window < 3:
            raise ConfigError(f"data.window: {self.window} is too short (at least 3 tokens)")


def bracketed_stream(corpus: TokenCorpus, bos_id: int, eos_id: int) -> tuple[FramedTokens, np.ndarray]:
    """The corpus with each sentence framed ``<s> … </s>`` (``N + 2S`` ids, read in place from the
    memory-mapped corpus), and every document's ``[start, stop)`` in it, ``(D, 2)`` int64."""
    stream = FramedTokens(corpus, "sentence", bos=bos_id, eos=eos_id)
    return stream, stream.document_spans(np.arange(corpus.num_documents))


def windows_per_document(bounds: np.ndarray, window: int) -> np.ndarray:
    """``(D,)`` windows in each ``[start, stop)`` of ``bounds (D, 2)``: ceil((n - 1) / (window - 1))."""
    return np.maximum(bounds[:, 1] - bounds[:, 0] - 2, 0) // (window - 1) + 1


def windows(bounds: np.ndarray, window: int, picks: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Windows of ``window`` tokens overlapping by one inside each ``[start, stop)`` of ``bounds (D, 2)``.

    Returns ``starts`` and ``lengths`` of windows ``picks`` (numbered document by document; all
    ``W`` when None), each ``(len(picks),)``. The last window of a document may be shorter, but
    holds at least 2 tokens, so it has a target. Only the picked windows are computed: a batch
    never builds the ``W``-long list.
    """
    per_doc = windows_per_document(bounds, window)
    ends = np.cumsum(per_doc)  # (D,) one past each document's last window
    w = np.arange(int(per_doc.sum())) if picks is None else np.asarray(picks, dtype=np.int64)
    doc = np.searchsorted(ends, w, side="right")
    starts = bounds[doc, 0] + (w - ends[doc] + per_doc[doc]) * (window - 1)  # k-th window of its document
    return starts, np.minimum(window, bounds[doc, 1] - starts)


class BiLMData(PretrainingData):
    """The trainer's ``StepData`` for biLM pretraining: batches of ``char_ids (B, T, C)``,
    ``mask (B, T)``, ``next_ids (B, T)`` and ``prev_ids (B, T)`` (the model's forward arguments).

    Args:
        corpus: prepared with ``vocab`` as the tokenizer (checked by fingerprint).
        vocab: the input vocabulary; its words' characters are the model input.
        softmax_size: the output vocabulary is ids ``0 … softmax_size − 1``; rarer targets -> ``<unk>``.
        max_chars: characters per token (the model's ``max_chars``).
    """

    order_salt = 23

    def __init__(self, corpus: TokenCorpus, vocab: WordVocab, cfg: BiLMDataConfig, batch_size: int,
                 accumulation: int, seed: int, softmax_size: int, max_chars: int = 50) -> None:
        _check_corpus(corpus, vocab, softmax_size)
        super().__init__(batch_size, accumulation, seed)
        self.cfg, self.vocab, self.softmax_size = cfg, vocab, softmax_size
        words = vocab.settings
        mapper = CharacterMapper(max_chars, words.bos_token, words.eos_token, words.pad_token)
        self.char_table = mapper.encode_words(vocab.words)  # (V_in, C) int16
        split = split_corpus(corpus, cfg.eval_fraction, cfg.split_seed)
        self.train_docs, self.eval_docs = split.train_docs, split.eval_docs
        self.stream, bounds = bracketed_stream(split.corpus, vocab.bos_id, vocab.eos_id)
        self.train_bounds = bounds[self.train_docs]  # (D_train, 2)
        self.eval_windows = windows(bounds[self.eval_docs], cfg.window)
        self.epoch_size = int(windows_per_document(self.train_bounds, cfg.window).sum())
        log.info("biLM data: %d train / %d held-out documents, %d + %d windows of <= %d tokens; softmax over "
                 "%d of %d words", len(self.train_docs), len(self.eval_docs), self.epoch_size,
                 len(self.eval_windows[0]), cfg.window, softmax_size, len(vocab))

    # --- StepData protocol -------------------------------------------------------------
    def normalizers(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        return {"fwd": float((batch["next_ids"] != IGNORE).sum()), "bwd": float((batch["prev_ids"] != IGNORE).sum())}

    def num_tokens(self, batch: dict[str, torch.Tensor]) -> int:
        return int(batch["mask"].sum())

    # --- windows -> batches --------------------------------------------------------------
    @property
    def train_windows(self) -> tuple[np.ndarray, np.ndarray]:
        """``starts (W,)`` and ``lengths (W,)`` of every training window (to inspect; a batch
        computes just its own)."""
        return windows(self.train_bounds, self.cfg.window)

    def batch(self, examples: range) -> dict[str, torch.Tensor]:
        """Global examples ``g = step * batch_size + i`` -> one padded batch."""
        starts, lengths = windows(self.train_bounds, self.cfg.window, self.rows(examples))
        return self.collate([self.stream[s:s + n] for s, n in zip(starts, lengths)])

    def eval_batches(self, batch_size: int) -> list[dict[str, torch.Tensor]]:
        """Fixed held-out batches: up to ``eval_windows`` windows spread evenly over the held-out documents."""
        starts, lengths = self.eval_windows
        rows = [self.stream[starts[i]:starts[i] + lengths[i]] for i in spread(len(starts), self.cfg.eval_windows)]
        return in_batches(rows, batch_size, self.collate)

    def collate(self, rows: Sequence[np.ndarray]) -> dict[str, torch.Tensor]:
        """Word-id windows -> right-padded ``char_ids``, ``mask``, ``next_ids``, ``prev_ids``."""
        B, T = len(rows), max(len(r) for r in rows)
        ids = np.zeros((B, T), np.int64)  # <pad> = 0, whose character row is all 0
        mask = np.zeros((B, T), bool)
        for i, r in enumerate(rows):
            ids[i, :len(r)], mask[i, :len(r)] = r, True
        next_ids, prev_ids = lm_targets(ids, mask, self.softmax_size, self.vocab)
        return {"char_ids": torch.from_numpy(self.char_table[ids].astype(np.int64)),  # (B, T, C)
                "mask": torch.from_numpy(mask), "next_ids": torch.from_numpy(next_ids),
                "prev_ids": torch.from_numpy(prev_ids)}

    def token_counts(self) -> np.ndarray:
        """``(softmax_size,)`` count of each output word (rarer words as ``<unk>``) over the tokens of
        the training documents, ``<s>`` and ``</s>`` included: a unigram baseline's counts."""
        words = self.stream.counts(self.train_docs, minlength=len(self.vocab))  # (V_in,) read in place
        counts = words[:self.softmax_size].copy()
        counts[self.vocab.unk_id] += words[self.softmax_size:].sum()
        return counts


def lm_targets(ids: np.ndarray, mask: np.ndarray, softmax_size: int, vocab: WordVocab) -> tuple[np.ndarray, np.ndarray]:
    """``(B, T)`` word ids -> forward targets ``x_{t+1}`` and backward targets ``x_{t−1}`` in the
    softmax vocabulary, -100 where there is none or where it is certain (see the module doc)."""
    out = np.where(ids < softmax_size, ids, vocab.unk_id)  # (B, T)
    both = mask[:, 1:] & mask[:, :-1]  # (B, T-1) position pairs (t, t+1) that are both real
    next_ids = np.full_like(ids, IGNORE)
    prev_ids = np.full_like(ids, IGNORE)
    next_ids[:, :-1] = np.where(both & (out[:, 1:] != vocab.bos_id), out[:, 1:], IGNORE)
    prev_ids[:, 1:] = np.where(both & (out[:, :-1] != vocab.eos_id), out[:, :-1], IGNORE)
    return next_ids, prev_ids


def _check_corpus(corpus: TokenCorpus, vocab: WordVocab, softmax_size: int) -> None:
    meta = corpus.directory / "meta.json"
    if corpus.vocab_size != len(vocab):
        raise DataError(f"the corpus has a vocabulary of {corpus.vocab_size} ids, the word vocabulary "
                        f"{len(vocab)}", path=meta, value=corpus.vocab_size)
    if corpus.meta.get("tokenizer_sha256") != tokenizer_fingerprint(vocab.to_json()):
        raise DataError("the corpus was prepared with another word vocabulary", path=meta,
                        value=corpus.meta.get("tokenizer_sha256"))
    if not 5 <= softmax_size <= len(vocab):
        raise ConfigError(f"softmax size {softmax_size} must be in [5, {len(vocab)}] (the vocabulary size)")
