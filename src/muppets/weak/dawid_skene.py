"""Dawid & Skene (1979): EM for a latent true class with one confusion matrix per LF.

Model: ``Y ~ Categorical(pi)``; given ``Y = y`` the LFs are independent and LF ``j`` outputs
``o`` with probability ``theta[j, y, o]``, where the outcomes are ``o = 0`` (abstain) and
``1 + k`` (votes class k). Abstaining is an outcome like any other, so an LF that only ever
votes SPAM is informative through *when* it fires (``theta[j, spam, 1+spam]`` vs
``theta[j, ham, 1+spam]``) — ignoring abstains would make every such LF look perfectly
uninformative.

EM from majority vote: the first M-step uses the majority-vote posteriors (ties split, empty
rows uniform); every M-step adds ``smoothing`` pseudo-counts to each confusion cell and to
each class count (a symmetric Dirichlet MAP, which keeps rare outcomes off zero). Iterates
until the largest parameter change is below ``tol``. No randomness: the seed is not needed.
A ``class_balance`` given to the constructor is kept fixed through EM (``pi`` is not
re-estimated).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from muppets.errors import ConfigError
from muppets.weak.base import (LabelModelBase, majority_posteriors,
                               outcome_one_hot, posterior)

__all__ = ["DawidSkene", "confusion_from_posteriors"]

logger = logging.getLogger(__name__)


def confusion_from_posteriors(outcomes: np.ndarray, q: np.ndarray, smoothing: float
                              ) -> tuple[np.ndarray, np.ndarray]:
    """M-step: ``theta (m, K, K+1)`` and ``pi (K,)`` from soft labels ``q (n, K)`` and
    outcome indicators ``(n, m, K+1)``, with ``smoothing`` pseudo-counts."""
    n, m, k1 = outcomes.shape
    flat = q.T @ outcomes.reshape(n, m * k1)  # (K, m*(K+1))
    counts = flat.reshape(-1, m, k1).transpose(1, 0, 2) + smoothing  # (m, K, K+1)
    theta = np.ascontiguousarray(counts / counts.sum(axis=2, keepdims=True))
    pi = (q.sum(axis=0) + smoothing) / (q.shape[0] + smoothing * q.shape[1])
    return theta, pi


class DawidSkene(LabelModelBase):
    """EM over per-LF confusion matrices (see the module docstring).

    >>> L = np.array([[1, 1, -1], [1, 1, 0], [0, 0, 0], [-1, 1, 1]] * 5)
    >>> DawidSkene(2).fit(L).predict(L[:4]).tolist()
    [1, 1, 0, 1]
    """

    def __init__(self, cardinality: int = 2, smoothing: float = 1.0, max_iter: int = 200,
                 tol: float = 1e-6, class_balance: np.ndarray | None = None) -> None:
        super().__init__(cardinality, class_balance)
        if smoothing < 0 or max_iter < 1 or tol <= 0:
            raise ConfigError(f"DawidSkene: need smoothing >= 0, max_iter >= 1, tol > 0; got "
                              f"{smoothing}, {max_iter}, {tol}")
        self.smoothing, self.max_iter, self.tol = smoothing, max_iter, tol
        self.theta_: np.ndarray | None = None  # (m, K, K+1) P(outcome | class)
        self.n_iter_ = 0

    def fit(self, L: np.ndarray, lf_names: Sequence[str] | None = None) -> DawidSkene:
        """EM on ``L`` (n, m); see the module docstring. ``lf_names`` (m) name the LFs in
        messages."""
        L = self._check_fit(L, lf_names)
        outcomes = outcome_one_hot(L, self.cardinality)
        theta, pi = self._m_step(outcomes, majority_posteriors(L, self.cardinality))
        for step in range(1, self.max_iter + 1):
            q = posterior(np.log(pi), np.log(theta), outcomes)  # E-step, (n, K)
            new_theta, new_pi = self._m_step(outcomes, q)
            change = max(np.abs(new_theta - theta).max(), np.abs(new_pi - pi).max())
            theta, pi, self.n_iter_ = new_theta, new_pi, step
            if change < self.tol:
                break
        else:
            logger.info("Dawid-Skene: stopped after %d EM steps (last change %.2e)", step, change)
        self.theta_, self.class_balance_ = self._align(theta, pi)
        self._report_evidence(L, outcomes)
        return self

    def _m_step(self, outcomes: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``theta`` and ``pi`` from soft labels ``q``; a fixed class balance stays as given."""
        theta, pi = confusion_from_posteriors(outcomes, q, self.smoothing)
        return theta, (pi if self.fixed_balance is None else self.fixed_balance)

    def predict_proba(self, L: np.ndarray) -> np.ndarray:
        """``(n, K)`` P(Y | the LFs' outcomes, abstains included)."""
        outcomes = self._fitted_outcomes(L, self.theta_)
        return posterior(np.log(self.class_balance_), np.log(self.theta_), outcomes)
