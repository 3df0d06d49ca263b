"""Deterministic train/dev splits for datasets that ship as a single file.

A record goes to the held-out side when the MD5 of ``"<salt>:<key>"`` is among the
``round(fraction * n)`` smallest. This depends only on the keys (not on numpy's or Python's
random generators, nor on the file order), so the split is the same on every machine and
version, and records with the same key in parallel files (XNLI languages) land on the same side.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TypeVar

import numpy as np

__all__ = ["SPLIT_SALT", "hash_split", "stratified_split", "legacy_stratified_shuffle_split"]

T = TypeVar("T")

SPLIT_SALT = "muppets-split-v1"  # changing it changes every derived split


def _rank(key: str, salt: str) -> bytes:
    return hashlib.md5(f"{salt}:{key}".encode("utf-8")).digest()


def hash_split(items: Sequence[T], keys: Sequence[str], fraction: float,
               salt: str = SPLIT_SALT) -> tuple[list[T], list[T]]:
    """Split ``items`` into ``(kept, held_out)`` with ``round(fraction * n)`` held out.

    Both lists keep the input order.

    >>> hash_split(list("abcdefghij"), [str(i) for i in range(10)], 0.2)[1]
    ['d', 'i']
    """
    assert len(items) == len(keys), "one key per item"
    n_held = round(fraction * len(items))
    order = sorted(range(len(items)), key=lambda i: _rank(keys[i], salt))
    held = set(order[:n_held])
    kept = [item for i, item in enumerate(items) if i not in held]
    return kept, [item for i, item in enumerate(items) if i in held]


def stratified_split(strata: Sequence[str], fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Indices ``(kept, held_out)``: ``max(1, round(fraction * n))`` items held out, shared
    among the strata in proportion to their sizes (largest remainders get the rounding), each
    stratum's drawn with a generator seeded by ``seed``; both lists sorted.

    Strata keep their shares on both sides (a label's 10% goes to the held-out side), so a small
    held-out slice of a skewed task still holds every label it can.

    >>> stratified_split(["a"] * 6 + ["b"] * 4, 0.5, seed=0)[1]
    [1, 3, 5, 6, 7]
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"held-out fraction must be in (0, 1), got {fraction}")
    names = sorted(set(strata))
    members = [np.array([i for i, s in enumerate(strata) if s == name], dtype=np.int64) for name in names]
    exact = np.array([fraction * len(m) for m in members])
    quota = np.floor(exact).astype(np.int64)
    extra = max(1, round(fraction * len(strata))) - int(quota.sum())
    for k in np.argsort(-(exact - quota), kind="stable")[:max(extra, 0)]:
        quota[k] += 1
    rng = np.random.default_rng([seed, 29])
    held = sorted(i for m, q in zip(members, quota) for i in rng.permutation(m)[:q].tolist())
    held_set = set(held)
    return [i for i in range(len(strata)) if i not in held_set], held


def _apportion(counts: np.ndarray, n_draws: int, rng: np.random.RandomState) -> np.ndarray:
    """Share ``n_draws`` among classes of sizes ``counts``: floors of the proportional shares,
    then one more for the largest fractional parts, equal fractions drawn at random from
    ``rng`` (the rule of scikit-learn's ``_approximate_mode``)."""
    exact = counts / counts.sum() * n_draws
    shares = np.floor(exact)
    missing = n_draws - int(shares.sum())
    fractions = exact - shares
    for value in np.sort(np.unique(fractions))[::-1]:
        if missing <= 0:
            break
        (candidates,) = np.where(fractions == value)
        take = min(len(candidates), missing)
        shares[rng.choice(candidates, size=take, replace=False)] += 1
        missing -= take
    return shares.astype(int)


def legacy_stratified_shuffle_split(labels: Sequence[object], n_test: int,
                                    seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions ``(train, test)`` exactly as scikit-learn's
    ``train_test_split(range(n), test_size=n_test, stratify=labels, random_state=seed)``
    draws them (``StratifiedShuffleSplit`` on a legacy ``numpy.random.RandomState``), for
    reproducing published splits such as Snorkel's spam tutorial without scikit-learn at
    runtime; ``tests/test_weak_spam_split.py`` checks it against scikit-learn.

    Per class (in sorted label order): a permutation of its positions, the first share to
    train and the next to test; then each side is shuffled.
    """
    classes, inverse = np.unique(np.asarray(labels), return_inverse=True)
    counts = np.bincount(inverse)
    n_train = len(inverse) - n_test
    if not 0 < n_test < len(inverse) or n_train < len(classes) or n_test < len(classes):
        raise ValueError(f"cannot split {len(inverse)} items of {len(classes)} classes "
                         f"into {n_train} train / {n_test} test")
    members = np.split(np.argsort(inverse, kind="mergesort"), np.cumsum(counts)[:-1])
    rng = np.random.RandomState(seed)
    train_shares = _apportion(counts, n_train, rng)
    test_shares = _apportion(counts - train_shares, n_test, rng)
    train: list[int] = []
    test: list[int] = []
    for k in range(len(classes)):
        order = members[k].take(rng.permutation(counts[k]), mode="clip")
        train.extend(order[:train_shares[k]])
        test.extend(order[train_shares[k]: train_shares[k] + test_shares[k]])
    return rng.permutation(train), rng.permutation(test)
