"""What every label model shares: the sklearn-like API (``fit`` → ``predict_proba`` →
``predict`` → ``score``), the tie-break policy, the majority-vote starting point and the guard
that maps the learned latent classes onto the labels.

**Tie-break** (``predict``): among the classes whose probability is within ``1e-9`` of the
row's maximum, the one with the larger learned class balance wins, then the lowest index;
``tie_break="abstain"`` returns -1 for such rows instead.

**Label alignment** (the identifiability guard): a latent-class model fits the data equally
well with its classes renamed (e.g. every LF "inverted" on a binary task, snorkel issue
#1422). After fitting we pick the renaming under which the LFs vote each class more often
when it is the truth than when it is not — LFs better than random *per class*, the assumption
weak supervision rests on: the renaming ``p`` maximises ``sum_j sum_y P(LF j votes p[y] | y)``,
the class-conditional vote rates, **not** weighted by the class balance (weighting by it lets a
common class's false alarms outvote a rare class's hits: three LFs that fire on 60% of the 10%
positives and 10% of the negatives vote "positive" more often on negatives, yet are good
LFs). Ties keep the identity; a renaming is logged. A class balance the user fixed is never
reordered: only renamings that leave it unchanged are considered (with a uniform fixed
balance, all of them).

**Class balance**: every label model takes ``class_balance`` (``(K,)`` positive shares summing
to 1, in label order) to fix the prior instead of learning it. With one-sided LFs (each votes
one class only: spam, fraud, rare entities) the balance is barely identifiable from their
agreements; give it from labelled data or domain knowledge (``weak label --class-balance``).

**LFs whose votes count for nothing** (:func:`no_evidence`): after fitting a latent-class model,
an LF whose vote for class ``l`` moves the odds of ``l`` by less than ``EVIDENCE_FLOOR``
(``P(vote l | l) < 1.1 * max_{y != l} P(vote l | y)``), or against ``l``, is named in a warning
with the LFs whose co-votes with it the fitted model misses most: under the conditional
independence assumption, an LF that rarely votes with the others of its class and often with
the other class's looks uninformative (Snorkel's ``LabelModel`` inverts it), however accurate
it is. A row it alone votes on then gets the prior, as a row without votes does
(``keyword_http`` on the spam tutorial, :mod:`muppets.weak.label_model`).

Messages name LFs by the ``lf_names`` given to ``fit`` (``LF 3`` without).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence

import numpy as np

from muppets.errors import ConfigError
from muppets.weak.matrix import (ONE_SIDED_ADVICE, accuracy, check_gold, check_label_matrix, one_sided,
                                 vote_counts)

__all__ = ["LabelModelBase", "majority_posteriors", "outcome_one_hot", "align_classes", "check_balance",
           "no_evidence", "vote_moments", "model_moments", "EVIDENCE_FLOOR"]

logger = logging.getLogger(__name__)

_TIE = 1e-9
EVIDENCE_FLOOR = 1.1  # an LF's vote must make its class this many times likelier than any other


class LabelModelBase:
    """Shared API. Subclasses set ``class_balance_`` in ``fit`` and implement
    ``predict_proba``."""

    learns_balance = True  # fit estimates the class balance unless one is given

    def __init__(self, cardinality: int = 2, class_balance: object = None) -> None:
        if cardinality < 2:
            raise ConfigError(f"cardinality must be >= 2, got {cardinality}")
        self.cardinality = cardinality
        # (K,) the prior the user fixed, in label order; None = learned (module docstring)
        self.fixed_balance = None if class_balance is None else check_balance(class_balance, cardinality)
        self.class_balance_: np.ndarray | None = None  # (K,) once fitted
        self.lf_names_: list[str] | None = None  # once fitted: the names messages use
        self.no_evidence_: list[tuple[int, int]] = []  # once fitted: (LF, class) votes that count for nothing

    def _align(self, theta: np.ndarray, balance: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``theta`` and ``balance`` with the latent classes renamed onto the labels."""
        theta, balance, _ = align_classes(theta, balance, fixed=self.fixed_balance is not None)
        return theta, balance

    def _check(self, L: object) -> np.ndarray:
        return check_label_matrix(L, self.cardinality)

    def _check_fit(self, L: object, lf_names: Sequence[str] | None = None) -> np.ndarray:
        """``L`` to fit on: checked, and with at least one row and one LF; sets ``lf_names_``."""
        L = self._check(L)
        if L.shape[0] == 0 or L.shape[1] == 0:
            raise ConfigError(f"{type(self).__name__}: cannot fit on an empty label matrix "
                              f"{L.shape}")
        names = [f"LF {j}" for j in range(L.shape[1])] if lf_names is None else [str(n) for n in lf_names]
        if len(names) != L.shape[1]:
            raise ConfigError(f"{type(self).__name__}: {len(names)} LF names for {L.shape[1]} label-matrix columns")
        self.lf_names_ = names
        if self.learns_balance and self.fixed_balance is None and one_sided(L):
            logger.warning("%s: %s", type(self).__name__, ONE_SIDED_ADVICE)
        return L

    def _report_evidence(self, L: np.ndarray, outcomes: np.ndarray) -> None:
        """Set ``no_evidence_`` (``(lf, class)`` pairs, :func:`no_evidence`) from the fitted
        ``theta_`` and warn, naming each LF and the LFs its co-votes are most off with."""
        self.no_evidence_ = no_evidence(self.theta_, L)
        if not self.no_evidence_:
            return
        _, observed = vote_moments(outcomes)
        fitted = model_moments(self.theta_, self.class_balance_)
        voted = np.array([[(L[:, j] == c).any() for c in range(self.cardinality)] for j in range(L.shape[1])])
        for j, label in self.no_evidence_:
            logger.warning("%s: %s", type(self).__name__,
                           self._no_evidence_message(j, label, observed, fitted, voted, L.shape[0]))

    def _no_evidence_message(self, j: int, label: int, observed: np.ndarray, fitted: np.ndarray,
                             voted: np.ndarray, n: int) -> str:
        K, names, theta = self.cardinality, self.lf_names_, self.theta_
        own = theta[j, label, 1 + label]
        rival, y = max((theta[j, y, 1 + label], y) for y in range(K) if y != label)
        against = own * EVIDENCE_FLOOR < rival
        text = (f"{names[j]}'s votes for class {label} count {'against it' if against else 'for next to nothing'} "
                f"(P(vote {label} | {label}) = {own:.3f}, P(vote {label} | {y}) = {rival:.3f}): a row it alone "
                f"votes on gets {'less of it than' if against else 'about what'} a row with no vote gets")
        a = j * K + label
        ratios = sorted(((observed[a, k * K + c] + 0.5 / n) / (fitted[a, k * K + c] + 0.5 / n), names[k])
                        for k in range(len(names)) for c in range(K) if k != j and voted[k, c])
        off = [f"with {name} {ratio:.2g}x" for ratio, name in (ratios[:1] + ratios[-1:])
               if not 0.8 < ratio < 1.25]
        if off:
            text += (f". Under the independence model its co-votes say so: it votes {' and '.join(dict.fromkeys(off))} "
                     "as often as the fitted model expects")
        return text + ("; if it is accurate on labelled rows, LFs fire together or exclude each other: majority "
                       "vote counts its votes (--model majority)")

    def _fitted_outcomes(self, L: object, theta: np.ndarray | None) -> np.ndarray:
        """``L``'s outcome indicators ``(n, m, K+1)`` for a fitted latent-class model."""
        if theta is None or self.class_balance_ is None:
            raise ConfigError(f"{type(self).__name__}: call fit before predict_proba")
        L = self._check(L)
        if L.shape[1] != theta.shape[0]:
            raise ConfigError(f"fitted on {theta.shape[0]} LFs, got {L.shape[1]} columns")
        return outcome_one_hot(L, self.cardinality)

    def fit(self, L: np.ndarray, lf_names: Sequence[str] | None = None) -> LabelModelBase:  # pragma: no cover
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


