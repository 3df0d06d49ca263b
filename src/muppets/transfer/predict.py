"""Inference with a task model: features -> logits -> predictions per example, and :class:`Predictor`.

:func:`feature_logits` runs the model over features in length-sorted batches (eval mode,
no_grad); :func:`decode` turns the logits back into one prediction per example:

=========  ============================================================================
kind       prediction
=========  ============================================================================
classify   the label (pair likewise); :class:`Predictor` answers with its readable name
regress    a float
tag        one tag per word (first-piece prediction; windows merged)
span       ``(answer text, score, start, end)``: the best span over all windows of the
           example, ``context[start:end]`` its text
choice     the index of the best ending
=========  ============================================================================

**Span search** (BERT's ``run_squad.py``): in every window take the ``n_best`` highest start
and end scores among the context tokens, keep pairs with ``end >= start`` and at most
``max_answer_len`` tokens, score ``start + end``, and keep the best pair over all windows; the
answer is the original context substring between the start token's first character and the
end token's last. Spans start on the first piece of a word and end on the last piece of a word
(a word as BERT's pre-tokenizer splits them: punctuation apart), so an answer is never cut
inside a word, as in BERT, whose answers are whole words of the original text.

**Max context** (``max_context``, on by default; BERT's ``_check_is_max_context``): with
overlapping windows (384/128: most tokens sit in about three) a span is scored only in the
window where its start token has the most context, min(left, right) + 0.01 * window length
(:func:`~muppets.transfer.features.max_context_windows`), so a span squeezed against a
window's edge cannot win on scores read with little context. Unlike BERT, which drops
non-max-context starts after taking the ``n_best`` starts, the ``n_best`` are taken among the
allowed starts (as word starts are).

With ``allow_null`` (SQuAD 2.0) the answer is ``""`` when the ``[CLS]`` score
``s_null = start[0] + end[0]`` (its minimum over the windows) beats the best span by more
than ``null_threshold``.

Usage::

    predictor = Predictor("runs/sst2/best")
    predictor.predict(["a gripping film", "dull"])            # ['positive', 'negative']
    predictor(["a gripping film"])                 # [{'label': 'positive', 'score': 0.97}]
    predictor.predict_proba(["dull"])              # array([[0.96, 0.04]]), columns predictor.names
    Predictor("runs/ner/best")("John lives in Paris.")
    # [{'entity_group': 'PER', 'score': 0.99, 'word': 'John', 'start': 0, 'end': 4},
    #  {'entity_group': 'LOC', 'score': 0.98, 'word': 'Paris', 'start': 14, 'end': 19}]
    Predictor("runs/ner/best").predict_proba(["John lives in Paris."])[0]
    # WordProbs(words=['John', 'lives', 'in', 'Paris', '.'], spans=[(0, 4), (5, 10), …], probs=(5, C) array)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from muppets.errors import ConfigError, DataError
from muppets.heads import TaskModel
from muppets.interop.hf_tasks import saved_label_names
from muppets.interop.safetensors_io import read_json_object
from muppets.tasks.spec import ChoiceExample, SpanExample, TagExample, TextExample
from muppets.train.device import to_device
from muppets.transfer.models import load_task_model, load_tokenizer
from muppets.transfer.batching import collate, eval_batches
from muppets.transfer.entities import WordProbs, entities_of, text_tag_features, word_probs
from muppets.transfer.features import (Feature, FeatureOptions, make_features, merge_tag_predictions,
                                       merge_word_values)

log = logging.getLogger(__name__)

SETTINGS_FILE = "muppets_finetune.json"  # feature + decoding settings saved beside a fine-tuned model
_TOKEN_LEVEL = ("tag", "span")
_CLASS_ROWS = ("classify", "pair", "choice")  # kinds with one row of class probabilities per example


@dataclass(frozen=True)
class SpanOptions:
    """How answers are read from start/end scores (see the module docstring)."""

    n_best: int = 20  # start and end candidates per window
    max_answer_len: int = 30  # longest answer, in tokens
    allow_null: bool = False  # SQuAD 2.0: answer "" when [CLS] beats the best span
    null_threshold: float = 0.0  # s_null - best span score above which the answer is ""
    max_context: bool = True  # a span starts only where its start token has the most context (BERT); False = in every window


# ----------------------------------------------------------------------------- model -> logits


def feature_logits(model: TaskModel, features: Sequence[Feature], batch_size: int,
                   pad_id: int) -> list[np.ndarray]:
    """Logits per feature, unpadded: ``(C,)`` classify/choice, ``()`` regress, ``(T, C)`` tag,
    ``(T, 2)`` span. Eval mode and no_grad; the model's mode is restored afterwards."""
    device = next(model.parameters()).device
    out: list[np.ndarray] = [np.empty(0)] * len(features)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for index in eval_batches([f.length for f in features], batch_size):
                batch = collate([features[i] for i in index], pad_id)
                batch.pop("labels", None)
                logits = model(**to_device(batch, device)).logits.float().cpu().numpy()
                for k, i in enumerate(index):
                    out[i] = logits[k, : features[i].length] if model.kind in _TOKEN_LEVEL else logits[k]
    finally:
        model.train(was_training)
    return out


