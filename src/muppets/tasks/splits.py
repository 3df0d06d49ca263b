"""Deterministic train/dev splits for datasets that ship as a single file.

A record goes to the held-out side when the MD5 of ``"<salt>:<key>"`` is among the
``round(fraction * n)`` smallest. This depends only on the keys (not on numpy's or Python's
random generators, nor on the file order), so the split is the same on every machine and
version, and records with the same key in parallel files (XNLI languages) land on the same side.

**Groups.** Records that must not be separated (the three hypotheses of one XNLI premise, PAWS-X
pairs that reuse a sentence: :func:`connected_groups`) are split as whole groups by both
:func:`hash_split` and :func:`stratified_split` (``groups=``): a group is a unit, taken whole
while that brings the held-out count closer to its target (:func:`_take_whole`), so the sizes are
within half a group of the ungrouped ones. Without ``groups`` every record is its own group,
and the splits are exactly the ungrouped ones.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Iterable, Sequence
from typing import TypeVar

import numpy as np

__all__ = ["SPLIT_SALT", "connected_groups", "hash_split", "stratified_split", "legacy_stratified_shuffle_split"]

T = TypeVar("T")

SPLIT_SALT = "muppets-split-v1"  # changing it changes every derived split


def _rank(key: str, salt: str) -> bytes:
    return hashlib.md5(f"{salt}:{key}".encode("utf-8")).digest()


def connected_groups(keys: Sequence[Iterable[Hashable | None]]) -> list[int]:
    """The group of each item, given each item's keys (``None`` ignored): items that share a
    key, directly or through other items, form one group, numbered by its first item.

    >>> connected_groups([("a", "b"), ("c", None), ("b", "d"), ("d", "e"), ("c", "f")])
    [0, 1, 0, 0, 1]
    """
    parent = list(range(len(keys)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[Hashable, int] = {}
    for i, item_keys in enumerate(keys):
        for key in item_keys:
            if key is None:
                continue
            if key in first:
                a, b = root(i), root(first[key])
                parent[max(a, b)] = min(a, b)
            else:
                first[key] = i
    return [root(i) for i in range(len(keys))]


def _members(n: int, groups: Sequence[Hashable] | None) -> list[list[int]]:
    """The items of each group (all of them singletons without ``groups``), groups in the order
    of their first item."""
    if groups is None:
        return [[i] for i in range(n)]
    assert len(groups) == n, "one group per item"
    by_group: dict[Hashable, list[int]] = {}
    for i, g in enumerate(groups):
        by_group.setdefault(g, []).append(i)
    return list(by_group.values())


def _take_whole(units: Sequence[list[int]], target: int) -> list[int]:
    """Go through ``units`` (lists of items) in order and take each whole while that brings the
    count taken closer to ``target`` (a unit that would overshoot by more than it falls short is
    passed over); with single items: the first ``target``."""
    taken: list[int] = []
    for unit in units:
        if len(taken) >= target:
            break
        if len(taken) + len(unit) - target < target - len(taken):
            taken.extend(unit)
    return taken


def hash_split(items: Sequence[T], keys: Sequence[str], fraction: float,
               salt: str = SPLIT_SALT, groups: Sequence[Hashable] | None = None) -> tuple[list[T], list[T]]:
    """Split ``items`` into ``(kept, held_out)`` with ``round(fraction * n)`` held out.

    With ``groups`` (one per item), each group goes whole to one side: groups are ranked by
    their smallest member rank and taken as :func:`_take_whole` says, so about
    ``round(fraction * n)`` (within half the largest group) are held out. Both lists keep the
    input order.

    >>> hash_split(list("abcdefghij"), [str(i) for i in range(10)], 0.2)[1]
    ['d', 'i']
    >>> hash_split(list("abcdefghij"), [str(i) for i in range(10)], 0.2, groups=[0, 0, 1, 1, 2, 2, 3, 3, 4, 4])[1]
    ['c', 'd']
    """
    assert len(items) == len(keys), "one key per item"
    n_held = round(fraction * len(items))
    units = sorted(_members(len(items), groups), key=lambda unit: min(_rank(keys[i], salt) for i in unit))
    held = set(_take_whole(units, n_held))
    kept = [item for i, item in enumerate(items) if i not in held]
    return kept, [item for i, item in enumerate(items) if i in held]


def stratified_split(strata: Sequence[str], fraction: float, seed: int,
                     groups: Sequence[Hashable] | None = None) -> tuple[list[int], list[int]]:
    """Indices ``(kept, held_out)``: ``max(1, round(fraction * n))`` items held out, shared
    among the strata in proportion to their sizes (largest remainders get the rounding), each
    stratum's drawn with a generator seeded by ``seed``; both lists sorted.

    Strata keep their shares on both sides (a label's 10% goes to the held-out side), so a small
    held-out slice of a skewed task still holds every label it can. With ``groups`` (one per
    item) the units drawn are whole groups, a group's stratum being the set of its items' strata
    (an XNLI premise group: all three labels), taken as :func:`_take_whole` says.

    >>> stratified_split(["a"] * 6 + ["b"] * 4, 0.5, seed=0)[1]
    [1, 3, 5, 6, 7]
    >>> stratified_split(["a", "b"] * 5, 0.4, seed=0, groups=[0, 0, 1, 1, 2, 2, 3, 3, 4, 4])[1]
    [6, 7, 8, 9]
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"held-out fraction must be in (0, 1), got {fraction}")
    units = _members(len(strata), groups)
    unit_strata = ["|".join(sorted({strata[i] for i in unit})) for unit in units]
    names = sorted(set(unit_strata))
    members = [np.array([u for u, s in enumerate(unit_strata) if s == name], dtype=np.int64) for name in names]
    exact = np.array([fraction * sum(len(units[u]) for u in m) for m in members])
    quota = np.floor(exact).astype(np.int64)
    extra = max(1, round(fraction * len(strata))) - int(quota.sum())
    for k in np.argsort(-(exact - quota), kind="stable")[:max(extra, 0)]:
        quota[k] += 1
    rng = np.random.default_rng([seed, 29])
    held = sorted(i for m, q in zip(members, quota)
                  for i in _take_whole([units[u] for u in rng.permutation(m).tolist()], int(q)))
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
