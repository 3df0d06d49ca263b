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

__all__ = ["SPLIT_SALT", "hash_split", "stratified_split"]

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