# ----------------------------------------------------------------------------- logits -> predictions


def softmax(logits: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, in float64 (stable: the row maximum is subtracted first)."""
    z = np.asarray(logits, dtype=np.float64)
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def decode(kind: str, examples: Sequence[Any], features: Sequence[Feature],
           logits: Sequence[np.ndarray], labels: Sequence[str] = (),
           span: SpanOptions = SpanOptions()) -> list[Any]:
    """One prediction per example (see the table in the module docstring)."""
    if kind in ("classify", "pair"):
        return [labels[int(np.argmax(lg))] for lg in logits]
    if kind == "regress":
        return [float(lg) for lg in logits]
    if kind == "choice":
        return [int(np.argmax(lg)) for lg in logits]
    if kind == "tag":
        fallback = labels.index("O") if "O" in labels else 0
        merged = merge_tag_predictions(features, [lg.argmax(-1) for lg in logits],
                                       [len(ex.tokens) for ex in examples], fallback)
        return [[labels[t] for t in tags] for tags in merged]
    if kind == "span":
        return decode_spans(examples, features, logits, span)
    raise ConfigError(f"unknown task kind {kind!r}")


def decode_spans(examples: Sequence[SpanExample], features: Sequence[Feature],
                 logits: Sequence[np.ndarray], opts: SpanOptions) -> list[tuple[str, float, int, int]]:
    """``(answer text, score, start, end)`` per example: n-best span search over all its windows
    (a null answer is ``("", s_null, 0, 0)``)."""
    windows: list[list[int]] = [[] for _ in examples]
    for k, f in enumerate(features):
        windows[f.example].append(k)
    out = []
    for ex, ks in zip(examples, windows):
        best: tuple[str, float, int, int] | None = None
        s_null = min(float(logits[k][0, 0] + logits[k][0, 1]) for k in ks)
        for k in ks:
            found = _best_in_window(ex.context, features[k], logits[k], opts)
            if found is not None and (best is None or found[1] > best[1]):
                best = found
        if best is None or (opts.allow_null and s_null - best[1] > opts.null_threshold):
            best = ("", s_null, 0, 0)
        out.append(best)
    return out


def word_edges(words: Sequence[int | None]) -> tuple[np.ndarray, np.ndarray]:
    """Token positions that start / end a word, among the tokens with a word (not None).

    >>> [x.tolist() for x in word_edges([None, 0, 0, 1, 2, 2, None])]
    [[1, 3, 4], [2, 3, 5]]
    """
    w = list(words) + [None]
    starts = [t for t in range(len(words)) if w[t] is not None and (t == 0 or w[t - 1] != w[t])]
    ends = [t for t in range(len(words)) if w[t] is not None and w[t + 1] != w[t]]
    return np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64)


def _best_in_window(context: str, feature: Feature, logits: np.ndarray,
                    opts: SpanOptions) -> tuple[str, float, int, int] | None:
    """Best span of one window: starts on a word's first piece (a max-context token with
    ``opts.max_context``), ends on a word's last piece."""
    first_pieces, last_pieces = word_edges(feature.context_words or [])
    if opts.max_context and feature.is_max_context is not None:
        first_pieces = first_pieces[np.asarray(feature.is_max_context, dtype=bool)[first_pieces]]
    if len(first_pieces) == 0 or len(last_pieces) == 0:
        return None
    starts = first_pieces[np.argsort(-logits[first_pieces, 0], kind="stable")[: opts.n_best]]
    ends = last_pieces[np.argsort(-logits[last_pieces, 1], kind="stable")[: opts.n_best]]
    scores = logits[starts, 0][:, None] + logits[ends, 1][None, :]  # (n_start, n_end)
    width = ends[None, :] - starts[:, None]
    scores = np.where((width >= 0) & (width < opts.max_answer_len), scores, -np.inf)
    i, j = np.unravel_index(int(np.argmax(scores)), scores.shape)
    if not np.isfinite(scores[i, j]):
        return None
    first, last = feature.offsets[starts[i]], feature.offsets[ends[j]]
    return context[first[0]: last[1]], float(scores[i, j]), int(first[0]), int(last[1])


