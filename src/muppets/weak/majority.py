"""Majority vote: each row's most voted class.

* ``predict_proba``: a row's probability is spread uniformly over its tied-most-voted classes
  (``[2, 2, 1]`` votes → ``[.5, .5, 0]``), as Snorkel's ``MajorityLabelVoter``; a row where
  every LF abstains gets the **class prior learned by** :meth:`MajorityVote.fit` (the share of
  each class among the fit matrix's decisive — untied — majority votes, add-one smoothed), or
  uniform when the model was never fitted.
* ``predict`` (tie-break): among tied classes the one with the larger prior wins, then the
  lowest index; ``tie_break="abstain"`` gives -1 for tied rows (abstain-only rows with a
  non-uniform prior are not ties).
"""

from __future__ import annotations

import numpy as np

from muppets.weak.base import LabelModelBase, majority_posteriors
from muppets.weak.matrix import vote_counts

__all__ = ["MajorityVote"]


class MajorityVote(LabelModelBase):
    """Majority vote with a stated tie-break (see the module docstring).

    >>> mv = MajorityVote(2).fit(np.array([[1, 1, -1], [1, -1, -1], [0, -1, -1]]))
    >>> mv.class_balance_.round(2).tolist()
    [0.4, 0.6]
    >>> mv.predict(np.array([[0, 1, -1], [-1, -1, -1], [0, 0, 1]])).tolist()
    [1, 1, 0]
    """

    def fit(self, L: np.ndarray) -> MajorityVote:
        """Learn the class prior from the decisive majority votes of ``L``."""
        L = self._check_fit(L)
        counts = vote_counts(L, self.cardinality)
        top = counts == counts.max(axis=1, keepdims=True)
        decisive = (top.sum(axis=1) == 1) & (counts.sum(axis=1) > 0)
        winners = np.bincount(counts[decisive].argmax(axis=1), minlength=self.cardinality)
        self.class_balance_ = (winners + 1.0) / (winners.sum() + self.cardinality)
        return self

    def predict_proba(self, L: np.ndarray) -> np.ndarray:
        """``(n, K)`` vote shares of the tied-most-voted classes; the prior on empty rows."""
        return majority_posteriors(self._check(L), self.cardinality, self.class_balance_)
