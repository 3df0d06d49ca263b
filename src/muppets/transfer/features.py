"""Task examples -> model features (token ids + labels), one function per task kind.

The input layouts are BERT's (Devlin et al. 2019, §4 and Fig. 4):

- ``classify`` / ``pair`` / ``regress``: ``[CLS] a [SEP] (b [SEP])``, cut ``longest_first`` to
  ``max_seq_len``; the label is the index of the label name (a float for ``regress``).
- ``tag``: the words are split into WordPiece pieces; the FIRST piece of each word carries
  the word's tag id, every other piece and the specials carry -100 (ignored by the loss), and
  :attr:`Feature.word_ids` remembers which word each first piece starts, so predictions map
  back to words. A sentence longer than ``max_seq_len`` is cut into consecutive windows of
  whole words (no word lost, none repeated); :func:`merge_tag_predictions` joins them.
- ``span``: ``[CLS] question [SEP] window [SEP]`` for windows over the context tokens; each
  window starts ``doc_stride`` tokens after the previous one (BERT's ``run_squad.py``
  meaning: the step, capped at the window length so that no token is skipped; a stride
  shorter than the window makes windows overlap). :attr:`Feature.offsets` holds the character
  span of every context token (None elsewhere), so an answer is read back from the original
  context, and :attr:`Feature.context_words` its word (answers are read on word edges). The label is the (start, end) token position of the first answer when it lies
  wholly inside the window, else (0, 0): both point at ``[CLS]``, as BERT trains it.
  With overlapping windows a token sits in several; :attr:`Feature.is_max_context` marks the
  tokens whose *max-context* window this is (:func:`max_context_windows`), where decoding
  lets a span start.
- ``choice``: one ``[CLS] context [SEP] ending [SEP]`` row per ending -> a ``(C, T)`` feature;
  the label is the gold index.

A GPT model reads the same features through :class:`muppets.transfer.gpt_tasks.GPTTaskTokenizer`,
whose ``[CLS]``, middle ``[SEP]`` and final ``[SEP]`` are GPT's ``start``, ``delim`` and
``extract`` tokens (Radford et al. 2018, Fig. 1); with ``orderings=2`` a pair feature holds both
orders of its texts as two rows.

Features hold plain, unpadded lists; :mod:`muppets.transfer.batching` pads each batch to its own
longest row.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from muppets.errors import ConfigError, DataError
from muppets.tasks.spec import ChoiceExample, SpanExample, TagExample, TextExample
from muppets.tokenizers.wordpiece import WordPieceTokenizer

log = logging.getLogger(__name__)

IGNORE = -100  # label of positions the loss skips (non-first pieces, specials, padding)


class Probs(tuple):
    """A soft label: a probability per class, in the task's label order (``(C,)``)."""


@dataclass
class Feature:
    """One model input (a window of an example for ``tag`` / ``span``).

    ``input_ids`` / ``token_type_ids`` are ``(T,)`` lists, or ``(C, T_c)`` lists of rows for
    ``choice``. ``label`` is a class index (classify/pair/choice), a float (regress), a
    ``(T,)`` list of tag ids with -100 (tag), a ``(start, end)`` pair (span) or, with weak
    labels, :class:`Probs` (classify/pair); None when the example is unlabelled.
    """

    input_ids: list
    token_type_ids: list
    label: Any
    example: int  # index of the example this feature was made from
    word_ids: list[int | None] | None = None  # tag: word index at each word's first piece
    offsets: list[tuple[int, int] | None] | None = None  # span: (start, end) chars of context tokens
    context_words: list[int | None] | None = None  # span: word index of each context token, None elsewhere
    is_max_context: list[bool] | None = None  # span: True at context tokens whose max-context window this is

    @property
    def length(self) -> int:
        """Tokens in the longest row (what the batch is padded to)."""
        if self.input_ids and isinstance(self.input_ids[0], list):
            return max(len(row) for row in self.input_ids)
        return len(self.input_ids)