# ----------------------------------------------------------------------------- Predictor


def save_settings(directory: str | Path, features: FeatureOptions, span: SpanOptions,
                  extra: dict | None = None) -> None:
    """Write :data:`SETTINGS_FILE` so :class:`Predictor` encodes inputs as training did."""
    from muppets.config import write_json_atomic

    write_json_atomic(Path(directory) / SETTINGS_FILE,
                      {"features": asdict(features), "span": asdict(span), **(extra or {})})


def load_settings(directory: str | Path) -> tuple[FeatureOptions | None, SpanOptions]:
    """The settings saved by :func:`save_settings` (None / defaults when absent)."""
    path = Path(directory) / SETTINGS_FILE
    if not path.is_file():
        return None, SpanOptions()
    data = read_json_object(path)
    known = {f.name for f in fields(FeatureOptions)}
    feats = FeatureOptions(**{k: v for k, v in data.get("features", {}).items() if k in known})
    known = {f.name for f in fields(SpanOptions)}
    return feats, SpanOptions(**{k: v for k, v in data.get("span", {}).items() if k in known})


def model_labels(directory: str | Path, model: TaskModel) -> tuple[list[str], list[str]]:
    """``(labels, names)`` saved with a task model (:func:`~muppets.interop.hf_tasks.saved_label_names`:
    its task's labels and their readable names; an HF directory's ``id2label``; else ``LABEL_i``)."""
    classifier = getattr(model.head, "classifier", None)
    n = classifier.out_features if classifier is not None else 0
    return saved_label_names(read_json_object(Path(directory) / "config.json"), model.kind, n)


