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

__all__ = ["SPLIT_SALT", "hash_split"]

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
