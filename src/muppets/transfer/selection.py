"""Where a transfer run chooses its model: never on the split it reports.

Picking the best epoch (or stopping early) on dev and then reporting dev reports the maximum
of several noisy evaluations, which is biased upwards, most on small dev sets (RTE's 277
examples, MRPC's 408). A run therefore selects on one of:

* ``train-slice`` — a seeded, stratified slice of the training examples (``fraction``, 10% by
  default), held out from training, whole groups where the examples name one in
  ``meta["group"]`` (:func:`example_groups`: XNLI / PAWS-X rows sharing a sentence); dev and
  test are only reported;
* ``dev`` — the dev split, when the task has a labelled test split to report (CoNLL-2003:
  select on ``eng.testa``, report ``eng.testb``);
* ``last`` — nothing: the model after the last step (no data held out, nothing chosen).

``auto`` resolves to ``dev`` when a labelled test split exists, to ``last`` when the run has
only one evaluation to choose from (one epoch, no ``eval_every``, so there is no choice to
make), and to ``train-slice`` otherwise. Fine-tuning and feature-based transfer share this.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from muppets.errors import ConfigError
from muppets.tasks.splits import stratified_split

log = logging.getLogger(__name__)

SELECTIONS = ("auto", "train-slice", "dev", "last")
GROUP = "group"  # an example's meta key: examples of one group are held out together (muppets.tasks.xlingual)
REGRESS_BINS = 5  # a regression task's slice is stratified by quintiles of the target


@dataclass(frozen=True)
class Selection:
    """A resolved selection: its mode and which examples train and which select."""

    mode: str  # train-slice | dev | last
    train: list[int]  # indices of the training examples that are trained on
    select: list[int]  # indices into the split named by ``split`` that choose the model ([] for last)
    split: str  # "train" (train-slice), "dev" or "" (last)


def resolve_mode(mode: str, has_dev: bool, has_test: bool, epochs: int, eval_every: int = 0) -> str:
    """The concrete mode for ``auto``; checks that an explicit mode is possible. A run evaluates
    at every epoch end, and more often with ``eval_every``: one epoch without it is one choice."""
    evaluations = epochs + (1 if eval_every else 0)
    if mode not in SELECTIONS:
        raise ConfigError(f"selection: {mode!r} is not one of {list(SELECTIONS)}")
    if mode == "auto":
        if has_dev and has_test:
            return "dev"
        return "last" if evaluations <= 1 else "train-slice"
    if mode == "dev" and not has_dev:
        raise ConfigError("selection=dev: the task has no labelled dev split")
    if mode == "dev" and not has_test:
        log.warning("selection=dev on a task without a labelled test split: the dev figures "
                    "reported are the ones the model was chosen on (biased upwards)")
    return mode


def strata(kind: str, golds: Sequence[Any]) -> list[str]:
    """The stratum of each example: its label (classify, pair, choice), its target's quintile
    (regress), or one stratum (tag, span)."""
    if kind in ("classify", "pair", "choice"):
        return [str(g) for g in golds]
    if kind == "regress":
        values = np.asarray(golds, dtype=float)
        edges = np.quantile(values, np.linspace(0, 1, REGRESS_BINS + 1)[1:-1])
        return [str(int(b)) for b in np.searchsorted(edges, values, side="right")]
    return ["all"] * len(golds)


def example_groups(examples: Sequence[Any]) -> list[Hashable] | None:
    """Each example's ``meta["group"]`` (an example without one is a group of its own), or
    ``None`` when no example names a group."""
    named = [getattr(ex, "meta", {}).get(GROUP) for ex in examples]
    if all(g is None for g in named):
        return None
    return [("example", i) if g is None else g for i, g in enumerate(named)]


def select(mode: str, kind: str, train_golds: Sequence[Any], n_dev: int, fraction: float,
           seed: int, groups: Sequence[Hashable] | None = None) -> Selection:
    """Carve the selection data for a resolved ``mode``.

    Args:
        train_golds: the gold label of every training example (the slice is stratified by it).
        n_dev: labelled dev examples (``dev`` selects on all of them).
        fraction: ``train-slice``: the share of training examples held out.
        seed: ``train-slice``: fixes the slice (kept the same across run seeds, so seeds differ
            only in initialisation, dropout and order).
        groups: ``train-slice``: one per training example (:func:`example_groups`); a group is
            held out whole or not at all, so no XNLI premise is both trained and selected on.
    """
    everything = list(range(len(train_golds)))
    if mode == "dev":
        return Selection("dev", everything, list(range(n_dev)), "dev")
    if mode == "last":
        return Selection("last", everything, [], "")
    if not 0.0 < fraction < 1.0:
        raise ConfigError(f"selection_fraction: {fraction} is not in (0, 1)")
    kept, held = stratified_split(strata(kind, train_golds), fraction, seed, groups)
    if not held or not kept:
        raise ConfigError(f"selection_fraction={fraction} of {len(train_golds)} training examples "
                          "leaves nothing to select on (or nothing to train on)")
    log.info("selection on a %d-example slice of train (%.0f%%, seed %d); training on the other %d",
             len(held), 100 * fraction, seed, len(kept))
    return Selection("train-slice", kept, held, "train")
