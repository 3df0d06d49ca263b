"""Sentence-level modules: pooling, dense, normalize — sentence-transformers' ``modules.json``
layout, read and written in one place.

- :mod:`~muppets.sentence.pooling`: the pooling modes (cls, mean, max, mean_sqrt_len,
  weighted_mean, last);
- :mod:`~muppets.sentence.modules`: the table of module kinds (Transformer, Pooling, Dense,
  Normalize), each read from its folder into a torch module that writes it back; a kind not in
  the table is refused by name;
- :mod:`~muppets.sentence.head`: a directory's :class:`SentenceHead` (the modules after its
  Transformer), read, written, and kept through continued pretraining and fine-tuning;
- :mod:`~muppets.sentence.encode`: texts -> sentence vectors in process, and
  ``muppets export sentence-transformers``.
"""

from __future__ import annotations

import importlib
from typing import Any

from muppets.sentence.names import MODES

_HOME = {"SentenceHead": "head", "keep_sentence_files": "head", "read_head": "head", "write_head": "head"}

__all__ = ["MODES", *_HOME]


def __getattr__(name: str) -> Any:  # torch is imported only when a module of torch code is asked for
    if name in _HOME:
        return getattr(importlib.import_module(f"muppets.sentence.{_HOME[name]}"), name)
    raise AttributeError(f"module 'muppets.sentence' has no attribute {name!r}")
