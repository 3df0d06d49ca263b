"""A Snorkel-style label model: LF accuracies and class balance learned from agreements alone.

The model is the one of Ratner et al. (2019, "Training Complex Models with Multi-Task Weak
Supervision"; Snorkel's ``LabelModel``): a latent class ``Y ~ pi`` and conditionally independent
LFs, LF ``j`` outputting ``o`` given ``Y = y`` with probability ``theta[j, y, o]`` (outcome 0 =
abstain, ``1 + k`` = votes class k). Like Snorkel it is fitted by the method of moments,
matching the observed first and second moments of the votes, with ``A[i, (j, l)] = [L_ij = l]``:

    O1 = mean_i A[i]              ≈  M1 = mu @ pi                       (vote rates)
    O2 = mean_i A[i]^T A[i]       ≈  M2 = mu diag(pi) mu^T  (j != k)    (agreements/conflicts)

where ``mu[(j, l), y] = theta[j, y, 1 + l]``. The loss is the squared error of both (the
same-LF blocks of ``O2`` are masked out: they hold no information about the agreement).

What differs from Snorkel 0.10's ``LabelModel``, each against a failure its users report:

* **Start from majority vote, not from a fixed prior** (``prec_init = 0.7`` for every LF): the
  first parameters are the confusion counts of the majority-vote labels, so the fit starts in
  the basin where LFs beat random (#1422: equal probabilities or an inverted LF; #1073, #1713:
  losing to majority vote).
* **Class balance learned** jointly (Snorkel assumes uniform unless told); pass
  ``class_balance`` to fix it. With dependent LFs the learned balance is biased towards the
  class whose LFs fire together; where a few labelled examples exist, their label shares
  (``muppets weak label --class-balance from:dev``) are the better prior.
* **Probabilities by construction** (a softmax per LF and class) and a full-batch
  quasi-Newton solver (L-BFGS, float64): no learning rate, epochs or seed to tune; the fit is a
  deterministic function of ``L``.
* **Identifiability guard**: :func:`~muppets.weak.base.align_classes` maps latent classes to
  labels so that the LFs beat random per class (class-conditional vote rates, not weighted
  by the balance; a fixed ``class_balance`` is never reordered).
* **Every LF better than random** (``better_than_random=True``): for each LF ``j`` and each
  class ``l``, ``P(LF j votes l | Y = l) >= P(LF j votes l | Y = y)`` for every other ``y``,
  held by a squared-hinge penalty of weight ``penalty``. Under the independence assumption
  an LF that rarely fires with the others of its class (links are posted alone) can fit the
  moments better inverted — the failure of #1422 — and the assumption the whole method rests
  on says it is not.
* **Abstains as evidence is an option** (``abstain_evidence``, off by default): the model's
  exact posterior also multiplies in ``P(abstain | y)`` for every silent LF; Snorkel drops that
  factor, and so do we by default, because LFs' *firing* is the part least conditionally
  independent in practice (spam LFs fire together: "check out my channel, please subscribe"),
  and many silent LFs then add up to an overconfident vote. On the spam tutorial's valid
  split it cost 15 points (``benchmarks/weak_spam.py``).

``l2`` pulls ``theta`` towards the majority-vote start (Snorkel's ``l2`` does the same towards
its own start); ``clip`` floors every probability used in the posterior (Snorkel clips to
[0.01, 0.99]).

What it does not fix: like Snorkel's, the model assumes conditionally independent LFs. When
they are not (the spam tutorial's one-sided keyword LFs), the learned class balance and LF
accuracies are biased and majority vote can win: on the tutorial's 7 deterministic LFs, on
the 206 test comments some LF labels, majority vote is right on 95.1%, Snorkel's LabelModel
on 92.7%, this model on 91.7% (``benchmarks/results/weak_spam.json``). Modelling LF
dependencies is the next step. Until then :meth:`LabelModel.fit` measures how far the
agreements are from independence: ``fit_residual_`` is the relative residual of the fitted
second moments, ``||M2 - O2|| / ||O2||`` over the LF pairs, and ``worst_pair_`` the two LFs
whose co-votes the fit misses most (a place to look, not proof that these two are the
dependent ones: a duplicated LF is absorbed as a very accurate one and the misfit shows
elsewhere). Above ``DEPENDENCE_WARNING`` it logs a warning that
majority vote may do better. The threshold: on synthetic independent LFs the residual is
0.02-0.05 (1,586 to 5,000 rows); on the spam tutorial's LFs it is 0.31, and 0.51 on
synthetic spam that uses one of three tricks per comment (``tests/test_weak_label_models.py``).

The same dependence can make an accurate LF count for nothing, which ``fit`` reports by name
(:func:`~muppets.weak.base.no_evidence`). On the spam tutorial's train split ``keyword_http`` is
right on 178 of its 189 votes, yet the fit gives it ``P(vote spam | spam) = P(vote spam | ham) =
0.117``, so the 59 comments only it votes on get P(spam) = 0.31, the learned balance, as the 424
without a vote do. Its co-votes explain it: from the LFs' true rates, independence predicts 11×
the co-votes with ``keyword_subscribe`` and 6× those with ``regex_check_out`` that occur (a link
comment seldom also asks to subscribe or says "check out"), and 0.4× those with the ham LF
``short_comment`` (a bare link is short). Read through independence, that is not a spam LF:
without the better-than-random penalty the fit inverts it (P(spam) = 0.18 under a prior of 0.34),
as Snorkel's ``LabelModel`` does (0.33 under its prior of 0.5). ``l2 = 0.1`` (towards the
majority-vote start) gives those comments 0.66; majority vote counts the vote in full.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import torch

from muppets.errors import ConfigError
from muppets.weak.base import (LabelModelBase, majority_posteriors, model_moments,
                               outcome_one_hot, posterior, vote_moments)
from muppets.weak.dawid_skene import confusion_from_posteriors

__all__ = ["LabelModel", "DEPENDENCE_WARNING"]

logger = logging.getLogger(__name__)

DEPENDENCE_WARNING = 0.15  # relative second-moment residual above which fit() warns


def _moments(outcomes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``O1 (d,)``, ``O2 (d, d)`` (:func:`~muppets.weak.base.vote_moments`) and the off-block
    mask ``(d, d)``, ``d = m * K``."""
    _, m, k1 = outcomes.shape
    lf_of = np.repeat(np.arange(m), k1 - 1)
    return (*vote_moments(outcomes), lf_of[:, None] != lf_of[None, :])