@dataclass(frozen=True)
class FeatureOptions:
    """How examples become features (saved with a fine-tuned model so prediction matches)."""

    max_seq_len: int = 128  # tokens per input, specials included
    doc_stride: int = 128  # span: step between window starts, in context tokens
    max_query_len: int = 64  # span: question tokens kept (BERT's max_query_length)
    orderings: int = 1  # pair/regress: 2 = also the swapped pair, as a second row (GPT similarity, §3.3)

    def __post_init__(self) -> None:
        if self.orderings not in (1, 2):
            raise ConfigError(f"orderings={self.orderings} must be 1 or 2")
        if self.max_seq_len < 4:
            raise ConfigError(f"max_seq_len={self.max_seq_len} is too short (at least 4)")
        if self.doc_stride < 1 or self.max_query_len < 1:
            raise ConfigError(f"doc_stride={self.doc_stride} and max_query_len="
                              f"{self.max_query_len} must be >= 1")


def make_features(kind: str, examples: Sequence[Any], tok: WordPieceTokenizer,
                  options: FeatureOptions = FeatureOptions(),
                  labels: Sequence[str] = ()) -> list[Feature]:
    """Features of ``examples`` for a task ``kind``; class and tag labels index ``labels``."""
    if kind in ("classify", "pair", "regress"):
        feats = text_features(examples, tok, options.max_seq_len, labels, kind == "regress")
        if options.orderings == 2 and kind != "classify":
            swapped = [dataclasses.replace(ex, text=ex.text_b or "", text_b=ex.text) for ex in examples]
            back = text_features(swapped, tok, options.max_seq_len, labels, kind == "regress")
            feats = [Feature([f.input_ids, g.input_ids], [f.token_type_ids, g.token_type_ids], f.label,
                             f.example) for f, g in zip(feats, back)]
        return feats
    if kind == "tag":
        return tag_features(examples, tok, options.max_seq_len, labels)
    if kind == "span":
        return span_features(examples, tok, options)
    if kind == "choice":
        return choice_features(examples, tok, options.max_seq_len)
    raise ConfigError(f"unknown task kind {kind!r}")


def _check_type(examples: Sequence[Any], cls: type, kind: str) -> None:
    for ex in examples:
        if not isinstance(ex, cls):
            raise DataError(f"a {kind} task needs {cls.__name__}s, got {type(ex).__name__}",
                            value=getattr(ex, "id", None))


def _label_index(labels: Sequence[str], value: Any, ex: Any) -> int:
    index = {name: i for i, name in enumerate(labels)}.get(str(value))
    if index is None:
        raise DataError(f"label not in the task's label set {list(labels)}",
                        path=getattr(ex, "source", None), value=value)
    return index


# ----------------------------------------------------------------------------- classify / pair / regress


def text_features(examples: Sequence[TextExample], tok: WordPieceTokenizer, max_seq_len: int,
                  labels: Sequence[str], regress: bool = False) -> list[Feature]:
    """``[CLS] a [SEP] (b [SEP])`` cut ``longest_first``; label index (or float)."""
    _check_type(examples, TextExample, "text")
    firsts = [ex.text for ex in examples]
    pairs = [ex.text_b or "" for ex in examples] if any(ex.text_b is not None for ex in examples) else None
    encoded = tok.encode_for_model_batch(firsts, pairs, max_seq_len)
    out = []
    for i, (ex, enc) in enumerate(zip(examples, encoded)):
        if ex.label is None:
            label = None
        else:
            label = float(ex.label) if regress else _label_index(labels, ex.label, ex)
        out.append(Feature(enc["input_ids"], enc["token_type_ids"], label, i))
    return out


# ----------------------------------------------------------------------------- tag


def word_pieces(tok: WordPieceTokenizer, sentences: Sequence[Sequence[str]]) -> list[list[list[int]]]:
    """Per sentence, per word, its WordPiece ids (a word may give none, e.g. a control char)."""
    encodings = tok.encode_words(sentences)
    out = []
    for words, enc in zip(sentences, encodings):
        pieces: list[list[int]] = [[] for _ in words]
        for token_id, word in zip(enc.ids, enc.word_ids):
            pieces[word].append(token_id)
        out.append(pieces)
    return out


def word_windows(piece_counts: Sequence[int], budget: int) -> list[tuple[int, int]]:
    """Consecutive ``[start, end)`` word ranges whose pieces fit in ``budget`` tokens.

    Every word is in exactly one window; a single word longer than the budget gets a window
    of its own (its pieces are then cut, keeping the first, which carries its label).

    >>> word_windows([1, 2, 3, 1], 4)
    [(0, 2), (2, 4)]
    """
    windows, start, used = [], 0, 0
    for i, n in enumerate(piece_counts):
        if used + n > budget and i > start:
            windows.append((start, i))
            start, used = i, 0
        used += n
    windows.append((start, len(piece_counts)))
    return windows


