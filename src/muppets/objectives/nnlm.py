"""n-gram language-model batches for the NNLM (Bengio et al. 2003), as a deterministic step source.

Every document of a prepared word corpus becomes a stream: ``n-1`` start symbols ``<s>`` (so the
first words have a full context), then its sentences, each followed by ``</s>`` — the paper
treats the text as one word stream in which sentence ends are words too. Every non-padding
position t is one example: context ``stream[t-n+1 .. t-1]`` (oldest first), target ``stream[t]``.
A fixed share of the documents (or of the text) is held out (:func:`muppets.data.heldout.split_corpus`)
for perplexity. Example ``g`` of the run is position ``order_e[g mod N]`` of epoch
``e = g // N``, ``order_e`` a permutation drawn from ``(seed, e)``: a batch is a pure function
of ``(seed, step)``, so resume is exact and DDP ranks take their own slices. The stream is
never built: the words are read in place from the memory-mapped corpus
(:class:`~muppets.data.shards.DocumentStream`) and a context reaching before its document's
start reads ``<s>``, so memory does not grow with the corpus.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch

from muppets.data.shards import DocumentStream, FramedTokens, TokenCorpus
from muppets.errors import ConfigError
from muppets.data.heldout import split_corpus
from muppets.objectives.step_data import PretrainingData, spread

__all__ = ["NNLMDataConfig", "word_stream", "ngram_stream", "NNLMData"]

log = logging.getLogger(__name__)


@dataclass
class NNLMDataConfig:
    eval_fraction: float = 0.02  # share held out for perplexity: of the documents (at least 1), or of the text when they are few or long (muppets.data.heldout)
    eval_examples: int = 20_000  # held-out positions scored per evaluation (spread evenly; 0 = all)
    split_seed: int = 1234  # fixes which documents (or blocks of text) are held out, independent of the run seed


def word_stream(corpus: TokenCorpus, docs: np.ndarray, eos_id: int) -> DocumentStream:
    """The documents ``docs`` end to end with ``</s>`` after every sentence, read in place: its
    position ``j`` is target word ``j``."""
    return DocumentStream(FramedTokens(corpus, "sentence", eos=eos_id), docs)


def ngram_stream(corpus: TokenCorpus, docs: np.ndarray, context: int, bos_id: int,
                 eos_id: int) -> tuple[np.ndarray, np.ndarray]:
    """``(stream (N,) int32, targets (M,) int64)``: :func:`word_stream` as one array with the
    ``context`` ``<s>`` before each document, and the positions of its words (to inspect a small
    corpus; training never builds it)."""
    words = word_stream(corpus, docs, eos_id)
    doc_of = np.searchsorted(words.ends, np.arange(len(words)), side="right")  # (M,)
    targets = np.arange(len(words)) + context * (doc_of + 1)
    stream = np.full(len(words) + context * len(words.ends), bos_id, dtype=np.int32)
    stream[targets] = words[:]
    return stream, targets


def _examples(stream: DocumentStream, targets: np.ndarray, context: int, bos_id: int) -> dict[str, torch.Tensor]:
    """``input_ids`` (B, n-1) and ``labels`` (B,) of words ``targets`` (B,) of ``stream``: the
    context is the n-1 words before, in the same document (``<s>`` before its start)."""
    at, doc_start = stream.locate(targets)  # (B,) each, positions in stream.framed
    window = at[:, None] - context + np.arange(context)[None, :]  # (B, n-1)
    before = window < doc_start[:, None]
    ids = stream.framed.ids(np.where(before, doc_start[:, None], window))  # (B, n-1)
    ids[before] = bos_id
    return {"input_ids": torch.from_numpy(ids), "labels": torch.from_numpy(stream.framed.ids(at))}


class NNLMData(PretrainingData):
    """The trainer's ``StepData`` for the NNLM (batches of ``input_ids`` (B, n-1), ``labels`` (B,))."""

    order_salt = 23

    def __init__(self, corpus: TokenCorpus, context: int, bos_id: int, eos_id: int, cfg: NNLMDataConfig,
                 batch_size: int, accumulation: int, seed: int) -> None:
        for name, i in (("bos", bos_id), ("eos", eos_id)):
            if not 0 <= i < corpus.vocab_size:
                raise ConfigError(f"{name} id {i} is outside the corpus vocabulary of {corpus.vocab_size}")
        super().__init__(batch_size, accumulation, seed)
        self.context, self.cfg, self.bos_id = context, cfg, bos_id
        split = split_corpus(corpus, cfg.eval_fraction, cfg.split_seed)
        corpus, train_docs, eval_docs = split.corpus, split.train_docs, split.eval_docs
        self.stream = word_stream(corpus, train_docs, eos_id)  # read in place
        self.eval_stream = word_stream(corpus, eval_docs, eos_id)
        if len(self.stream) == 0 or len(self.eval_stream) == 0:
            raise ConfigError(f"{corpus.directory}: too little text for NNLM training and held-out data")
        log.info("NNLM data: %d train / %d held-out documents, %d + %d target words, context %d",
                 len(train_docs), len(eval_docs), len(self.stream), len(self.eval_stream), context)

    @property
    def epoch_size(self) -> int:
        return len(self.stream)

    # --- StepData protocol -------------------------------------------------------------
    def normalizers(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        return {"lm": float(batch["labels"].numel())}

    def num_tokens(self, batch: dict[str, torch.Tensor]) -> int:
        return int(batch["labels"].numel())

    # --- examples ------------------------------------------------------------------------
    def batch(self, examples: range) -> dict[str, torch.Tensor]:
        """Global examples ``examples`` (``g = step * batch_size + i``)."""
        return _examples(self.stream, self.rows(examples), self.context, self.bos_id)

    def eval_batches(self, batch_size: int) -> list[dict[str, torch.Tensor]]:
        """Fixed held-out batches over ``eval_examples`` target positions spread evenly."""
        n = len(self.eval_stream)
        count = n if self.cfg.eval_examples <= 0 else min(n, self.cfg.eval_examples)
        picks = spread(n, count)
        return [_examples(self.eval_stream, picks[i:i + batch_size], self.context, self.bos_id)
                for i in range(0, len(picks), batch_size)]
