"""Static word vectors (word2vec, NNLM embeddings, GloVe files) and the queries people run on them.

:class:`WordVectors` holds a vocabulary (most frequent word first, by convention) and a
``(V, d)`` float32 matrix, and answers like gensim's ``KeyedVectors``:

* ``similarity(a, b)`` = cos(a, b) = a·b / (|a| |b|);
* ``most_similar(positive, negative, topn)``: the words w maximising cos(w, m), where
  m = Σ_i s_i x̂_i / Σ_i |s_i| averages the unit vectors x̂ of the query words with sign s = +1
  (positive) or -1 (negative); the query words themselves are never returned;
* ``analogy(a, b, c)``: "a is to b as c is to ?" by 3CosAdd (Mikolov et al. 2013b,
  "Linguistic regularities"): argmax_w cos(w, b̂ - â + ĉ) over the ``restrict_vocab`` most
  frequent words (300,000 as gensim), excluding a, b and c.

Scores are computed in float32 as gensim does, so rankings agree with it. Files: ``save`` writes
the word2vec text or binary format and ``load`` reads those and GloVe text
(:mod:`muppets.interop.word2vec_format`).

>>> import numpy as np
>>> wv = WordVectors(["king", "queen", "man", "woman"],
...                  np.array([[1, 1, 0], [1, 0, 1], [0, 1, 0], [0, 0, 1]], dtype=np.float32))
>>> wv.analogy("man", "king", "woman", restrict_vocab=None)
'queen'
>>> round(wv.similarity("king", "queen"), 4)
0.5
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from functools import cached_property
from pathlib import Path

import numpy as np

from muppets.errors import DataError, UnknownWordError
from muppets.interop.word2vec_format import read_vectors, write_word2vec_format

__all__ = ["WordVectors"]

RESTRICT_VOCAB = 300_000  # analogies search the most frequent 300k words, as gensim
SUGGESTIONS = 3  # spellings an unknown word's error names
SUGGEST_AMONG = 100_000  # ...found among the most frequent words (difflib over millions would take seconds)


class WordVectors:
    """A vocabulary and its ``(V, d)`` vectors; row ``i`` belongs to ``words[i]``."""

    def __init__(self, words: Sequence[str], vectors: np.ndarray,
                 counts: Sequence[int] | None = None) -> None:
        matrix = np.ascontiguousarray(vectors, dtype=np.float32)
        if matrix.ndim != 2 or matrix.shape[0] != len(words):
            raise DataError(f"{len(words)} words but a vector matrix of shape {matrix.shape}")
        self.words = list(words)
        self.vectors = matrix  # (V, d)
        self.counts = None if counts is None else np.asarray(counts, dtype=np.int64)  # (V,)
        self.index = {}
        for i, word in enumerate(self.words):
            self.index.setdefault(word, i)  # a repeated word answers with its first row

    # ------------------------------------------------------------------ lookup
    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: object) -> bool:
        return word in self.index

    def __getitem__(self, word: str) -> np.ndarray:
        """(d,) the vector of ``word``."""
        return self.vectors[self.get_index(word)]

    def get_index(self, word: str) -> int:
        """Row of ``word``; an unknown word raises :class:`~muppets.errors.UnknownWordError`
        (a ``KeyError``) naming its nearest spellings."""
        try:
            return self.index[word]
        except KeyError:
            raise UnknownWordError(self._unknown_message(word), word=word) from None

    @cached_property
    def lowercased(self) -> bool:
        """Whether every word is in lower case (vectors trained on lower-cased text)."""
        return all(w == w.lower() for w in self.words)

    def suggestions(self, word: str, n: int = SUGGESTIONS) -> list[str]:
        """Up to ``n`` words of the vocabulary spelt most like ``word`` (case ignored; difflib's
        ratio, at least 0.6), best first; the same word in other case comes first.

        >>> WordVectors(["king", "kings", "queen"], np.eye(3)).suggestions("King")
        ['king', 'kings']
        """
        folded = word.lower()
        same = [w for w in self.words[:SUGGEST_AMONG] if w.lower() == folded and w != word]
        near = [w for w in self.words[:SUGGEST_AMONG] if abs(len(w) - len(word)) <= 3 and w not in same]
        by_fold: dict[str, str] = {}
        for w in near:
            by_fold.setdefault(w.lower(), w)  # the most frequent spelling of each folded form
        close = difflib.get_close_matches(folded, list(by_fold), n=n)
        return (same + [by_fold[c] for c in close if by_fold[c] not in same])[:n]

    def _unknown_message(self, word: str) -> str:
        text = f"{word!r} is not among the {len(self):,} words of these vectors"
        lower = word.lower()
        if lower != word and lower in self.index and self.lowercased:
            text += f"; they are lower-cased: try {lower!r}"
        found = self.suggestions(word)
        text += f" (nearest spellings: {', '.join(map(repr, found))})" if found else " (no word spelt like it)"
        return text

    @property
    def vector_size(self) -> int:
        return int(self.vectors.shape[1])

    @cached_property
    def norms(self) -> np.ndarray:
        """(V,) float32 Euclidean length of every vector (zero rows get 1 to avoid 0/0)."""
        norms = np.linalg.norm(self.vectors, axis=1)
        return np.where(norms > 0, norms, np.float32(1.0)).astype(np.float32)

    def unit(self, word: str) -> np.ndarray:
        """(d,) ``word``'s vector scaled to length 1."""
        i = self.get_index(word)
        return self.vectors[i] / self.norms[i]

    # ------------------------------------------------------------------ queries
    def similarity(self, a: str, b: str) -> float:
        """cos(a, b)."""
        return float(np.dot(self.unit(a), self.unit(b)))

    def most_similar(self, positive: str | Iterable[str] | None = None,
                     negative: str | Iterable[str] | None = None, topn: int = 10,
                     restrict_vocab: int | None = None) -> list[tuple[str, float]]:
        """The ``topn`` words closest (cosine) to the signed mean of the query words' unit
        vectors, among the first ``restrict_vocab`` words (all when None), query words excluded."""
        pos, neg = _as_list(positive), _as_list(negative)
        if not pos and not neg:
            raise ValueError("most_similar needs at least one positive or negative word")
        query = sum((self.unit(w) for w in pos), np.zeros(self.vector_size, np.float32))
        query = query - sum((self.unit(w) for w in neg), np.zeros(self.vector_size, np.float32))
        scores = self.cosines(query[None, :], restrict_vocab)[0]  # (R,)
        exclude = {self.get_index(w) for w in pos + neg}
        order = _top_indices(scores, topn + len(exclude))
        return [(self.words[i], float(scores[i])) for i in order if i not in exclude][:topn]

    def analogy(self, a: str, b: str, c: str, restrict_vocab: int | None = RESTRICT_VOCAB) -> str:
        """3CosAdd: the word w (not a, b or c) maximising cos(w, b̂ - â + ĉ) — "``a`` is to ``b``
        as ``c`` is to w" — among the ``restrict_vocab`` most frequent words."""
        return self.most_similar(positive=[b, c], negative=[a], topn=1, restrict_vocab=restrict_vocab)[0][0]

    def cosines(self, queries: np.ndarray, restrict_vocab: int | None = None) -> np.ndarray:
        """(Q, R) cos between each query row (Q, d) and the first R = ``restrict_vocab`` words,
        up to a positive factor per query (rankings are exact; values are exact for unit queries).
        """
        rows = slice(0, restrict_vocab or len(self))
        queries = np.asarray(queries, dtype=np.float32)
        lengths = np.linalg.norm(queries, axis=1, keepdims=True)
        queries = queries / np.where(lengths > 0, lengths, np.float32(1.0))
        return (queries @ self.vectors[rows].T) / self.norms[rows]  # (Q, R)

    # ------------------------------------------------------------------ files
    def save(self, path: str | Path, binary: bool = True) -> Path:
        """Write the word2vec binary (default) or text format, gensim-compatible."""
        return write_word2vec_format(path, self.words, self.vectors, binary=binary)

    @classmethod
    def load(cls, path: str | Path, fmt: str = "auto", limit: int | None = None) -> WordVectors:
        """Read word2vec text/binary or GloVe text (``fmt="auto"`` sniffs the first lines)."""
        words, vectors = read_vectors(path, fmt=fmt, limit=limit)
        return cls(words, vectors)

    def __repr__(self) -> str:
        return f"WordVectors(words={len(self)}, dim={self.vector_size})"


def _as_list(words: str | Iterable[str] | None) -> list[str]:
    if words is None:
        return []
    return [words] if isinstance(words, str) else list(words)


def _top_indices(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest ``scores``, best first."""
    k = min(k, len(scores))
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    part = np.argpartition(-scores, k - 1)[:k]
    return part[np.argsort(-scores[part], kind="stable")]
