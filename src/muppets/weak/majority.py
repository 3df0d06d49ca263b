"""Majority vote: each row's most voted class.

* ``predict_proba``: a row's probability is spread uniformly over its tied-most-voted classes
  (``[2, 2, 1]`` votes → ``[.5, .5, 0]``), as Snorkel's ``MajorityLabelVoter``. A row where
  every LF abstains gets the ``class_balance`` given to the constructor, else uniform.
* ``predict``: a row no LF labels is **abstained** on (-1), as Snorkel's ``MajorityLabelVoter``
  does, unless a ``class_balance`` was given: then it gets that balance's most likely class.
  Nothing about the classes' shares is learned from the votes: with one-sided LFs the share of
  each class among the votes says how often each class's LFs *fire*, not how common the
  class is (three spam keyword LFs against one ham LF make "spam" the winner of most votes
  on a corpus that is 90% ham), so a prior learned from them would give every uncovered row
  the wrong class.
* Ties among voted classes: the one with the larger given balance wins, then the lowest index;
  ``tie_break="abstain"`` gives -1 for tied rows.
"""

from __future__ import annotations

import numpy as np

from muppets.weak.base import LabelModelBase, majority_posteriors
from muppets.weak.matrix import vote_counts

__all__ = ["MajorityVote"]


class MajorityVote(LabelModelBase):
    """Majority vote with a stated rule for uncovered rows and ties (module docstring).

    >>> L = np.array([[0, 1, -1], [-1, -1, -1], [0, 0, 1]])
    >>> MajorityVote(2).fit(L).predict(L).tolist()
    [0, -1, 0]
    >>> MajorityVote(2, class_balance=[0.2, 0.8]).fit(L).predict(L).tolist()
    [1, 1, 0]
    """

    learns_balance = False

    def fit(self, L: np.ndarray) -> MajorityVote:
        """Nothing to learn: checks ``L`` and sets ``class_balance_`` (the given one, else
        uniform)."""
        self._check_fit(L)
        uniform = np.full(self.cardinality, 1.0 / self.cardinality)
        self.class_balance_ = uniform if self.fixed_balance is None else self.fixed_balance
        return self

    def predict_proba(self, L: np.ndarray) -> np.ndarray:
        """``(n, K)`` vote shares of the tied-most-voted classes; the balance on empty rows."""
        return majority_posteriors(self._check(L), self.cardinality, self.fixed_balance)

    def predict(self, L: np.ndarray, tie_break: str = "prior") -> np.ndarray:
        """``(n,)`` the most voted class; -1 on rows without a vote unless a balance was given."""
        L = self._check(L)
        labels = super().predict(L, tie_break)
        if self.fixed_balance is None:
            labels[vote_counts(L, self.cardinality).sum(axis=1) == 0] = -1
        return labels
