"""Causal language modelling batches (GPT) from a prepared corpus, as a deterministic step source.

The training documents are laid end to end, each followed by the end-of-text token, into one
token stream (GPT-2 packs its WebText this way); training sequences are blocks of ``block_size``
tokens cut from it, consecutive blocks overlapping by one token so that every token of the
stream is a next-token target exactly once per epoch. The block order is a permutation drawn
from ``(seed, epoch)``, so a batch is a pure function of ``(seed, step)`` (exact resume, DDP
slices), as in :mod:`muppets.objectives.mlm_nsp`, with the same held-out split (:mod:`muppets.data.heldout`).
The stream is never built: a :class:`~muppets.data.shards.DocumentStream` reads each block from
the memory-mapped corpus when it is asked for, so memory does not grow with the corpus.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from muppets.data.shards import DocumentStream, FramedTokens, TokenCorpus, TokenStream
from muppets.errors import ConfigError
from muppets.data.heldout import split_corpus
from muppets.objectives.step_data import PretrainingData, in_batches, spread

log = logging.getLogger(__name__)


@dataclass
class CLMDataConfig:
    block_size: int = 128  # tokens per training sequence (block_size - 1 next-token targets)
    eval_fraction: float = 0.02  # share held out for evaluation: of the documents (at least 1), or of the text when they are few or long (muppets.data.heldout)
    eval_blocks: int = 256  # held-out blocks scored at every evaluation (spread over the held-out stream)
    split_seed: int = 1234  # fixes which documents (or blocks of text) are held out, independent of the run seed

    def __post_init__(self) -> None:
        if self.block_size < 2:
            raise ConfigError(f"block_size: {self.block_size} is too short (at least 2 tokens)")


def lm_stream(corpus: TokenCorpus, docs: np.ndarray, eos_id: int) -> DocumentStream:
    """Documents ``docs`` end to end, each followed by ``eos_id``, read in place."""
    return DocumentStream(FramedTokens(corpus, "document", eos=eos_id), docs)


def document_stream(corpus: TokenCorpus, docs: np.ndarray, eos_id: int) -> np.ndarray:
    """:func:`lm_stream` as one ``(N,)`` int64 array (to inspect a small corpus; training never
    builds it)."""
    return lm_stream(corpus, docs, eos_id)[:]


class CausalLMData(PretrainingData):
    """The trainer's ``StepData`` for left-to-right LM pretraining (batches of ``input_ids`` and
    ``labels``, the model shifting labels by one)."""

    order_salt = 19

    def __init__(self, corpus: TokenCorpus, eos_id: int, cfg: CLMDataConfig, batch_size: int,
                 accumulation: int, seed: int) -> None:
        if not 0 <= eos_id < corpus.vocab_size:
            raise ConfigError(f"eos id {eos_id} is outside the corpus vocabulary of {corpus.vocab_size}")
        super().__init__(batch_size, accumulation, seed)
        self.cfg = cfg
        split = split_corpus(corpus, cfg.eval_fraction, cfg.split_seed)
        corpus, train_docs, self.eval_docs = split.corpus, split.train_docs, split.eval_docs
        self.stream = lm_stream(corpus, train_docs, eos_id)  # (N,) read in place
        self.eval_stream = lm_stream(corpus, self.eval_docs, eos_id)
        self.epoch_size = num_blocks(len(self.stream), cfg.block_size)
        if self.epoch_size == 0:
            raise ConfigError(f"{corpus.directory}: {len(self.stream)} training tokens do not fill one "
                              f"block of {cfg.block_size}")
        log.info("LM data: %d train / %d held-out documents, %d + %d tokens, %d blocks of %d per epoch",
                 len(train_docs), len(self.eval_docs), len(self.stream), len(self.eval_stream),
                 self.epoch_size, cfg.block_size)

    # --- StepData protocol -------------------------------------------------------------
    def normalizers(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        return {"lm": float(batch["labels"][:, 1:].numel())}

    def num_tokens(self, batch: dict[str, torch.Tensor]) -> int:
        return int(batch["input_ids"].numel())

    # --- blocks --------------------------------------------------------------------------
    def batch(self, examples: range) -> dict[str, torch.Tensor]:
        """Global examples ``examples`` (``g = step * batch_size + i``) as ``(B, T)`` tensors."""
        return stack_blocks([block(self.stream, int(i), self.cfg.block_size) for i in self.rows(examples)])

    def eval_batches(self, batch_size: int) -> list[dict[str, torch.Tensor]]:
        """Fixed held-out batches: up to ``eval_blocks`` blocks spread evenly over the held-out stream."""
        n = num_blocks(len(self.eval_stream), self.cfg.block_size)
        if n == 0:
            raise ConfigError(f"the held-out documents ({len(self.eval_stream)} tokens) do not fill one "
                              f"block of {self.cfg.block_size}; raise eval_fraction")
        rows = [block(self.eval_stream, int(i), self.cfg.block_size) for i in spread(n, self.cfg.eval_blocks)]
        return in_batches(rows, batch_size, stack_blocks)


def stack_blocks(rows: Sequence[np.ndarray]) -> dict[str, torch.Tensor]:
    """Blocks of ``T`` tokens -> ``input_ids`` and ``labels``, both the same ``(B, T)`` tensor."""
    ids = torch.from_numpy(np.stack(rows))  # (B, T)
    return {"input_ids": ids, "labels": ids}


def num_blocks(n_tokens: int, block_size: int) -> int:
    """Blocks of ``block_size`` overlapping by one token that fit in ``n_tokens``."""
    return max(0, (n_tokens - 1) // (block_size - 1))


def block(stream: np.ndarray | TokenStream, i: int, block_size: int) -> np.ndarray:
    """Block ``i``: ``stream[i * (T - 1) : i * (T - 1) + T]`` (its first token is the previous
    block's last, so it is context only)."""
    start = i * (block_size - 1)
    return stream[start:start + block_size]
