"""Majority vote: each row's most voted class.

* ``predict_proba``: a row's probability is spread uniformly over its tied-most-voted classes
  (``[2, 2, 1]`` votes → ``[.5, .5, 0]``), as Snorkel's ``MajorityLabelVoter``. A row where
  every LF abstains gets the ``class_balance`` given to the constructor, else uniform.
* ``predict``: without a ``class_balance`` there is no prior to decide with, so a row no LF
  labels and a row whose most voted classes tie are **abstained** on (-1), as Snorkel's
  ``MajorityLabelVoter`` does by default. With a ``class_balance`` both get the likelier class
  under it (ties: among the tied classes, then the lowest index; ``tie_break="abstain"``
  abstains on ties whatever the balance).
* Nothing about the classes' shares is learned from the votes: with one-sided LFs the share of
  each class among the votes says how often each class's LFs *fire*, not how common the class
  is (three spam keyword LFs against one ham LF make "spam" the winner of most votes on a
  corpus that is 90% ham), so a prior learned from them would give every uncovered or tied row
  the wrong class.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from muppets.weak.base import LabelModelBase, majority_posteriors

__all__ = ["MajorityVote"]


class MajorityVote(LabelModelBase):
    """Majority vote with a stated rule for uncovered rows and ties (module docstring).

    >>> L = np.array([[0, 1, -1], [-1, -1, -1], [0, 0, 1]])
    >>> MajorityVote(2).fit(L).predict(L).tolist()
    [-1, -1, 0]
    >>> MajorityVote(2, class_balance=[0.2, 0.8]).fit(L).predict(L).tolist()
    [1, 1, 0]
    """

    learns_balance = False

    def fit(self, L: np.ndarray, lf_names: Sequence[str] | None = None) -> MajorityVote:
        """Nothing to learn: checks ``L`` and sets ``class_balance_`` (the given one, else
        uniform); ``lf_names`` as the other models take them."""
        self._check_fit(L, lf_names)
        uniform = np.full(self.cardinality, 1.0 / self.cardinality)
        self.class_balance_ = uniform if self.fixed_balance is None else self.fixed_balance
        return self

    def predict_proba(self, L: np.ndarray) -> np.ndarray:
        """``(n, K)`` vote shares of the tied-most-voted classes; the balance on empty rows."""
        return majority_posteriors(self._check(L), self.cardinality, self.fixed_balance)

    def predict(self, L: np.ndarray, tie_break: str = "prior") -> np.ndarray:
        """``(n,)`` the most voted class; -1 on empty and tied rows unless a balance was given."""
        if self.fixed_balance is None and tie_break == "prior":
            tie_break = "abstain"  # no prior to break a tie or fill an empty row with
        return super().predict(L, tie_break)