def no_evidence(theta: np.ndarray, L: np.ndarray, floor: float = EVIDENCE_FLOOR) -> list[tuple[int, int]]:
    """``(j, l)`` pairs: LF ``j`` votes class ``l`` in ``L``, yet under the fitted ``theta``
    (m, K, K+1) that vote makes ``l`` less than ``floor`` times likelier than some other class:
    ``P(vote l | l) < floor * max_{y != l} P(vote l | y)`` (an uninformative or inverted LF).

    >>> theta = np.array([[[.9, .0, .1], [.9, .0, .1]], [[.9, .0, .1], [.5, .0, .5]]])
    >>> no_evidence(theta, np.array([[1, 1], [-1, 1]]))
    [(0, 1)]
    """
    K = theta.shape[1]
    out = []
    for j in range(theta.shape[0]):
        for label in np.unique(L[:, j][L[:, j] >= 0]):
            label = int(label)
            rivals = max(theta[j, y, 1 + label] for y in range(K) if y != label)
            if theta[j, label, 1 + label] < floor * rivals:
                out.append((j, label))
    return out


def vote_moments(outcomes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``O1 (d,)`` and ``O2 (d, d)`` of the vote indicators ``A[i, (j, l)] = [L_ij = l]``,
    ``d = m * K`` (column ``j * K + l``): vote rates and co-vote rates."""
    n, m, k1 = outcomes.shape
    A = outcomes[:, :, 1:].reshape(n, m * (k1 - 1))  # (n, d)
    return A.mean(axis=0), A.T @ A / n


def model_moments(theta: np.ndarray, balance: np.ndarray) -> np.ndarray:
    """``(d, d)`` co-vote rates conditionally independent LFs with ``theta`` (m, K, K+1) and
    ``balance`` (K,) imply: ``sum_y P(y) P(vote a | y) P(vote b | y)``."""
    m, K = theta.shape[:2]
    mu = theta[:, :, 1:].transpose(0, 2, 1).reshape(m * K, K)  # (d, K): [(j, l), y]
    return (mu * balance) @ mu.T


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


def check_balance(values: object, cardinality: int) -> np.ndarray:
    """``values`` as a ``(K,)`` float64 class balance, or a :class:`ConfigError` naming them."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.shape != (cardinality,) or not np.isfinite(arr).all() or (arr <= 0).any() \
            or abs(arr.sum() - 1) > 1e-6:
        raise ConfigError(f"class_balance must be {cardinality} positive numbers summing to 1, "
                          f"got {values!r}")
    return arr


def align_classes(theta: np.ndarray, balance: np.ndarray, fixed: bool = False,
                  max_classes: int = 7) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """Rename latent classes so that the LFs beat random per class (see module docstring).

    ``theta`` is ``(m, K, K+1)`` = P(LF j outputs o | latent y), outcome 0 = abstain;
    returns the renamed ``theta``, ``balance`` and the permutation ``p`` (latent y → label
    ``p[y]``). ``fixed``: ``balance`` was given by the user, so only renamings that leave it
    unchanged are allowed. With more than ``max_classes`` classes the identity is kept (K!
    renamings).
    """
    K = balance.shape[0]
    identity = tuple(range(K))
    if K > max_classes:
        return theta, balance, identity
    # rate[y, c] = sum_j P(LF j votes c | Y = y): class-conditional, not weighted by P(Y = y)
    rate = theta[:, :, 1:].sum(axis=0)
    allowed = [p for p in itertools.permutations(range(K))
               if not fixed or np.allclose(balance[list(p)], balance)]
    best = max(allowed, key=lambda p: (sum(rate[y, p[y]] for y in range(K)), p == identity))
    if best == identity:
        return theta, balance, best
    logger.info("label model: latent classes renamed %s so that the LFs beat random per class", best)
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
