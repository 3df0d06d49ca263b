"""Length-bucketed batches of features, and the :class:`~muppets.train.StepData` of fine-tuning.

Padding every batch to ``max_seq_len`` wastes most of the compute on short-sentence tasks
(SST-2 averages ~13 tokens). Each epoch here:

1. shuffles the examples with a generator seeded by ``(seed, epoch)``;
2. cuts the shuffled order into buckets of ``bucket_batches`` batches and sorts each bucket by
   length, so a batch holds sequences of similar length;
3. splits the buckets into batches and shuffles the batch order (same generator);
4. pads each batch only to its own longest sequence (:func:`collate`).

Everything is a pure function of ``(seed, epoch)``, so :class:`EpochData` maps a global step to
``(epoch, batch)`` and a resumed run sees exactly the batches the uninterrupted run would.

Tagging trains on shuffled batches without the sort (buckets of one batch,
:func:`default_bucket_batches`): in a tagging corpus a sentence's length says what it is (CoNLL's
short lines are names, headlines and scores), and batches of one length then pull the model
one way at a time: against a plain transformers loop, CoNLL-2003 lost F1 with the sort and was
level without it (BENCHMARKS.md, issue 15, item 14). Sentence tasks keep it: their scores were
level with it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from muppets.errors import ConfigError
from muppets.transfer.features import IGNORE, Feature, Probs

BUCKET_BATCHES = 50  # batches per length-sorted bucket (sentence tasks)


def default_bucket_batches(kind: str) -> int:
    """Batches per length-sorted bucket for a task ``kind``: 1 (no sorting) for ``tag``, else
    :data:`BUCKET_BATCHES` (see the module docstring)."""
    return 1 if kind == "tag" else BUCKET_BATCHES


def bucketed_batches(lengths: Sequence[int], batch_size: int, seed: int, epoch: int,
                     bucket_batches: int = BUCKET_BATCHES) -> list[list[int]]:
    """Example indices of every batch of ``epoch``; each example exactly once.

    >>> bucketed_batches([5, 1, 3, 2, 4], 2, seed=0, epoch=0) == bucketed_batches([5, 1, 3, 2, 4], 2, 0, 0)
    True
    """
    if batch_size < 1:
        raise ConfigError(f"batch_size={batch_size} must be >= 1")
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(lengths))
    span = batch_size * bucket_batches
    batches = []
    for begin in range(0, len(order), span):
        bucket = sorted(order[begin: begin + span].tolist(), key=lambda i: lengths[i])
        batches += [bucket[k: k + batch_size] for k in range(0, len(bucket), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def eval_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices sorted by length (longest first), in batches: the least padding for inference."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [order[k: k + batch_size] for k in range(0, len(order), batch_size)]


def collate(features: Sequence[Feature], pad_id: int) -> dict[str, torch.Tensor]:
    """Pad to the batch's longest row: ``input_ids``, ``token_type_ids``, ``attention_mask``
    ``(B, T)`` (``(B, C, T)`` for choice) and ``labels`` when every feature has one."""
    T = max(f.length for f in features)
    choice = isinstance(features[0].input_ids[0], list)
    rows = [r for f in features for r in (f.input_ids if choice else [f.input_ids])]
    types = [r for f in features for r in (f.token_type_ids if choice else [f.token_type_ids])]
    ids = torch.full((len(rows), T), pad_id, dtype=torch.long)
    segments = torch.zeros((len(rows), T), dtype=torch.long)
    mask = torch.zeros((len(rows), T), dtype=torch.long)
    for k, (row, seg) in enumerate(zip(rows, types)):
        ids[k, : len(row)] = torch.tensor(row)
        segments[k, : len(seg)] = torch.tensor(seg)
        mask[k, : len(row)] = 1
    batch = {"input_ids": ids, "token_type_ids": segments, "attention_mask": mask}
    if choice:  # (B*C, T) -> (B, C, T)
        batch = {k: v.view(len(features), -1, T) for k, v in batch.items()}
    if all(f.label is not None for f in features):
        batch["labels"] = _labels(features, T)
    return batch


def _labels(features: Sequence[Feature], T: int) -> torch.Tensor:
    first = features[0].label
    if isinstance(first, list):  # tag ids per token -> (B, T), padding ignored
        out = torch.full((len(features), T), IGNORE, dtype=torch.long)
        for k, f in enumerate(features):
            out[k, : len(f.label)] = torch.tensor(f.label)
        return out
    if isinstance(first, Probs):  # a probability per class (soft labels) -> (B, C) float
        return torch.tensor([f.label for f in features], dtype=torch.float)
    if isinstance(first, float):
        return torch.tensor([f.label for f in features], dtype=torch.float)
    return torch.tensor([f.label for f in features], dtype=torch.long)  # (B,) or (B, 2) spans


def loss_units(kind: str, labels: torch.Tensor) -> float:
    """What a batch's loss is averaged over: labelled tokens for ``tag``, else examples."""
    if kind == "tag":
        return float((labels != IGNORE).sum())
    return float(labels.shape[0])


