"""Raw text -> entity groups: a tagger read as transformers' token-classification pipeline
with ``aggregation_strategy="simple"`` reads it.

The text is split by the model's own tokenizer (its normaliser, pre-tokenizer and WordPiece /
BPE model: :meth:`encodings` gives each piece's character span in the original text). Texts
longer than the model takes become consecutive windows of whole words (the pipeline would cut
them at ``model_max_length``); every piece gets the softmax of its logits, its label is the
argmax, and adjacent pieces are grouped by the pipeline's rules:

- a piece joins the open group when its tag (the label without ``B-``/``I-``) is the group's
  and its label does not start with ``B-`` (``O`` counts as ``I-O``);
- a group's label is its first piece's tag, its score the mean of its pieces' scores, its
  span from the first piece's start to the last piece's end;
- groups labelled ``O`` are dropped.

>>> group_entities([("B-PER", 0.9, 0, 4), ("I-PER", 0.7, 5, 10), ("O", 1.0, 11, 14),
...                 ("B-LOC", 0.8, 15, 20), ("B-LOC", 0.6, 21, 25)], "John Smith saw Paris Rome")
... # doctest: +NORMALIZE_WHITESPACE
[{'entity_group': 'PER', 'score': 0.8, 'word': 'John Smith', 'start': 0, 'end': 10},
 {'entity_group': 'LOC', 'score': 0.8, 'word': 'Paris', 'start': 15, 'end': 20},
 {'entity_group': 'LOC', 'score': 0.6, 'word': 'Rome', 'start': 21, 'end': 25}]

``word`` is the original text of the span (the pipeline's is the pieces decoded back, e.g.
lower-cased by an uncased model); label, score, start and end are the pipeline's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from muppets.tasks.spec import TextExample
from muppets.transfer.features import Feature, word_windows

Piece = tuple[str, float, int, int]  # (label, score, start, end) of one token


def text_tag_features(examples: Sequence[TextExample], tok: Any, max_seq_len: int) -> list[Feature]:
    """``[CLS] pieces [SEP]`` windows of whole words over each raw text; :attr:`Feature.offsets`
    holds each piece's character span (None at the specials), :attr:`Feature.word_ids` the
    word index at each word's first piece (the words of the tokenizer's pre-tokenizer)."""
    budget = max_seq_len - 2
    out = []
    for i, enc in enumerate(tok.encodings([ex.text for ex in examples])):
        words = list(enc.word_ids)
        for a, b in piece_windows(words, budget):
            ids = [tok.cls_id, *enc.ids[a:b], tok.sep_id]
            offsets = [None, *[tuple(o) for o in enc.offsets[a:b]], None]
            firsts = [words[t] if t == 0 or words[t] != words[t - 1] else None for t in range(a, b)]
            out.append(Feature(ids, [0] * len(ids), None, i, word_ids=[None, *firsts, None], offsets=offsets))
    return out


@dataclass
class WordProbs:
    """A raw text's words, as the model's tokenizer splits it, and each word's label
    probabilities (:meth:`Predictor.predict_proba <muppets.transfer.predict.Predictor.predict_proba>`)."""

    words: list[str]  # text[start:end] of each word
    spans: list[tuple[int, int]]  # (start, end) character offsets of each word in the text
    probs: np.ndarray  # (words, C): the softmax at the word's first piece, columns in the model's label order


def word_probs(text: str, features: Sequence[Feature], probs: Sequence[np.ndarray]) -> WordProbs:
    """The :class:`WordProbs` of one text from its windows' features and ``(T, C)`` probabilities:
    a word spans its first piece's start to its last piece's end (windows hold whole words)."""
    found: dict[int, tuple[np.ndarray, int, int]] = {}
    for feature, p in zip(features, probs):
        real = [t for t, span in enumerate(feature.offsets or []) if span is not None]
        firsts = [t for t in real if (feature.word_ids or [])[t] is not None]
        for t, nxt in zip(firsts, [*firsts[1:], real[-1] + 1] if real else []):
            found[feature.word_ids[t]] = (p[t], feature.offsets[t][0], feature.offsets[nxt - 1][1])  # type: ignore[index]
    order = sorted(found)
    spans = [(found[w][1], found[w][2]) for w in order]
    C = probs[0].shape[-1] if len(probs) else 0
    rows = np.array([found[w][0] for w in order]).reshape(len(order), C)
    return WordProbs([text[a:b] for a, b in spans], spans, rows)


def piece_windows(word_ids: Sequence[int | None], budget: int) -> list[tuple[int, int]]:
    """Consecutive ``[start, end)`` piece ranges of whole words, at most ``budget`` pieces each
    (a word longer than ``budget`` alone, cut to its first ``budget`` pieces).

    >>> piece_windows([0, 0, 1, 2, 2, 2], 3)
    [(0, 3), (3, 6)]
    """
    if not word_ids:
        return [(0, 0)]
    firsts = [t for t in range(len(word_ids)) if t == 0 or word_ids[t] != word_ids[t - 1]]
    counts = np.diff([*firsts, len(word_ids)]).tolist()
    out = []
    for w0, w1 in word_windows(counts, budget):
        start = firsts[w0]
        out.append((start, min(start + budget, firsts[w1] if w1 < len(firsts) else len(word_ids))))
    return out


def entities_of(text: str, features: Sequence[Feature], probs: Sequence[np.ndarray],
                labels: Sequence[str]) -> list[dict[str, Any]]:
    """The entity groups of one text from its windows' features and ``(T, C)`` probabilities."""
    pieces: list[Piece] = []
    for feature, p in zip(features, probs):
        for t, span in enumerate(feature.offsets or []):
            if span is not None:
                k = int(np.argmax(p[t]))
                pieces.append((labels[k], float(p[t, k]), span[0], span[1]))
    return group_entities(pieces, text)


def _tag(label: str) -> tuple[str, str]:
    """(``B`` or ``I``, the tag): ``B-PER`` -> (B, PER), ``I-PER`` -> (I, PER), ``O`` -> (I, O)."""
    if label.startswith(("B-", "I-")):
        return label[0], label[2:]
    return "I", label


def group_entities(pieces: Sequence[Piece], text: str, ignore: Sequence[str] = ("O",)) -> list[dict[str, Any]]:
    """Adjacent pieces grouped by the pipeline's ``simple`` rules (module docstring)."""
    groups: list[list[Piece]] = []
    for piece in pieces:
        bi, tag = _tag(piece[0])
        if groups and bi != "B" and tag == _tag(groups[-1][-1][0])[1]:
            groups[-1].append(piece)
        else:
            groups.append([piece])
    out = []
    for group in groups:
        label = group[0][0].split("-", 1)[-1]
        if label in ignore:
            continue
        start, end = group[0][2], group[-1][3]
        out.append({"entity_group": label, "score": float(np.mean([p[1] for p in group])),
                    "word": text[start:end], "start": start, "end": end})
    return out
