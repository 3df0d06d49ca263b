"""Polysemy, measured: a static vector gives "bank" one point; a contextual one moves with the sense.

The project ships a sense-labelled sentence set (``muppets/data/polysemy_senses.tsv``: ``word``,
``sense``, ``sentence``; 8 ambiguous words — bank, apple, bat, plant, spring, crane, bass, match —
two senses each, 10 natural sentences per sense, the word exactly once per sentence). For every
occurrence the target word's vector is taken from each layer of a model
(:mod:`muppets.transfer.embed`), and per word and layer:

* ``nn_accuracy`` — leave-one-out nearest-neighbour sense accuracy (cosine): each occurrence
  takes the sense of its most similar other occurrence. Ties count as a uniform pick among the
  tied neighbours, so a static model, whose occurrences are all one point, scores the chance
  rate ``(n_s − 1) / (n − 1)`` rather than an arbitrary 0 or 1;
* ``separation`` — mean within-sense cosine / mean between-sense cosine (1.0 for a static
  model; above 1 when the senses form separate clouds; None when the between-sense mean is not
  positive, where a ratio means nothing), and ``gap`` = within − between;
* ``distinct_points`` — how many different vectors the occurrences have (1 for static vectors).

``overall`` averages the per-word scores. The target word's case is folded to lower case
before embedding, so "Apple" (the company) cannot be told from "apple" (the fruit) by its
spelling alone; the rest of the sentence keeps its case.

:func:`collect_occurrences` finds a word in your own corpus (plain text, Gutenberg, wiki or
jsonl files): without sense labels, :func:`two_means` splits the occurrences into two groups so
you can read whether they follow the senses. ``muppets polysemy WORD --model DIR [--corpus PATH]``
prints both; without WORD it scores the whole set.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from muppets.errors import ConfigError, DataError
from muppets.tokenizers.words import split_words
from muppets.transfer.embed import embed_sentences
from muppets.transfer.embedders import Embedder

log = logging.getLogger(__name__)

SENSE_FILE = "polysemy_senses.tsv"
_HEADER = ["word", "sense", "sentence"]


@dataclass
class Occurrence:
    """One use of ``word`` at ``words[index]``; ``sense`` is None outside the labelled set."""

    word: str
    words: list[str]
    index: int
    source: str  # "file:line"
    sense: str | None = None

    @property
    def context(self) -> str:
        """The sentence with the target word in brackets."""
        return " ".join(f"[{w}]" if i == self.index else w for i, w in enumerate(self.words))


def _occurrence(word: str, text: str, source: str, sense: str | None = None) -> Occurrence | None:
    """The first use of ``word`` (any case) in ``text``, its case folded; None if absent."""
    words = split_words(text, lowercase=False)
    target = word.lower()
    for i, w in enumerate(words):
        if w.lower() == target:
            words[i] = target
            return Occurrence(target, words, i, source, sense)
    return None


def sense_set_path() -> Path:
    """Where the shipped sense-labelled set is."""
    return Path(str(resources.files("muppets.data").joinpath(SENSE_FILE)))


def load_sense_set(path: str | Path | None = None) -> list[Occurrence]:
    """The labelled occurrences of a ``word<TAB>sense<TAB>sentence`` file (default: the shipped set)."""
    path = Path(path) if path is not None else sense_set_path()
    if not path.is_file():
        raise DataError("no such sense file", path=path)
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines or lines[0].split("\t") != _HEADER:
        raise DataError(f"the first line must be the header {'<TAB>'.join(_HEADER)}", path=path, line=1,
                        value=lines[0] if lines else None)
    out = []
    for number, line in enumerate(lines[1:], 2):
        fields = line.split("\t")
        if len(fields) != 3 or not all(f.strip() for f in fields):
            raise DataError("expected word<TAB>sense<TAB>sentence", path=path, line=number, value=line[:80])
        occ = _occurrence(fields[0].strip(), fields[2], f"{path}:{number}", fields[1].strip())
        if occ is None:
            raise DataError(f"the sentence does not contain {fields[0]!r}", path=path, line=number, value=fields[2])
        out.append(occ)
    return out


def collect_occurrences(word: str, paths: Iterable[str | Path], limit: int = 200,
                        fmt: str = "auto") -> list[Occurrence]:
    """Up to ``limit`` sentences of a corpus that use ``word`` (any case), in corpus order."""
    from muppets.data.readers import iter_documents
    from muppets.data.sentences import split_sentences
    from muppets.paths import resolve_data_path

    if not word.strip() or len(split_words(word, lowercase=False)) != 1:
        raise ConfigError(f"polysemy: {word!r} is not a single word")
    found: list[Occurrence] = []
    for doc in iter_documents([resolve_data_path(p) for p in paths], fmt, errors="replace"):
        for paragraph in doc.paragraphs:
            for sentence in split_sentences(paragraph):
                occ = _occurrence(word, sentence, doc.source)
                if occ is not None:
                    found.append(occ)
                    if len(found) >= limit:
                        return found
    return found


# ----------------------------------------------------------------------------- vectors and scores


def occurrence_vectors(embedder: Embedder, occurrences: Sequence[Occurrence], layers: Sequence[int] | None = None,
                       batch_size: int = 32) -> np.ndarray:
    """``(K, N, D)``: the target word's vector in each occurrence, for each chosen layer."""
    if not occurrences:
        raise ConfigError("polysemy: no occurrences to embed")
    vectors = embed_sentences(embedder, [o.words for o in occurrences], layers, batch_size)
    return np.stack([v[:, o.index] for v, o in zip(vectors, occurrences)], axis=1)


