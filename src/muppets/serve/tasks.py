"""``/predict``: a fine-tuned task directory of any kind, through :class:`~muppets.transfer.predict.Predictor`.

Each input is what :meth:`Predictor.predict` takes, written in JSON:

========  ==================================================  ========================================
kind      input                                               prediction
========  ==================================================  ========================================
classify  ``"text"``                                          label name (``"positive"``)
pair      ``["a", "b"]`` or ``{"text": a, "text_pair": b}``   label name
regress   ``"text"``, ``["a", "b"]`` or the object form       float
tag       ``"raw text"``                                      entity groups: ``[{"entity_group",
                                                              "score", "word", "start", "end"}]``
tag       ``["tok", …]`` (pre-split words)                    one tag per token
span      ``["question", "context"]`` or                      ``{"answer", "score", "start",
          ``{"question": q, "context": c}``                   "end"}`` (character span)
choice    ``["context", ["e1", "e2", …]]`` or                 index of the best ending
          ``{"context": c, "endings": [...]}``
========  ==================================================  ========================================

Classify, pair and choice answers come with ``score`` (the probability of the predicted label
or ending); with ``"return_probabilities": true`` also each label's probability (choice: each
ending's; tag: one ``{label: p}`` per word, read at its first piece, and for raw text the
``words`` they belong to, ``[{"word", "start", "end"}]``, as ``Predictor.predict_proba`` gives
them). Inputs of several requests run through one :meth:`Predictor.run
<muppets.transfer.predict.Predictor.run>` call (the batcher's batch), so served predictions
are the offline ones.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from muppets.errors import ConfigError, MuppetsError
from muppets.serve.batcher import Work
from muppets.serve.config import ServeConfig
from muppets.serve.engines import PREDICT, Engine
from muppets.serve.errors import ApiError
from muppets.train.device import pick_device
from muppets.transfer.entities import WordProbs
from muppets.transfer.predict import Predictor

_OBJECT_FIELDS = {"pair": ("text", "text_pair"), "regress": ("text", "text_pair"), "span": ("question", "context"),
                  "choice": ("context", "endings")}


@dataclass(frozen=True)
class TaskInput:
    example: Any  # the task example (TextExample, TagExample …)
    probabilities: bool  # add class / ending probabilities


class TaskEngine(Engine):
    """A fine-tuned task model and its tokenizer, labels and feature settings."""

    routes = (PREDICT,)

    def __init__(self, source: Path, cfg: ServeConfig) -> None:
        if cfg.pooling or cfg.normalize is not None:  # they would be ignored: say so
            raise ConfigError(f"--pooling / --normalize shape embeddings; {source} is a fine-tuned task model, served "
                              "at /predict with its own head")
        super().__init__(source)
        self.predictor = Predictor(source, batch_size=cfg.max_batch_size, device=str(pick_device(cfg.device)),
                                   precision=cfg.precision)
        self.precision = cfg.precision
        self.kind = self.predictor.kind
        self.max_len = self.predictor.features.max_seq_len

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "task": self.kind, "labels": self.predictor.names}

    def predict_items(self, inputs: Sequence[Any], probabilities: bool) -> list[Work]:
        """Work items for JSON inputs (422 naming the first that does not fit the kind)."""
        raw = [self._normalise(i, x) for i, x in enumerate(inputs)]
        try:
            examples = self.predictor.examples(raw)
        except MuppetsError as err:
            raise ApiError(422, str(err), param="inputs") from None
        return [Work(self._key(x), self._cost(x), TaskInput(ex, probabilities)) for x, ex in zip(raw, examples)]

    def _key(self, x: Any) -> tuple:
        """Choice questions share a batch only with the same number of endings (one tensor)."""
        return (PREDICT, len(x[1])) if self.kind == "choice" else (PREDICT,)

    def _normalise(self, i: int, x: Any) -> Any:
        kind, bad = self.kind, None
        if isinstance(x, dict) and kind in _OBJECT_FIELDS:
            first, second = _OBJECT_FIELDS[kind]
            if first not in x or (second not in x and kind != "regress"):
                bad = f"an object with {first!r} and {second!r}"
            x = (x.get(first), x.get(second)) if second in x else x.get(first)
        bad = bad or _shape_problem(kind, x)
        if bad:
            raise ApiError(422, f"inputs[{i}]: a {kind} model takes {bad}", param="inputs")
        return x

    def _cost(self, x: Any) -> int:
        texts = [x] if isinstance(x, str) else [t for part in x for t in ([part] if isinstance(part, str) else part)]
        pieces = sum(len(ids) for ids in self.predictor.tokenizer.encode_batch(texts)) + 3
        if self.kind == "choice":
            return len(x[1]) * min(pieces, self.max_len)
        return pieces if self.kind in ("tag", "span") else min(pieces, self.max_len)

    def run(self, key: Hashable, items: list[Work]) -> list[Any]:
        preds, probs = self.predictor.run([w.payload.example for w in items])
        labels = self.predictor.names  # what the answers show (a registered task's names, else the values)
        out = []
        for w, pred, prob in zip(items, preds, probs):
            answer = {"prediction": pred}
            if self.kind == "tag" and w.payload.probabilities:
                answer.update(tag_probabilities(prob, labels))
            elif prob is not None and self.kind != "tag":
                answer["score"] = float(prob.max())
                if w.payload.probabilities:
                    answer["probabilities"] = (prob.tolist() if self.kind == "choice" else
                                               dict(zip(labels, prob.tolist())))
            out.append(answer)
        return out


def tag_probabilities(prob: Any, labels: Sequence[str]) -> dict[str, Any]:
    """A tagger's per-word probabilities in JSON: ``probabilities``, one ``{label: p}`` per word,
    and for raw text the ``words`` they belong to, ``[{"word", "start", "end"}]``."""
    if isinstance(prob, WordProbs):
        return {"words": [{"word": w, "start": a, "end": b} for w, (a, b) in zip(prob.words, prob.spans)],
                "probabilities": [dict(zip(labels, row.tolist())) for row in prob.probs]}
    return {"probabilities": [dict(zip(labels, row.tolist())) for row in prob]}


def _is_text(x: Any) -> bool:
    return isinstance(x, str) and bool(x.strip())


def _shape_problem(kind: str, x: Any) -> str | None:
    """What a ``kind`` input must be, when ``x`` is not that (None when it is)."""
    pair = isinstance(x, (list, tuple)) and len(x) == 2 and all(_is_text(t) for t in x)
    if kind == "classify":
        return None if _is_text(x) else "a non-empty string"
    if kind == "pair":
        return None if pair else "two non-empty strings [a, b]"
    if kind == "regress":
        return None if _is_text(x) or pair else "a non-empty string or two [a, b]"
    if kind == "tag":
        ok = _is_text(x) or (isinstance(x, list) and x and all(_is_text(t) for t in x))
        return None if ok else "a non-empty string (raw text) or a non-empty list of non-empty tokens"
    if kind == "span":
        return None if pair else "[question, context], two non-empty strings"
    ok = (isinstance(x, (list, tuple)) and len(x) == 2 and _is_text(x[0]) and isinstance(x[1], list)
          and len(x[1]) >= 1 and all(_is_text(e) for e in x[1]))
    return None if ok else "[context, [ending, …]] with at least one ending"
