"""Checks and small computations on label matrices shared by the analysis and the label models.

A label matrix ``L`` is ``(n, m)`` integers: ``L[i, j]`` is LF ``j``'s vote on example ``i``,
``-1`` (ABSTAIN) or a class index ``0..K-1``.
"""

from __future__ import annotations

import numpy as np

from muppets.errors import ConfigError

__all__ = ["check_label_matrix", "check_gold", "vote_counts", "one_hot_votes", "accuracy", "one_sided",
           "covered", "ONE_SIDED_ADVICE"]

ONE_SIDED_ADVICE = ("every LF votes one class only (one-sided LFs): the class balance is barely identifiable "
                    "from their agreements; give one from labelled data or domain knowledge "
                    "(--class-balance from:SPLIT or shares such as 0.9,0.1)")


def check_label_matrix(L: object, cardinality: int | None = None) -> np.ndarray:
    """``L`` as a 2-D int64 array; a :class:`ConfigError` naming the first bad entry if it is
    not integral, not 2-D, or holds a value outside ``{-1, 0..cardinality-1}``."""
    arr = np.asarray(L)
    if arr.ndim != 2:
        raise ConfigError(f"a label matrix must be 2-D (n examples, m LFs), got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and arr.size and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        elif arr.size:
            raise ConfigError(f"a label matrix holds integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    high = cardinality if cardinality is not None else np.iinfo(np.int64).max
    bad = (arr < -1) | (arr >= high)
    if bad.any():
        i, j = (int(v) for v in np.argwhere(bad)[0])
        classes = f"0..{cardinality - 1}" if cardinality is not None else "a class index"
        raise ConfigError(f"label matrix entry [{i}, {j}] = {arr[i, j]} is neither -1 (abstain) "
                          f"nor {classes}")
    return arr


def check_gold(Y: object, n: int, cardinality: int | None = None) -> np.ndarray:
    """Gold labels as a 1-D int64 array of length ``n`` (-1 = unknown)."""
    arr = np.asarray(Y).reshape(-1)
    if arr.shape[0] != n:
        raise ConfigError(f"{arr.shape[0]} gold labels for {n} label-matrix rows")
    return check_label_matrix(arr[:, None], cardinality)[:, 0]


def vote_counts(L: np.ndarray, cardinality: int) -> np.ndarray:
    """``(n, K)`` number of votes for each class in each row."""
    counts = np.zeros((L.shape[0], cardinality), dtype=np.int64)
    for k in range(cardinality):
        counts[:, k] = (L == k).sum(axis=1)
    return counts


def one_hot_votes(L: np.ndarray, cardinality: int) -> np.ndarray:
    """``(n, m, K)`` float64 indicators ``[L[i, j] == k]`` (all zero where LF ``j`` abstains)."""
    return (L[:, :, None] == np.arange(cardinality)[None, None, :]).astype(np.float64)


def accuracy(pred: np.ndarray, gold: np.ndarray) -> float:
    """Fraction of ``gold != -1`` rows where ``pred == gold`` (an abstained prediction, -1,
    counts as wrong: the denominator is every gold row)."""
    keep = gold != -1
    if not keep.any():
        raise ConfigError("no gold labels to score against")
    return float((pred[keep] == gold[keep]).mean())


def covered(L: np.ndarray) -> np.ndarray:
    """``(n,)`` bool: the rows some LF votes on (Snorkel's ``filter_unlabeled_dataframe`` keeps
    these).

    >>> covered(np.array([[-1, 1], [-1, -1]])).tolist()
    [True, False]
    """
    return (np.asarray(L) != -1).any(axis=1)


def one_sided(L: np.ndarray) -> bool:
    """True when every LF that votes at all votes one class only (and some LF votes): the case
    where a label model's learned class balance cannot be trusted (:data:`ONE_SIDED_ADVICE`)."""
    classes = [np.unique(column[column >= 0]) for column in L.T]
    voting = [c for c in classes if len(c)]
    return bool(voting) and all(len(c) == 1 for c in voting)