def _worse_than_random(theta: torch.Tensor) -> torch.Tensor:
    """Squared hinge of ``P(vote l | Y = y) - P(vote l | Y = l)`` over LFs, classes l and
    y != l (zero when every LF votes each class most often when it is the truth)."""
    votes = theta[:, :, 1:]  # (m, K_true, K_voted)
    own = torch.diagonal(votes, dim1=1, dim2=2)  # (m, K): P(vote l | Y = l)
    return (torch.relu(votes - own[:, None, :]) ** 2).sum()


class LabelModel(LabelModelBase):
    """LF accuracies and class balance from agreements (see the module docstring).

    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 2, 2000)
    >>> votes = np.where(rng.random((2000, 5)) < 0.8, y[:, None], 1 - y[:, None])
    >>> L = np.where(rng.random((2000, 5)) < 0.6, votes, -1)
    >>> round(LabelModel(2).fit(L).score(L, y), 2) > 0.85
    True
    """

    def __init__(self, cardinality: int = 2, *, l2: float = 0.0, max_iter: int = 100,
                 class_balance: np.ndarray | None = None, abstain_evidence: bool = False,
                 better_than_random: bool = True, penalty: float = 100.0,
                 clip: float = 0.01) -> None:
        super().__init__(cardinality, class_balance)
        if l2 < 0 or max_iter < 1 or not 0 <= clip < 0.5:
            raise ConfigError(f"LabelModel: need l2 >= 0, max_iter >= 1, 0 <= clip < 0.5; got "
                              f"{l2}, {max_iter}, {clip}")
        self.l2, self.max_iter, self.clip = l2, max_iter, clip
        self.abstain_evidence = abstain_evidence
        self.penalty = penalty if better_than_random else 0.0
        self.theta_: np.ndarray | None = None  # (m, K, K+1) P(outcome | class)
        self.loss_: float | None = None
        self.fit_residual_: float | None = None  # ||M2 - O2|| / ||O2|| over LF pairs
        self.worst_pair_: tuple[int, int] | None = None  # the LF pair whose co-votes fit worst

    def fit(self, L: np.ndarray, lf_names: Sequence[str] | None = None) -> LabelModel:
        """Match the moments of ``L`` (n, m) from the majority-vote start; ``lf_names`` (m)
        name the LFs in messages."""
        L = self._check_fit(L, lf_names)
        outcomes = outcome_one_hot(L, self.cardinality)
        theta0, pi0 = confusion_from_posteriors(
            outcomes, majority_posteriors(L, self.cardinality), smoothing=1.0)
        if self.fixed_balance is not None:
            pi0 = self.fixed_balance
        theta, pi = self._solve(outcomes, theta0, pi0)
        if self.fixed_balance is not None:
            pi = self.fixed_balance  # exactly as given (softmax of its log rounds it)
        self.theta_, self.class_balance_ = self._align(theta, pi)
        self._check_independence(outcomes)
        self._report_evidence(L, outcomes)
        return self

    def _check_independence(self, outcomes: np.ndarray) -> None:
        """Set ``fit_residual_`` and ``worst_pair_``; warn above DEPENDENCE_WARNING."""
        _, o2, mask = _moments(outcomes)
        m, K = self.theta_.shape[:2]
        residual = np.where(mask, model_moments(self.theta_, self.class_balance_) - o2, 0.0)  # (d, d)
        scale = np.sqrt((np.where(mask, o2, 0.0) ** 2).sum())
        self.fit_residual_ = float(np.sqrt((residual ** 2).sum()) / scale) if scale > 0 else 0.0
        per_pair = np.abs(residual).reshape(m, K, m, K).sum(axis=(1, 3))  # (m, m)
        j, k = np.unravel_index(np.argmax(per_pair), per_pair.shape)
        self.worst_pair_ = (int(min(j, k)), int(max(j, k)))
        if self.fit_residual_ > DEPENDENCE_WARNING:
            logger.warning(
                "label model: the LFs' agreements fit the independence model poorly (relative "
                "residual %.2f > %.2f; largest misfit: %s and %s); majority vote may do "
                "better — look for LFs that fire together or exclude each other", self.fit_residual_, DEPENDENCE_WARNING,
                *(self.lf_names_[j] for j in self.worst_pair_))

    def _solve(self, outcomes: np.ndarray, theta0: np.ndarray, pi0: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
        """L-BFGS on the moment loss over softmax logits of ``theta`` (and ``pi``)."""
        o1, o2, mask = (torch.from_numpy(a) for a in _moments(outcomes))
        start = torch.from_numpy(theta0)
        logits = torch.log(start).clone().requires_grad_(True)  # (m, K, K+1)
        balance_logits = torch.log(torch.from_numpy(pi0)).clone()
        params = [logits]
        if self.fixed_balance is None:
            params.append(balance_logits.requires_grad_(True))
        m, K = theta0.shape[:2]

        def loss_fn() -> torch.Tensor:
            theta = torch.softmax(logits, dim=-1)
            pi = torch.softmax(balance_logits, dim=-1)
            mu = theta[:, :, 1:].permute(0, 2, 1).reshape(m * K, K)  # (d, K): [(j, l), y]
            second = (mu * pi) @ mu.T  # (d, d)
            loss = ((second - o2)[mask] ** 2).sum() + ((mu @ pi - o1) ** 2).sum()
            return (loss + self.l2 * ((theta - start) ** 2).sum()
                    + self.penalty * _worse_than_random(theta))

        optimizer = torch.optim.LBFGS(params, lr=1.0, max_iter=self.max_iter,
                                      tolerance_grad=1e-10, tolerance_change=1e-13,
                                      history_size=20, line_search_fn="strong_wolfe")

        def closure() -> torch.Tensor:
            optimizer.zero_grad()
            loss = loss_fn()
            loss.backward()
            return loss

        optimizer.step(closure)
        with torch.no_grad():
            self.loss_ = float(loss_fn())
            return (torch.softmax(logits, -1).numpy().copy(),
                    torch.softmax(balance_logits, -1).numpy().copy())

    def predict_proba(self, L: np.ndarray) -> np.ndarray:
        """``(n, K)`` posterior P(Y | outcomes) with probabilities floored at ``clip``."""
        outcomes = self._fitted_outcomes(L, self.theta_)
        return posterior(np.log(self.class_balance_), np.log(np.maximum(self.theta_, self.clip)),
                         outcomes, self.abstain_evidence)
