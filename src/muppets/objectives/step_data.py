"""What every pretraining objective's ``StepData`` shares: global example numbers, epochs, batches.

Update ``step`` of a run is the global examples ``g = step * batch_size + i`` (``0 <= i <
batch_size``); each DDP rank takes its contiguous share, cut into ``accumulation`` micro-batches
(:func:`~muppets.train.distributed.micro_batch_ranges`). Example ``g`` lies in epoch ``e`` when
``start_e <= g < start_e + length_e``: every epoch covers its own plan exactly once, also when
plans differ in length from epoch to epoch (BERT's sentence-pair plans do). The epoch starts are
cumulative lengths, computed lazily and kept, so a batch stays a pure function of
``(seed, step)``: a resumed run sees exactly the batches it would have seen, and a DDP rank
builds only its own slice.

A subclass says what is new about its objective: :meth:`PretrainingData.epoch_length` (or a fixed
``epoch_size``), :meth:`PretrainingData.batch` (global examples -> tensors), ``normalizers`` and
``num_tokens`` (the real, non-padding tokens of a micro-batch, which the trainer logs as
``real_tokens``). Objectives that shuffle fixed rows draw the order of epoch ``e`` from
``(seed, order_salt, e)`` with :meth:`PretrainingData.rows`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

import numpy as np
import torch

from muppets.train.distributed import micro_batch_ranges

T = TypeVar("T")
Batch = dict[str, torch.Tensor]


class EpochCache(Generic[T]):
    """The values ``build(epoch)`` of the last ``size`` epochs asked for, held by one instance
    (a ``functools.lru_cache`` on a method would be shared by the class and keep every
    instance alive)."""

    def __init__(self, build: Callable[[int], T], size: int = 2) -> None:
        self.build, self.size = build, size
        self.values: OrderedDict[int, T] = OrderedDict()

    def __call__(self, epoch: int) -> T:
        if epoch in self.values:
            self.values.move_to_end(epoch)
        else:
            self.values[epoch] = self.build(epoch)
            while len(self.values) > self.size:
                self.values.popitem(last=False)
        return self.values[epoch]


class PretrainingData:
    """Base of the deterministic pretraining batch sources (each one a trainer ``StepData``;
    fine-tuning's counterpart, over length-bucketed batches, is
    :class:`muppets.transfer.batching.EpochData`)."""

    order_salt: int = 0  # each objective draws its epoch orders from its own random stream
    epoch_size: int  # examples per epoch, set by objectives whose every epoch has the same length

    def __init__(self, batch_size: int, accumulation: int, seed: int) -> None:
        self.batch_size, self.accumulation, self.seed = batch_size, accumulation, seed
        self._epoch_starts = [0]  # example number where each epoch begins, extended on demand
        self._order = EpochCache(self._draw_order)

    # --- what a subclass provides ------------------------------------------------------
    def epoch_length(self, epoch: int) -> int:
        """Examples in epoch ``epoch`` (default: the fixed ``epoch_size``)."""
        return self.epoch_size

    def batch(self, examples: range) -> Batch:
        """Global examples ``examples`` as one micro-batch."""
        raise NotImplementedError

    # --- the trainer's protocol --------------------------------------------------------
    def micro_batches(self, step: int, rank: int, world: int) -> list[Batch]:
        """This rank's share of update ``step``, as ``accumulation`` micro-batches."""
        ranges = micro_batch_ranges(step, rank, world, self.batch_size, self.accumulation)
        return [self.batch(r) for r in ranges]

    # --- example numbers -> epochs and rows --------------------------------------------
    def locate(self, examples: range) -> tuple[np.ndarray, np.ndarray]:
        """``(epochs (B,), positions (B,))`` of global examples ``examples`` (int64)."""
        g = np.arange(examples.start, examples.stop, dtype=np.int64)
        while self._epoch_starts[-1] < examples.stop:
            length = self.epoch_length(len(self._epoch_starts) - 1)
            assert length > 0, "an epoch without examples"
            self._epoch_starts.append(self._epoch_starts[-1] + length)
        starts = np.asarray(self._epoch_starts, dtype=np.int64)
        epochs = np.searchsorted(starts, g, side="right") - 1
        return epochs, g - starts[epochs]

    def rows(self, examples: range) -> np.ndarray:
        """``(B,)`` row of each example in its epoch's shuffled order ``order_e[position]``."""
        epochs, positions = self.locate(examples)
        out = np.empty(len(positions), dtype=np.int64)
        for e in np.unique(epochs):  # a batch spans at most a few epochs
            here = epochs == e
            out[here] = self._order(int(e))[positions[here]]
        return out

    def _draw_order(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, self.order_salt, epoch]).permutation(self.epoch_length(epoch))


def spread(n: int, count: int) -> np.ndarray:
    """Up to ``count`` indices of ``range(n)`` spread evenly, first and last included: ``(k,)`` int64."""
    return np.unique(np.linspace(0, n - 1, max(0, min(n, count))).round().astype(np.int64))


def in_batches(rows: Sequence[T], batch_size: int, collate: Callable[[Sequence[T]], Batch]) -> list[Batch]:
    """``rows`` collated ``batch_size`` at a time (the last batch may be smaller)."""
    return [collate(rows[i:i + batch_size]) for i in range(0, len(rows), batch_size)]
