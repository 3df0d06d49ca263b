"""BERT pretraining batches (MLM + NSP) from a prepared corpus, as a deterministic step source.

Example ``g`` of the whole run (``g = step * batch_size + i``) is built from the epoch plan of
``g // epoch_size`` and masked with a generator seeded by ``(seed, g)``. Every batch is thus a
pure function of ``(seed, step)``: a resumed run sees exactly the batches it would have seen,
each DDP rank builds just its own slice of the global batch, and the masks differ every epoch.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import torch

from muppets.data.shards import TokenCorpus
from muppets.errors import ConfigError
from muppets.objectives.mlm import IGNORE, MaskingConfig, mask_sequence
from muppets.objectives.nsp import PairPlan, plan_pairs
from muppets.train.distributed import micro_batch_ranges, rank_shares

log = logging.getLogger(__name__)


@dataclass
class SpecialIds:
    pad: int
    cls: int
    sep: int
    mask: int
    all: list[int] = field(default_factory=list)  # every special id (never a random replacement)


@dataclass
class PretrainDataConfig:
    max_seq_len: int = 128  # tokens per sequence including [CLS] and two [SEP]
    short_seq_prob: float = 0.1  # share of instances with a random shorter target length
    nsp: bool = True  # sentence pairs with IsNext/NotNext labels; False = one segment, no NSP loss
    masking: MaskingConfig = field(default_factory=MaskingConfig)
    eval_fraction: float = 0.02  # share of documents held out for evaluation (at least 1)
    eval_examples: int = 512  # held-out sequences scored at every evaluation
    split_seed: int = 1234  # fixes which documents are held out, independent of the run seed


class BertPretrainingData:
    """The trainer's ``StepData`` for BERT: ``micro_batches(step, rank, world)`` and friends."""

    def __init__(self, corpus: TokenCorpus, special: SpecialIds, cfg: PretrainDataConfig,
                 batch_size: int, accumulation: int, seed: int,
                 is_continuation: np.ndarray | None = None) -> None:
        self.corpus, self.special, self.cfg = corpus, special, cfg
        self.batch_size, self.accumulation, self.seed = batch_size, accumulation, seed
        self.is_continuation = is_continuation
        if cfg.masking.whole_word and is_continuation is None:
            raise ConfigError("whole-word masking needs the tokenizer's ##-piece lookup")
        vocab = np.arange(corpus.vocab_size)
        self.random_ids = vocab[~np.isin(vocab, special.all)]
        self.train_docs, self.eval_docs = split_documents(corpus.num_documents, cfg.eval_fraction,
                                                          cfg.split_seed)
        self.epoch_size = len(self._plan(0))
        if self.epoch_size == 0:
            raise ConfigError(f"{corpus.directory}: the training documents yield no instances")
        log.info("pretraining data: %d train / %d held-out documents, %d instances per epoch",
                 len(self.train_docs), len(self.eval_docs), self.epoch_size)

    @lru_cache(maxsize=2)
    def _plan(self, epoch: int) -> PairPlan:
        rng = np.random.default_rng([self.seed, 7, epoch])
        return plan_pairs(self.corpus.sentence_ends, self.corpus.document_ends, self.train_docs,
                          self.cfg.max_seq_len, self.cfg.short_seq_prob, rng)

    # --- StepData protocol -------------------------------------------------------------
    def micro_batches(self, step: int, rank: int, world: int) -> list[dict[str, torch.Tensor]]:
        return [self.batch(r) for r in micro_batch_ranges(step, rank, world, self.batch_size, self.accumulation)]

    def normalizers(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        out = {"mlm": float((batch["mlm_labels"] != IGNORE).sum())}
        if "nsp_labels" in batch:
            out["nsp"] = float(batch["nsp_labels"].numel())
        return out

    def num_tokens(self, batch: dict[str, torch.Tensor]) -> int:
        return int(batch["attention_mask"].sum())

    # --- building examples -------------------------------------------------------------
    def shares(self, world: int) -> tuple[int, int]:
        """Sequences per rank and per micro-batch; the global batch must divide evenly."""
        return rank_shares(self.batch_size, world, self.accumulation)

    def batch(self, examples: range) -> dict[str, torch.Tensor]:
        """Collate global examples ``examples`` into one padded batch."""
        rows = [self.example(g) for g in examples]
        return collate(rows, self.special.pad, self.cfg.masking.max_predictions, self.cfg.nsp)

    def example(self, g: int, plan: PairPlan | None = None, row: int | None = None) -> dict:
        """Global example ``g``: its instance from the epoch plan and a fresh mask."""
        if plan is None:
            epoch, pos = divmod(g, self.epoch_size)
            plan = self._plan(epoch)
            row = pos % len(plan)
        rng = np.random.default_rng([self.seed, 11, g])
        return self.build(plan, row, rng)

    def build(self, plan: PairPlan, row: int, rng: np.random.Generator) -> dict:
        toks = self.corpus.tokens
        a = np.asarray(toks[plan.a_lo[row]:plan.a_hi[row]], dtype=np.int64)
        sp = self.special
        if self.cfg.nsp:
            b = np.asarray(toks[plan.b_lo[row]:plan.b_hi[row]], dtype=np.int64)
            ids = np.concatenate([[sp.cls], a, [sp.sep], b, [sp.sep]])
            segments = np.concatenate([np.zeros(len(a) + 2, np.int64), np.ones(len(b) + 1, np.int64)])
            maskable = np.concatenate([np.arange(1, len(a) + 1), np.arange(len(a) + 2, len(a) + 2 + len(b))])
        else:
            a = a[: self.cfg.max_seq_len - 2]
            ids = np.concatenate([[sp.cls], a, [sp.sep]])
            segments = np.zeros(len(ids), np.int64)
            maskable = np.arange(1, len(a) + 1)
        m = mask_sequence(ids, maskable, self.cfg.masking, sp.mask, self.random_ids, rng,
                          self.is_continuation)
        return {"ids": m.input_ids, "segments": segments, "positions": m.positions,
                "labels": m.labels, "nsp": int(plan.is_random[row])}

    def eval_batches(self, batch_size: int) -> list[dict[str, torch.Tensor]]:
        """Fixed held-out batches: the same documents, pairs and masks at every evaluation."""
        rng = np.random.default_rng([self.cfg.split_seed, 13])
        plan = plan_pairs(self.corpus.sentence_ends, self.corpus.document_ends, self.eval_docs,
                          self.cfg.max_seq_len, self.cfg.short_seq_prob, rng)
        n = min(self.cfg.eval_examples, len(plan))
        rows = [self.build(plan, r, np.random.default_rng([self.cfg.split_seed, 17, r])) for r in range(n)]
        return [collate(rows[i:i + batch_size], self.special.pad, self.cfg.masking.max_predictions,
                        self.cfg.nsp) for i in range(0, n, batch_size)]


def split_documents(num_docs: int, eval_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic held-in / held-out document indices (each sorted)."""
    if num_docs < 2:
        raise ConfigError(f"need at least 2 documents for a train/eval split, got {num_docs}")
    n_eval = min(num_docs - 1, max(1, int(round(num_docs * eval_fraction))))
    order = np.random.default_rng([seed, 3]).permutation(num_docs)
    return np.sort(order[n_eval:]), np.sort(order[:n_eval])


def collate(rows: list[dict], pad_id: int, max_predictions: int, nsp: bool) -> dict[str, torch.Tensor]:
    """Pad examples to the longest in the batch; MLM targets padded to ``max_predictions``."""
    B, T = len(rows), max(len(r["ids"]) for r in rows)
    P = max(max_predictions, max(len(r["positions"]) for r in rows))
    ids = np.full((B, T), pad_id, np.int64)
    segments = np.zeros((B, T), np.int64)
    mask = np.zeros((B, T), bool)
    positions = np.zeros((B, P), np.int64)
    labels = np.full((B, P), IGNORE, np.int64)
    for i, r in enumerate(rows):
        n, k = len(r["ids"]), len(r["positions"])
        ids[i, :n], segments[i, :n], mask[i, :n] = r["ids"], r["segments"], True
        positions[i, :k], labels[i, :k] = r["positions"], r["labels"]
    batch = {"input_ids": torch.from_numpy(ids), "token_type_ids": torch.from_numpy(segments),
             "attention_mask": torch.from_numpy(mask), "mlm_positions": torch.from_numpy(positions),
             "mlm_labels": torch.from_numpy(labels)}
    if nsp:
        batch["nsp_labels"] = torch.tensor([r["nsp"] for r in rows], dtype=torch.long)
    return batch
