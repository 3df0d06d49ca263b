"""n-gram language-model batches for the NNLM (Bengio et al. 2003), as a deterministic step source.

Every document of a prepared word corpus becomes a stream: ``n-1`` start symbols ``<s>`` (so the
first words have a full context), then its sentences, each followed by ``</s>`` — the paper
treats the text as one word stream in which sentence ends are words too. Every non-padding
position t is one example: context ``stream[t-n+1 .. t-1]`` (oldest first), target ``stream[t]``.
A fixed share of the documents is held out (:func:`muppets.objectives.mlm_nsp.split_documents`)
for perplexity. Example ``g`` of the run is position ``order_e[g mod N]`` of epoch
``e = g // N``, ``order_e`` a permutation drawn from ``(seed, e)``: a batch is a pure function
of ``(seed, step)``, so resume is exact and DDP ranks take their own slices.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch

from muppets.data.shards import TokenCorpus
from muppets.errors import ConfigError
from muppets.objectives.mlm_nsp import split_documents
from muppets.objectives.step_data import EpochData, spread

__all__ = ["NNLMDataConfig", "ngram_stream", "NNLMData"]

log = logging.getLogger(__name__)


@dataclass
class NNLMDataConfig:
    eval_fraction: float = 0.02  # share of documents held out for perplexity (at least 1)
    eval_examples: int = 20_000  # held-out positions scored per evaluation (spread evenly; 0 = all)
    split_seed: int = 1234  # fixes which documents are held out, independent of the run seed


def ngram_stream(corpus: TokenCorpus, docs: np.ndarray, context: int, bos_id: int,
                 eos_id: int) -> tuple[np.ndarray, np.ndarray]:
    """``(stream (N,) int32, targets (M,) int64)``: the documents ``docs`` as ``<s>``-padded
    streams with ``</s>`` after every sentence, and the positions that are prediction targets."""
    streams, targets, offset = [], [], 0
    for d in docs.tolist():
        sentences = corpus.document_sentences(d)
        start = int(corpus.sentence_ends[sentences.start - 1]) if sentences.start > 0 else 0
        ends = np.asarray(corpus.sentence_ends[sentences.start:sentences.stop], dtype=np.int64) - start
        words = np.insert(np.asarray(corpus.document_tokens(d), dtype=np.int32), ends, eos_id)  # (L + S,)
        streams += [np.full(context, bos_id, dtype=np.int32), words]
        targets.append(offset + context + np.arange(len(words), dtype=np.int64))
        offset += context + len(words)
    if not streams:
        return np.zeros(0, np.int32), np.zeros(0, np.int64)
    return np.concatenate(streams), np.concatenate(targets)


def _examples(stream: np.ndarray, positions: np.ndarray, context: int) -> dict[str, torch.Tensor]:
    """``input_ids`` (B, n-1) and ``labels`` (B,) of target positions ``positions`` (B,)."""
    window = positions[:, None] - context + np.arange(context)[None, :]  # (B, n-1)
    return {"input_ids": torch.from_numpy(stream[window].astype(np.int64)),
            "labels": torch.from_numpy(stream[positions].astype(np.int64))}


class NNLMData(EpochData):
    """The trainer's ``StepData`` for the NNLM (batches of ``input_ids`` (B, n-1), ``labels`` (B,))."""

    order_salt = 23

    def __init__(self, corpus: TokenCorpus, context: int, bos_id: int, eos_id: int, cfg: NNLMDataConfig,
                 batch_size: int, accumulation: int, seed: int) -> None:
        for name, i in (("bos", bos_id), ("eos", eos_id)):
            if not 0 <= i < corpus.vocab_size:
                raise ConfigError(f"{name} id {i} is outside the corpus vocabulary of {corpus.vocab_size}")
        super().__init__(batch_size, accumulation, seed)
        self.context, self.cfg = context, cfg
        train_docs, eval_docs = split_documents(corpus.num_documents, cfg.eval_fraction, cfg.split_seed)
        self.stream, self.targets = ngram_stream(corpus, train_docs, context, bos_id, eos_id)
        self.eval_stream, self.eval_targets = ngram_stream(corpus, eval_docs, context, bos_id, eos_id)
        if len(self.targets) == 0 or len(self.eval_targets) == 0:
            raise ConfigError(f"{corpus.directory}: too little text for NNLM training and held-out data")
        log.info("NNLM data: %d train / %d held-out documents, %d + %d target words, context %d",
                 len(train_docs), len(eval_docs), len(self.targets), len(self.eval_targets), context)

    @property
    def epoch_size(self) -> int:
        return len(self.targets)

    # --- StepData protocol -------------------------------------------------------------
    def normalizers(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        return {"lm": float(batch["labels"].numel())}

    def num_tokens(self, batch: dict[str, torch.Tensor]) -> int:
        return int(batch["labels"].numel())

    # --- examples ------------------------------------------------------------------------
    def batch(self, examples: range) -> dict[str, torch.Tensor]:
        """Global examples ``examples`` (``g = step * batch_size + i``)."""
        return _examples(self.stream, self.targets[self.rows(examples)], self.context)

    def eval_batches(self, batch_size: int) -> list[dict[str, torch.Tensor]]:
        """Fixed held-out batches over ``eval_examples`` target positions spread evenly."""
        n = len(self.eval_targets)
        count = n if self.cfg.eval_examples <= 0 else min(n, self.cfg.eval_examples)
        picks = self.eval_targets[spread(n, count)]
        return [_examples(self.eval_stream, picks[i:i + batch_size], self.context)
                for i in range(0, len(picks), batch_size)]
