"""What every label model shares: the sklearn-like API (``fit`` → ``predict_proba`` →
``predict`` → ``score``), the tie-break policy, the majority-vote starting point and the guard
that maps the learned latent classes onto the labels.

**Tie-break** (``predict``): among the classes whose probability is within ``1e-9`` of the
row's maximum, the one with the larger learned class balance wins, then the lowest index;
``tie_break="abstain"`` returns -1 for such rows instead.

**Label alignment** (the identifiability guard): a latent-class model fits the data equally
well with its classes renamed (e.g. every LF "inverted" on a binary task, snorkel issue
#1422). After fitting we pick the renaming under which the LFs vote the class they are modelled
to vote most often — LFs are assumed better than random on average, the assumption weak
supervision rests on — and log it when it is not the identity.
"""

from __future__ import annotations

import itertools
import logging

import numpy as np

from muppets.errors import ConfigError
from muppets.weak.matrix import accuracy, check_gold, check_label_matrix, vote_counts

__all__ = ["LabelModelBase", "majority_posteriors", "outcome_one_hot", "align_classes"]

logger = logging.getLogger(__name__)

_TIE = 1e-9


class LabelModelBase:
    """Shared API. Subclasses set ``class_balance_`` in ``fit`` and implement
    ``predict_proba``."""

    def __init__(self, cardinality: int = 2) -> None:
        if cardinality < 2:
            raise ConfigError(f"cardinality must be >= 2, got {cardinality}")
        self.cardinality = cardinality
        self.class_balance_: np.ndarray | None = None  # (K,) once fitted

    def _check(self, L: object) -> np.ndarray:
        return check_label_matrix(L, self.cardinality)

    def _check_fit(self, L: object) -> np.ndarray:
        """``L`` to fit on: checked, and with at least one row and one LF."""
        L = self._check(L)
        if L.shape[0] == 0 or L.shape[1] == 0:
            raise ConfigError(f"{type(self).__name__}: cannot fit on an empty label matrix "
                              f"{L.shape}")
        return L

    def _fitted_outcomes(self, L: object, theta: np.ndarray | None) -> np.ndarray:
        """``L``'s outcome indicators ``(n, m, K+1)`` for a fitted latent-class model."""
        if theta is None or self.class_balance_ is None:
            raise ConfigError(f"{type(self).__name__}: call fit before predict_proba")
        L = self._check(L)
        if L.shape[1] != theta.shape[0]:
            raise ConfigError(f"fitted on {theta.shape[0]} LFs, got {L.shape[1]} columns")
        return outcome_one_hot(L, self.cardinality)

    def fit(self, L: np.ndarray) -> LabelModelBase:  # pragma: no cover - abstract
        raise NotImplementedError

    def predict_proba(self, L: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def predict(self, L: np.ndarray, tie_break: str = "prior") -> np.ndarray:
        """``(n,)`` class indices: the most probable class; ties as the module docstring says."""
        if tie_break not in ("prior", "abstain"):
            raise ConfigError(f"tie_break must be 'prior' or 'abstain', not {tie_break!r}")
        probs = self.predict_proba(L)
        tied = probs >= probs.max(axis=1, keepdims=True) - _TIE  # (n, K)
        prior = (self.class_balance_ if self.class_balance_ is not None
                 else np.full(self.cardinality, 1.0 / self.cardinality))
        # rank classes by prior, then by lower index: stable argsort of -prior
        order = np.argsort(-prior, kind="stable")
        first = order[np.argmax(tied[:, order], axis=1)]
        if tie_break == "abstain":
            first = np.where(tied.sum(axis=1) > 1, -1, first)
        return first.astype(np.int64)

    def score(self, L: np.ndarray, Y: np.ndarray, tie_break: str = "prior") -> float:
        """Accuracy of :meth:`predict` against gold ``Y`` (rows with ``Y = -1`` are skipped;
        an abstained prediction counts as wrong)."""
        L = self._check(L)
        return accuracy(self.predict(L, tie_break), check_gold(Y, L.shape[0], self.cardinality))


def majority_posteriors(L: np.ndarray, cardinality: int,
                        empty: np.ndarray | None = None) -> np.ndarray:
    """``(n, K)``: each row's vote shares among its tied-most-voted classes (uniform over the
    tie); rows without a vote get ``empty`` (default uniform)."""
    counts = vote_counts(L, cardinality)
    top = (counts == counts.max(axis=1, keepdims=True)).astype(np.float64)
    probs = top / top.sum(axis=1, keepdims=True)
    fill = np.full(cardinality, 1.0 / cardinality) if empty is None else empty
    probs[counts.sum(axis=1) == 0] = fill
    return probs


def outcome_one_hot(L: np.ndarray, cardinality: int) -> np.ndarray:
    """``(n, m, K+1)`` indicators of each LF's outcome: index 0 = abstain, ``1 + k`` = class k."""
    return (L[:, :, None] + 1 == np.arange(cardinality + 1)[None, None, :]).astype(np.float64)


def align_classes(theta: np.ndarray, balance: np.ndarray, max_classes: int = 7
                  ) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """Rename latent classes so LFs vote their modelled class most (see module docstring).

    ``theta`` is ``(m, K, K+1)`` = P(LF j outputs o | latent y), outcome 0 = abstain;
    returns the renamed ``theta``, ``balance`` and the permutation ``p`` (latent y → label
    ``p[y]``). With more than ``max_classes`` classes the identity is kept (K! renamings).
    """
    K = balance.shape[0]
    if K > max_classes:
        return theta, balance, tuple(range(K))
    # agree[y, c] = P(Y=y) * sum_j P(LF j votes c | Y=y)
    agree = balance[:, None] * theta[:, :, 1:].sum(axis=0)
    best = max(itertools.permutations(range(K)),
               key=lambda p: (sum(agree[y, p[y]] for y in range(K)), p == tuple(range(K))))
    if best == tuple(range(K)):
        return theta, balance, best
    logger.info("label model: latent classes renamed %s so that LFs beat random on average", best)
    new_theta, new_balance = np.empty_like(theta), np.empty_like(balance)
    for y, label in enumerate(best):
        new_theta[:, label, :] = theta[:, y, :]
        new_balance[label] = balance[y]
    return new_theta, new_balance, best


def posterior(log_balance: np.ndarray, log_theta: np.ndarray, outcomes: np.ndarray,
              use_abstains: bool = True) -> np.ndarray:
    """``(n, K)`` P(Y | outcomes) under conditionally independent LFs:
    ``log P(y) + sum_j log P(o_ij | y)``; with ``use_abstains=False`` an abstain contributes
    nothing (Snorkel's prediction rule)."""
    if not use_abstains:
        outcomes = outcomes.copy()
        outcomes[:, :, 0] = 0.0
    n, m, k1 = outcomes.shape
    flat = log_theta.transpose(0, 2, 1).reshape(m * k1, -1)  # (m*(K+1), K): [(j, o), y]
    logits = log_balance[None, :] + outcomes.reshape(n, m * k1) @ flat  # (n, K)
    logits -= logits.max(axis=1, keepdims=True)
    probs = np.exp(logits)
    return probs / probs.sum(axis=1, keepdims=True)