def lm_targets(attention_mask: torch.Tensor, orderings: int = 1) -> torch.Tensor:
    """``(N, T - 1)`` bool: the tokens GPT's auxiliary LM loss predicts, every real token after a
    row's first, in the rows of ``attention_mask`` (``(B, T)``, or ``(B, R, T)`` flattened to
    ``B·R`` rows) taking every ``orderings``-th: a pair read in both orders counts once.

    >>> lm_targets(torch.tensor([[[1, 1, 1, 0], [1, 1, 0, 0]]]), orderings=2).sum().item()
    2
    """
    rows = attention_mask.reshape(-1, attention_mask.shape[-1])[::orderings].bool()
    return rows[:, 1:]


class EpochData:
    """:class:`~muppets.train.StepData` over ``epochs`` passes of bucketed batches.

    Step ``s`` is batch ``s % steps_per_epoch`` of epoch ``s // steps_per_epoch``. The batch is
    split into contiguous shares, one per rank, and each share into ``accumulation``
    micro-batches (each padded on its own). The last batch of an epoch can be short; when it
    has fewer examples than ``world * accumulation`` it is topped up with the epoch's first
    examples (cycling), so that no micro-batch is empty.

    ``bucket_batches`` is the number of batches per length-sorted bucket (0: the kind's default,
    :func:`default_bucket_batches`). ``lm_orderings`` > 0 adds the ``"lm"`` term of a GPT task model's auxiliary LM loss, whose
    units are the tokens it predicts (:func:`lm_targets`; the model's ``lm_orderings``).
    """

    def __init__(self, features: Sequence[Feature], kind: str, batch_size: int, accumulation: int,
                 epochs: int, seed: int, pad_id: int, lm_orderings: int = 0, bucket_batches: int = 0) -> None:
        if not features:
            raise ConfigError("no training features: the train split is empty")
        if bucket_batches < 0:
            raise ConfigError(f"bucket_batches={bucket_batches} must be >= 0 (0 = the task kind's default)")
        self.features, self.kind = list(features), kind
        self.bucket_batches = bucket_batches or default_bucket_batches(kind)
        self.batch_size, self.accumulation = batch_size, accumulation
        self.epochs, self.seed, self.pad_id = epochs, seed, pad_id
        self.lm_orderings = lm_orderings
        self.lengths = [f.length for f in self.features]
        self._cached: tuple[int, list[list[int]]] | None = None

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(len(self.features) / self.batch_size)

    @property
    def total_steps(self) -> int:
        return self.epochs * self.steps_per_epoch

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """Feature indices of every batch of ``epoch`` (cached for the current epoch)."""
        if self._cached is None or self._cached[0] != epoch:
            self._cached = (epoch, bucketed_batches(self.lengths, self.batch_size, self.seed, epoch,
                                                    self.bucket_batches))
        return self._cached[1]

    def micro_batches(self, step: int, rank: int, world: int) -> list[dict[str, torch.Tensor]]:
        epoch, index = divmod(step, self.steps_per_epoch)
        batches = self.epoch_batches(epoch)
        items = list(batches[index])
        pool = [i for b in batches for i in b]
        need = world * self.accumulation
        items += [pool[k % len(pool)] for k in range(need - len(items))]
        share = np.array_split(np.asarray(items), world)[rank]
        return [self.collate(part.tolist()) for part in np.array_split(share, self.accumulation)]

    def collate(self, indices: list[int]) -> dict[str, torch.Tensor]:
        """The padded micro-batch of these feature indices (a subclass may batch other inputs)."""
        return collate([self.features[i] for i in indices], self.pad_id)

    def normalizers(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        units = {"task": loss_units(self.kind, batch["labels"])}
        if self.lm_orderings:
            units["lm"] = float(lm_targets(batch["attention_mask"], self.lm_orderings).sum())
        return units

    def num_tokens(self, batch: dict[str, torch.Tensor]) -> int:
        return int(batch["attention_mask"].sum())