class Predictor:
    """A fine-tuned model directory, ready to predict on raw inputs.

    Args:
        model_dir: a fine-tuned model directory with its tokenizer (e.g. ``<run_dir>/best``):
            an HF ``BertFor…`` directory or a GPT task model (:mod:`muppets.transfer.gpt_tasks`).
        batch_size: inputs per forward pass.
        device: torch device name.
        features, span: override the settings saved with the model (default: the saved ones;
            without them, the defaults with ``max_seq_len`` capped by the model).
        precision: ``float32``, ``bf16`` or ``int8``: the linear layers' runtime
            (:func:`muppets.runtime.set_precision`; int8 on the CPU only), as ``muppets serve
            --precision`` runs them.
    """

    def __init__(self, model_dir: str | Path, batch_size: int = 64, device: str = "cpu",
                 features: FeatureOptions | None = None, span: SpanOptions | None = None,
                 precision: str = "float32") -> None:
        from muppets.runtime import check_precision, set_precision

        check_precision(precision)
        self.model_dir = Path(model_dir)
        self.tokenizer = load_tokenizer(self.model_dir)
        self.model = load_task_model(self.model_dir).to(device).eval()
        self.kind = self.model.kind
        self.labels, self.names = model_labels(self.model_dir, self.model)  # the task's labels; what answers show
        self.precision = precision
        set_precision(self.model, precision)
        saved_features, saved_span = load_settings(self.model_dir)
        limit = self.model.backbone.cfg.max_positions
        self.features = features or saved_features or FeatureOptions(max_seq_len=min(128, limit))
        self.span = span or saved_span
        self.batch_size = batch_size

    def predict(self, inputs: Sequence[Any]) -> list[Any]:
        """Predictions for raw inputs, by the model's kind:

        - classify: strings -> label names (:attr:`names`: ``negative`` / ``positive`` for
          SST-2, the labels themselves where a model has no names); pair: ``(a, b)`` tuples -> label names;
          regress: strings or ``(a, b)`` tuples -> floats;
        - tag: token lists -> one tag per token; a string (raw text) -> its entity groups,
          ``[{"entity_group", "score", "word", "start", "end"}, …]`` with character offsets, as
          transformers' token-classification pipeline with ``aggregation_strategy="simple"``
          gives them (:mod:`muppets.transfer.entities`);
        - span: ``(question, context)`` -> ``{"answer", "score", "start", "end"}``, the answer
          being ``context[start:end]``;
        - choice: ``(context, [endings])`` -> index of the best ending.
        """
        examples = self.examples(inputs)
        return self.run(examples)[0] if examples else []

    def __call__(self, inputs: Any, all_scores: bool = False) -> Any:
        """Answers in the shapes of transformers' pipelines (one input, or a list of them):

        - classify / pair / choice: ``{"label", "score"}`` (the label's probability; choice:
          the index of the best ending), with ``all_scores`` also ``"scores"``: every label's
          probability (choice: a list, one per ending);
        - regress: ``{"score": value}``;
        - tag, span: as :meth:`predict` (entity groups for raw text; answer with its span).
        """
        if isinstance(inputs, str):
            return self([inputs], all_scores)[0]
        examples = self.examples(inputs)
        if not examples:
            return []
        preds, probs = self.run(examples)
        return [self._answer(pred, prob, all_scores) for pred, prob in zip(preds, probs)]

    def _answer(self, pred: Any, prob: np.ndarray | None, all_scores: bool) -> Any:
        if prob is not None and self.kind in _CLASS_ROWS:
            out = {"label": pred, "score": float(prob.max())}
            if all_scores:
                out["scores"] = prob.tolist() if self.kind == "choice" else dict(zip(self.names, prob.tolist()))
            return out
        return {"score": pred} if self.kind == "regress" else pred

    def predict_examples(self, examples: Sequence[Any]) -> list[Any]:
        """Predictions for task examples (``TextExample`` …), as :meth:`predict` gives them;
        labels in them are ignored."""
        return self.run(examples)[0]

    def run(self, examples: Sequence[Any]) -> tuple[list[Any], list[Any]]:
        """Predictions for task examples (as :meth:`predict` gives them) and each example's
        probabilities where its kind has them (as :meth:`predict_proba` gives them: a class row
        for classify, pair and choice, per-word rows for tag; else None): the one code path
        behind :meth:`predict`, :meth:`__call__`, :meth:`predict_proba` and the server's
        ``/predict``. A tagger takes :class:`TagExample` (pre-split words) and
        :class:`TextExample` (raw text)."""
        if self.kind == "tag":
            return self._run_tag(examples)
        feats = make_features(self.kind, examples, self.tokenizer, self.features, self.labels)
        logits = feature_logits(self.model, feats, self.batch_size, self.tokenizer.pad_id)
        preds = decode(self.kind, examples, feats, logits, self.labels, self.span)
        if self.kind == "span":
            preds = [{"answer": text, "score": score, "start": start, "end": end}
                     for text, score, start, end in preds]
        if self.kind in ("classify", "pair"):
            named = dict(zip(self.labels, self.names))
            preds = [named[p] for p in preds]
        one_each = len(feats) == len(examples) and self.kind in _CLASS_ROWS
        return preds, [softmax(lg) for lg in logits] if one_each else [None] * len(examples)

    def _run_tag(self, examples: Sequence[Any]) -> tuple[list[Any], list[Any]]:
        """Pre-split words -> a tag and a probability row each; raw texts -> entity groups and
        :class:`~muppets.transfer.entities.WordProbs`; in the order given."""
        preds: list[Any] = [None] * len(examples)
        probs: list[Any] = [None] * len(examples)
        raw = [i for i, ex in enumerate(examples) if isinstance(ex, TextExample)]
        split = [i for i, ex in enumerate(examples) if not isinstance(ex, TextExample)]
        for group, read in ((split, self._tag_words), (raw, self._tag_texts)):
            if group:
                for i, pred, prob in zip(group, *read([examples[i] for i in group])):
                    preds[i], probs[i] = pred, prob
        return preds, probs

    def _tag_words(self, examples: Sequence[TagExample]) -> tuple[list[list[str]], list[np.ndarray]]:
        """One tag per word and a ``(words, C)`` probability array (each word read at its first piece)."""
        feats = make_features("tag", examples, self.tokenizer, self.features, self.labels)
        logits = feature_logits(self.model, feats, self.batch_size, self.tokenizer.pad_id)
        C = len(self.labels)
        fill = np.eye(C)[self.labels.index("O") if "O" in self.labels else 0]
        merged = merge_word_values(feats, [softmax(lg) for lg in logits], [len(ex.tokens) for ex in examples], fill)
        rows = [np.array(r).reshape(len(r), C) for r in merged]
        return decode("tag", examples, feats, logits, self.labels, self.span), rows

    def _tag_texts(self, examples: Sequence[TextExample]) -> tuple[list[list[dict[str, Any]]], list[WordProbs]]:
        """Entity groups and per-word probabilities of raw texts, from one forward pass."""
        feats = text_tag_features(examples, self.tokenizer, self.features.max_seq_len)
        probs = [softmax(lg) for lg in feature_logits(self.model, feats, self.batch_size, self.tokenizer.pad_id)]
        per: list[list[int]] = [[] for _ in examples]
        for k, f in enumerate(feats):
            per[f.example].append(k)
        groups = [entities_of(ex.text, [feats[k] for k in ks], [probs[k] for k in ks], self.labels)
                  for ex, ks in zip(examples, per)]
        words = [word_probs(ex.text, [feats[k] for k in ks], [probs[k] for k in ks]) for ex, ks in zip(examples, per)]
        return groups, words

    def entities(self, examples: Sequence[TextExample]) -> list[list[dict[str, Any]]]:
        """Entity groups of raw texts (:mod:`muppets.transfer.entities`)."""
        return self._tag_texts(examples)[0]

    def predict_proba(self, inputs: Sequence[Any]) -> Any:
        """Class probabilities (softmax of the logits) for raw inputs, as :meth:`predict` takes
        them: classify/pair → ``(n, C)`` array, columns in :attr:`labels` order (named by
        :attr:`names`); tag → one entry per input: pre-split words → a ``(words, C)`` array, each
        word read at its first piece (as :meth:`predict` reads its tag); a string (raw text) → a
        :class:`~muppets.transfer.entities.WordProbs`: the text's words as the model's tokenizer
        splits it (the words :meth:`__call__` groups into entities), their character spans and
        the same ``(words, C)`` rows. Other kinds have no class probabilities (:class:`ConfigError`)."""
        if self.kind not in ("classify", "pair", "tag"):
            raise ConfigError(f"predict_proba: a {self.kind} model has no class probabilities")
        examples = self.examples(inputs)
        if not examples:
            return np.zeros((0, len(self.labels))) if self.kind != "tag" else []
        probs = self.run(examples)[1]
        return probs if self.kind == "tag" else np.stack(probs)

    def examples(self, inputs: Sequence[Any]) -> list[Any]:
        """Raw inputs as unlabelled task examples (see :meth:`predict`)."""
        return [self._example(i, x) for i, x in enumerate(inputs)]

    def _example(self, i: int, x: Any) -> Any:
        source, kind = "input", self.kind
        try:
            if kind in ("classify", "pair", "regress"):
                a, b = (x, None) if isinstance(x, str) else tuple(x)
                if kind == "pair" and b is None:
                    raise ValueError
                return TextExample(str(i), a, b, None, source)
            if kind == "tag":
                if isinstance(x, str):
                    return TextExample(str(i), x, None, None, source)  # raw text: entity groups
                return TagExample(str(i), [str(t) for t in x], None, source)
            if kind == "span":
                question, context = x
                return SpanExample(str(i), question, context, [], "", source)
            context, endings = x
            return ChoiceExample(str(i), context, list(endings), None, source)
        except (TypeError, ValueError):
            raise DataError(f"input {i} does not fit a {kind} model (see Predictor.predict)",
                            value=x) from None