def cosine_matrix(vectors: np.ndarray) -> np.ndarray:
    """``(N, N)`` cosines of the rows of ``vectors (N, D)`` (a zero row has cosine 0 with all)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    unit = vectors / np.where(norms > 0, norms, 1.0)
    return unit @ unit.T


def distinct_points(vectors: np.ndarray, decimals: int = 4) -> int:
    """How many different directions the rows have (rounded unit vectors)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return len(np.unique(np.round(vectors / np.where(norms > 0, norms, 1.0), decimals), axis=0))


def sense_scores(vectors: np.ndarray, senses: Sequence[str]) -> dict[str, float]:
    """``nn_accuracy``, ``within``, ``between``, ``separation`` and ``gap`` (see the module
    docstring) of ``vectors (N, D)`` labelled ``senses``; needs two senses and two uses of each.

    >>> v = np.array([[1.0, 0.1], [1.0, 0.0], [0.0, 1.0], [0.1, 1.0]])
    >>> s = sense_scores(v, ["a", "a", "b", "b"]); s["nn_accuracy"], round(s["separation"], 2)
    (1.0, 10.02)
    """
    senses = np.asarray(senses)
    names, counts = np.unique(senses, return_counts=True)
    if len(names) < 2 or counts.min() < 2:
        raise ConfigError(f"sense scores need two senses with two uses each, got {dict(zip(names, counts))}")
    cos = cosine_matrix(vectors.astype(np.float64))
    same = senses[:, None] == senses[None, :]
    off = ~np.eye(len(senses), dtype=bool)
    hits = []
    for i in range(len(senses)):
        others = np.where(off[i])[0]
        best = cos[i, others].max()
        tied = others[cos[i, others] >= best - 1e-6]  # a uniform pick among equally close neighbours
        hits.append(float(same[i, tied].mean()))
    within, between = float(cos[same & off].mean()), float(cos[~same].mean())
    return {"nn_accuracy": float(np.mean(hits)), "within": within, "between": between,
            "separation": within / between if between > 0 else None, "gap": within - between,
            "distinct_points": distinct_points(vectors)}


