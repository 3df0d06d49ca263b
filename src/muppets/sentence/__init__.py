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

from muppets.sentence.head import SentenceHead, keep_sentence_files, read_head, write_head
from muppets.sentence.pooling import MODES

__all__ = ["MODES", "SentenceHead", "keep_sentence_files", "read_head", "write_head"]