def tag_features(examples: Sequence[TagExample], tok: WordPieceTokenizer, max_seq_len: int,
                 labels: Sequence[str]) -> list[Feature]:
    """First-piece labelling; sentences too long for ``max_seq_len`` become several windows."""
    _check_type(examples, TagExample, "tag")
    budget = max_seq_len - 2
    out = []
    for i, (ex, pieces) in enumerate(zip(examples, word_pieces(tok, [ex.tokens for ex in examples]))):
        tags = None if ex.tags is None else [_label_index(labels, t, ex) for t in ex.tags]
        for start, end in word_windows([len(p) for p in pieces], budget):
            out.append(_tag_window(tok, pieces, tags, start, end, budget, i))
    return out


def _tag_window(tok: WordPieceTokenizer, pieces: list[list[int]], tags: list[int] | None,
                start: int, end: int, budget: int, example: int) -> Feature:
    ids, word_ids, labels = [tok.cls_id], [None], [IGNORE]
    for w in range(start, end):
        word = pieces[w][:budget]
        if not word:
            continue
        ids += word
        word_ids += [w] + [None] * (len(word) - 1)
        labels += [tags[w] if tags else IGNORE] + [IGNORE] * (len(word) - 1)
    ids.append(tok.sep_id)
    word_ids.append(None)
    labels.append(IGNORE)
    return Feature(ids, [0] * len(ids), labels if tags is not None else None, example, word_ids=word_ids)


def merge_tag_predictions(features: Sequence[Feature], predicted: Sequence[Sequence[int]],
                          num_words: Sequence[int], fallback: int) -> list[list[int]]:
    """Per example, one tag id per word from the windows' first-piece predictions.

    ``predicted[k][t]`` is the tag id at token ``t`` of feature ``k``. A word with no piece
    (nothing left after normalisation) gets ``fallback`` (the ``O`` tag).
    """
    return merge_word_values(features, [[int(v) for v in pred] for pred in predicted], num_words, fallback)


def merge_word_values(features: Sequence[Feature], values: Sequence[Sequence[Any]],
                      num_words: Sequence[int], fill: Any) -> list[list[Any]]:
    """Per example, one value per word: the value at the word's first piece, read from the
    windows in order (a later window overwrites); a word with no piece gets ``fill``.
    ``values[k][t]`` is feature ``k``'s value at token ``t`` (a tag id, a probability row)."""
    merged = [[fill] * n for n in num_words]
    for feature, row in zip(features, values):
        for t, w in enumerate(feature.word_ids or []):
            if w is not None:
                merged[feature.example][w] = row[t]
    return merged


# ----------------------------------------------------------------------------- span


def span_features(examples: Sequence[SpanExample], tok: WordPieceTokenizer,
                  options: FeatureOptions) -> list[Feature]:
    """Sliding windows over each context; see the module docstring."""
    _check_type(examples, SpanExample, "span")
    contexts = list(dict.fromkeys(ex.context for ex in examples))  # SQuAD shares contexts
    encodings = tok.encodings(contexts)
    encoded = {c: (e.ids, e.offsets, e.word_ids) for c, e in zip(contexts, encodings)}
    questions = tok.encode_batch([ex.question for ex in examples])
    out = []
    for i, (ex, q_ids) in enumerate(zip(examples, questions)):
        q_ids = q_ids[: options.max_query_len]
        budget = options.max_seq_len - len(q_ids) - 3
        if budget < 1:
            raise ConfigError(f"max_seq_len={options.max_seq_len} leaves no room for the context "
                              f"after a {len(q_ids)}-token question (lower max_query_len)")
        ctx_ids, offsets, words = encoded[ex.context]
        target = _answer_tokens(ex, offsets)
        starts = window_starts(len(ctx_ids), budget, options.doc_stride)
        windows = [(start, min(budget, len(ctx_ids) - start)) for start in starts]
        best = max_context_windows(windows, len(ctx_ids))
        for w, start in enumerate(starts):
            feature = _span_window(tok, q_ids, ctx_ids, offsets, start, budget, target, i)
            head = len(q_ids) + 2  # [CLS] question [SEP]
            feature.context_words = [None if o is None else words[start + k - head]
                                     for k, o in enumerate(feature.offsets)]
            feature.is_max_context = [o is not None and best[start + k - head] == w
                                      for k, o in enumerate(feature.offsets)]
            out.append(feature)
    return out