def score_sense_set(embedder: Embedder, occurrences: Sequence[Occurrence] | None = None,
                    layers: Sequence[int] | None = None, batch_size: int = 32) -> dict:
    """Per layer: the scores of every word of the set and their mean (``overall``).

    Returns ``{"layers": [...], "words": {word: {layer: scores}}, "overall": {layer: means},
    "oov": [words whose static vector is missing]}`` (layers as strings, JSON-ready).
    """
    occurrences = list(occurrences) if occurrences is not None else load_sense_set()
    vectors = occurrence_vectors(embedder, occurrences, layers, batch_size)  # (K, N, D)
    chosen = list(range(embedder.num_layers)) if layers is None else [k % embedder.num_layers for k in layers]
    words = sorted({o.word for o in occurrences})
    out: dict = {"layers": chosen, "words": {}, "overall": {}, "oov": []}
    for word in words:
        rows = [i for i, o in enumerate(occurrences) if o.word == word]
        if not np.linalg.norm(vectors[:, rows], axis=-1).any():  # static lookup missed the word
            out["oov"].append(word)
            continue
        senses = [occurrences[i].sense for i in rows]
        out["words"][word] = {str(k): sense_scores(vectors[j][rows], senses) for j, k in enumerate(chosen)}
    for j, k in enumerate(chosen):
        per_word = [s[str(k)] for s in out["words"].values()]
        if per_word:
            out["overall"][str(k)] = {m: _mean([s[m] for s in per_word]) for m in per_word[0]}
    if out["oov"]:
        log.warning("no vector for %s: left out of the scores", ", ".join(out["oov"]))
    return out


def _mean(values: Sequence[float | None]) -> float | None:
    """The mean of the values that are defined (None when none is)."""
    defined = [v for v in values if v is not None]
    return float(np.mean(defined)) if defined else None


def two_means(vectors: np.ndarray, iterations: int = 20) -> np.ndarray:
    """Split ``vectors (N, D)`` into two groups by cosine (spherical 2-means), deterministically:
    the two starting centres are the least similar pair. Returns ``(N,)`` labels 0/1."""
    cos = cosine_matrix(vectors.astype(np.float64))
    if len(vectors) < 2 or np.allclose(cos, cos[0, 0]):
        return np.zeros(len(vectors), dtype=np.int64)  # one point: nothing to split
    a, b = np.unravel_index(np.argmin(cos), cos.shape)
    labels = (cos[:, b] > cos[:, a]).astype(np.int64)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    unit = vectors / np.where(norms > 0, norms, 1.0)
    for _ in range(iterations):
        centres = np.stack([unit[labels == c].mean(0) if (labels == c).any() else unit[[a, b][c]] for c in (0, 1)])
        new = (unit @ centres.T).argmax(1)
        if np.array_equal(new, labels):
            break
        labels = new
    return labels


def describe_word(embedder: Embedder, occurrences: Sequence[Occurrence], layers: Sequence[int] | None = None,
                  batch_size: int = 32) -> list[dict]:
    """Per layer: distinct points, mean pairwise cosine, the two 2-means groups (indices), and the
    sense scores when every occurrence has a sense."""
    vectors = occurrence_vectors(embedder, occurrences, layers, batch_size)
    chosen = list(range(embedder.num_layers)) if layers is None else [k % embedder.num_layers for k in layers]
    senses = [o.sense for o in occurrences]
    out = []
    for j, k in enumerate(chosen):
        cos = cosine_matrix(vectors[j].astype(np.float64))
        off = ~np.eye(len(occurrences), dtype=bool)
        row = {"layer": k, "distinct_points": distinct_points(vectors[j]),
               "mean_cosine": float(cos[off].mean()) if off.any() else 1.0,
               "groups": two_means(vectors[j]).tolist()}
        if all(s is not None for s in senses) and len(set(senses)) > 1:
            row["scores"] = sense_scores(vectors[j], senses)
        out.append(row)
    return out