def max_context_windows(windows: Sequence[tuple[int, int]], n_tokens: int) -> list[int]:
    """For each of ``n_tokens`` context tokens, the index of the window ``(start, length)``
    where it has the most context: ``min(tokens left of it, tokens right of it) + 0.01 *
    length``, the first such window on ties (BERT's ``run_squad.py``, ``_check_is_max_context``).

    >>> max_context_windows([(0, 5), (3, 5), (6, 5), (9, 3)], 12)
    [0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3]
    """
    best = np.full(n_tokens, -1, dtype=np.int64)
    best_score = np.full(n_tokens, -np.inf)
    for w, (start, length) in enumerate(windows):
        pos = np.arange(start, min(start + length, n_tokens))  # the window's tokens
        score = np.minimum(pos - start, start + length - 1 - pos) + 0.01 * length
        better = score > best_score[pos]  # strict: an earlier window keeps a tie
        best[pos[better]], best_score[pos[better]] = w, score[better]
    assert (best >= 0).all(), "windows must cover every token"
    return best.tolist()


def window_starts(n_tokens: int, length: int, stride: int) -> list[int]:
    """Starts of windows of ``length`` tokens, ``min(stride, length)`` apart, covering all.

    >>> window_starts(10, 4, 3), window_starts(10, 4, 8), window_starts(0, 4, 2)
    ([0, 3, 6], [0, 4, 8], [0])
    """
    starts, start = [0], 0
    while start + length < n_tokens:
        start += min(stride, length)
        starts.append(start)
    return starts


def _answer_tokens(ex: SpanExample, offsets: list[tuple[int, int]]) -> tuple[int, int] | None:
    """Context token range ``[first, last]`` covering the first answer (None if unlabelled)."""
    if not ex.answers:
        return None
    answer = ex.answers[0]
    begin, end = answer.start, answer.start + len(answer.text)
    inside = [t for t, (s, e) in enumerate(offsets) if s < end and e > begin]
    if not inside:  # e.g. an answer of only whitespace
        log.debug("%s: answer %r covers no token", ex.id, answer.text)
        return None
    return inside[0], inside[-1]


def _span_window(tok: WordPieceTokenizer, q_ids: list[int], ctx_ids: list[int],
                 offsets: list[tuple[int, int]], start: int, budget: int,
                 target: tuple[int, int] | None, example: int) -> Feature:
    window = ctx_ids[start: start + budget]
    head = [tok.cls_id, *q_ids, tok.sep_id]
    ids = head + window + [tok.sep_id]
    types = [0] * len(head) + [1] * (len(window) + 1)
    token_offsets = [None] * len(head) + list(offsets[start: start + len(window)]) + [None]
    label = None
    if target is not None:
        first, last = target
        inside = start <= first and last < start + len(window)
        label = (first - start + len(head), last - start + len(head)) if inside else (0, 0)
    return Feature(ids, types, label, example, offsets=token_offsets)


# ----------------------------------------------------------------------------- choice


def choice_features(examples: Sequence[ChoiceExample], tok: WordPieceTokenizer,
                    max_seq_len: int) -> list[Feature]:
    """One ``[CLS] context [SEP] ending [SEP]`` row per ending; every example needs the same
    number of endings (the head scores a ``(B, C)`` grid)."""
    _check_type(examples, ChoiceExample, "choice")
    counts = {len(ex.endings) for ex in examples}
    if len(counts) > 1:
        raise DataError(f"choice examples differ in their number of endings: {sorted(counts)}")
    firsts = [ex.context for ex in examples for _ in ex.endings]
    seconds = [ending for ex in examples for ending in ex.endings]
    encoded = tok.encode_for_model_batch(firsts, seconds, max_seq_len)
    out, k = [], 0
    for i, ex in enumerate(examples):
        rows = encoded[k: k + len(ex.endings)]
        k += len(ex.endings)
        out.append(Feature([r["input_ids"] for r in rows], [r["token_type_ids"] for r in rows],
                           ex.label, i))
    return out
