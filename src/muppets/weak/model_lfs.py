"""Model-based labeling functions built from muppets itself (issue 17, scope 1).

A model is too slow to call once per example, so these LFs are **batched**: the applier
(:func:`~muppets.weak.apply.apply_lfs`) calls ``label_batch(examples)`` once for the whole
column, and caches the column apart from the rest of the matrix. Each one is still an ordinary
LF — ``lf(x)`` labels one example (a batch of one) — with a ``name`` and a ``cache_key()``.
The model is loaded on first use, so building the LFs (an LF file, a cache hit) loads nothing.

* :func:`predictor_lf` — a fine-tuned classifier (:class:`~muppets.transfer.Predictor`): votes
  ``label_map[model label]`` when that label's probability is ``>= threshold``, else abstains.
  E.g. an SST-2 model voting HAM on confidently positive comments (the spam tutorial's
  TextBlob polarity LF).
* :func:`tagger_lf` — a fine-tuned tagger: votes ``label`` when a text of fewer than
  ``max_words`` words has a word whose probability of being (part of) an ``entity`` is
  ``>= threshold`` (a CoNLL-2003 model's PER: the tutorial's spaCy ``has_person`` LF).
* :func:`prototype_lf` — a sentence encoder (``minilm``: all-MiniLM-L6-v2, or any model
  :func:`~muppets.transfer.embed.embed` reads): the text's mean-pooled top-layer vector is
  compared (cosine) with each class's prototype sentences (``"a great film"`` …); votes the
  class with the highest mean similarity when it beats the next by ``margin``. Label-free:
  the prototypes are written, not learned.
* :func:`zero_shot_lf` — a GPT language model prompted with a template: each class's score is
  the log-probability of its verbalizers as the continuation (log-sum-exp over a class's
  verbalizers, :func:`~muppets.transfer.zeroshot.continuation_logprobs`); it votes the best
  class when it beats the next by ``margin`` nats, else abstains. With ``calibrate`` the
  scores of a content-free input (``"N/A"`` in the template) are subtracted first (contextual
  calibration, Zhao et al. 2021): a small LM's prior for one verbalizer otherwise decides.

The cache key names the model by a digest of its weight and config files (not its path), so a
retrained model in the same directory is not read from a stale cache.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from muppets.errors import ConfigError
from muppets.tasks.spec import TextExample
from muppets.weak.lf import ABSTAIN

__all__ = ["BatchLabelingFunction", "predictor_lf", "tagger_lf", "prototype_lf", "zero_shot_lf",
           "model_digest", "PredictorLF", "TaggerLF", "PrototypeLF", "ZeroShotLF"]

logger = logging.getLogger(__name__)

_MODEL_FILES = ("*.safetensors", "config.json", "vocab.txt", "vocab.json", "merges.txt",
                "tokenizer.json", "tokenizer_config.json", "muppets_finetune.json")


def model_digest(directory: str | Path) -> str:
    """SHA-256 over a model directory's weight, config and vocabulary files (names + bytes)."""
    directory = Path(directory)
    files = sorted({f for pattern in _MODEL_FILES for f in directory.glob(pattern)})
    if not any(f.suffix == ".safetensors" for f in files):
        raise ConfigError(f"{directory}: no *.safetensors weights (expected a model directory)")
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode() + b"\x00")
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


class BatchLabelingFunction:
    """Base of batched LFs: subclasses implement :meth:`label_batch` and :meth:`settings`
    (everything besides the model's weights that changes the votes)."""

    def __init__(self, name: str, model_dir: str | Path) -> None:
        if not name or not isinstance(name, str):
            raise ConfigError(f"a labeling function needs a non-empty name, got {name!r}")
        from muppets.paths import resolve_model_path
        self.name = name
        self.model_dir = resolve_model_path(model_dir)
        if not self.model_dir.is_dir():
            raise ConfigError(f"labeling function {name!r}: model directory {self.model_dir} "
                              "not found")

    def label_batch(self, examples: Sequence[TextExample]) -> list[int]:  # pragma: no cover
        raise NotImplementedError

    def settings(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def __call__(self, x: TextExample) -> int:
        return self.label_batch([x])[0]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {str(self.model_dir)!r})"

    @cached_property
    def _weights(self) -> str:
        return model_digest(self.model_dir)

    def cache_key(self) -> str:
        """Name, class, settings and the model's :func:`model_digest`."""
        key = f"{type(self).__name__}|{self.name}|{self.settings()}|{self._weights}"
        return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _check_threshold(name: str, threshold: float) -> float:
    if not 0.0 < threshold <= 1.0:
        raise ConfigError(f"labeling function {name!r}: threshold must be in (0, 1], got "
                          f"{threshold}")
    return float(threshold)


# ----------------------------------------------------------------------------- classifier


class PredictorLF(BatchLabelingFunction):
    """See :func:`predictor_lf`."""

    def __init__(self, name: str, model_dir: str | Path, label_map: Mapping[str, int],
                 threshold: float, batch_size: int = 64) -> None:
        super().__init__(name, model_dir)
        if not label_map:
            raise ConfigError(f"labeling function {name!r}: empty label_map")
        self.label_map = {str(k): int(v) for k, v in label_map.items()}
        self.threshold = _check_threshold(name, threshold)
        self.batch_size = batch_size

    @cached_property
    def predictor(self) -> Any:
        from muppets.transfer.predict import Predictor
        predictor = Predictor(self.model_dir, batch_size=self.batch_size)
        if predictor.kind not in ("classify", "pair"):
            raise ConfigError(f"labeling function {self.name!r}: {self.model_dir} is a "
                              f"{predictor.kind} model; predictor_lf needs a classifier")
        missing = sorted(set(self.label_map) - set(predictor.labels))
        if missing:
            raise ConfigError(f"labeling function {self.name!r}: labels {missing} not among the "
                              f"model's {predictor.labels}")
        return predictor

    def settings(self) -> str:
        return repr((sorted(self.label_map.items()), self.threshold))

    def label_batch(self, examples: Sequence[TextExample]) -> list[int]:
        inputs = [ex.text if ex.text_b is None else (ex.text, ex.text_b) for ex in examples]
        probs = self.predictor.predict_proba(inputs)  # (n, C)
        columns = [(self.predictor.labels.index(lab), vote) for lab, vote in self.label_map.items()]
        out = []
        for row in probs:
            c, vote = max(columns, key=lambda cv: row[cv[0]])
            out.append(vote if row[c] >= self.threshold else ABSTAIN)
        return out


def predictor_lf(name: str, model_dir: str | Path, label_map: Mapping[str, int],
                 threshold: float = 0.9, batch_size: int = 64) -> PredictorLF:
    """A fine-tuned classifier as an LF: votes ``label_map[label]`` for the mapped model label
    with the highest probability, when that probability is ``>= threshold``; else ABSTAIN.
    Model labels left out of ``label_map`` never vote (``{"1": HAM}``: only "positive")."""
    return PredictorLF(name, model_dir, label_map, threshold, batch_size)


# ----------------------------------------------------------------------------- tagger


_TOKEN = re.compile(r"\w+(?:'\w+)?|[^\w\s]")  # words and punctuation apart, as CoNLL tokens


class TaggerLF(BatchLabelingFunction):
    """See :func:`tagger_lf`."""

    def __init__(self, name: str, model_dir: str | Path, entity: str, label: int,
                 threshold: float, max_words: int, batch_size: int = 64) -> None:
        super().__init__(name, model_dir)
        self.entity, self.label = entity, int(label)
        self.threshold = _check_threshold(name, threshold)
        self.max_words, self.batch_size = max_words, batch_size

    @cached_property
    def predictor(self) -> Any:
        from muppets.transfer.predict import Predictor
        predictor = Predictor(self.model_dir, batch_size=self.batch_size)
        if predictor.kind != "tag":
            raise ConfigError(f"labeling function {self.name!r}: {self.model_dir} is a "
                              f"{predictor.kind} model; tagger_lf needs a tagger")
        if not self.columns_of(predictor.labels):
            raise ConfigError(f"labeling function {self.name!r}: no {self.entity!r} tags among "
                              f"the model's {predictor.labels}")
        return predictor

    def columns_of(self, labels: Sequence[str]) -> list[int]:
        """The tags of the entity type: ``B-PER``, ``I-PER`` (BIO) or plain ``PER``."""
        return [i for i, t in enumerate(labels) if t == self.entity or t[2:] == self.entity]

    def settings(self) -> str:
        return repr((self.entity, self.label, self.threshold, self.max_words, _TOKEN.pattern))

    def label_batch(self, examples: Sequence[TextExample]) -> list[int]:
        tokens = [_TOKEN.findall(ex.text) for ex in examples]
        short = [i for i, t in enumerate(tokens) if 0 < len(t) < self.max_words]
        out = [ABSTAIN] * len(examples)
        if not short:
            return out
        columns = self.columns_of(self.predictor.labels)
        for i, probs in zip(short, self.predictor.predict_proba([tokens[i] for i in short])):
            if len(probs) and float(probs[:, columns].sum(axis=1).max()) >= self.threshold:
                out[i] = self.label
        return out


def tagger_lf(name: str, model_dir: str | Path, entity: str, label: int, threshold: float = 0.9,
              max_words: int = 20, batch_size: int = 64) -> TaggerLF:
    """A fine-tuned tagger as an LF: votes ``label`` when a text of fewer than ``max_words``
    tokens (words and punctuation apart) has a word tagged ``entity`` (``B-``/``I-`` tags
    summed) with probability ``>= threshold``; else ABSTAIN."""
    return TaggerLF(name, model_dir, entity, label, threshold, max_words, batch_size)


# ----------------------------------------------------------------------------- prototypes


class PrototypeLF(BatchLabelingFunction):
    """See :func:`prototype_lf`."""

    def __init__(self, name: str, model_dir: str | Path, prototypes: Mapping[int, Sequence[str]],
                 margin: float, max_words: int = 100, batch_size: int = 32) -> None:
        super().__init__(name, model_dir)
        if len(prototypes) < 2 or not all(prototypes.values()):
            raise ConfigError(f"labeling function {name!r}: prototype sentences for 2 or more "
                              "classes")
        self.prototypes = {int(c): tuple(v) for c, v in prototypes.items()}
        self.margin, self.max_words, self.batch_size = float(margin), max_words, batch_size

    @cached_property
    def embedder(self) -> Any:
        from muppets.transfer.embedders import load_embedder
        return load_embedder(self.model_dir, pooling="mean")

    def settings(self) -> str:
        head = "sentence-head" if (self.model_dir / "modules.json").is_file() else "word-mean"  # cached votes differ
        return repr((sorted(self.prototypes.items()), self.margin, self.max_words, _TOKEN.pattern, head))

    @cached_property
    def sentence_model(self) -> Any:
        """A sentence-transformers directory's own head (pooling, dense, normalize); None for
        any other model, whose sentence vector is the mean of its top layer's word vectors."""
        from muppets.sentence.encode import SentenceModel
        return SentenceModel(self.model_dir) if (self.model_dir / "modules.json").is_file() else None

    def vectors(self, texts: Sequence[str]) -> np.ndarray:
        """``(n, D)`` unit vectors: the model's sentence head's, or the mean of the top layer's
        word vectors."""
        from muppets.transfer.embed import embed
        words = [(_TOKEN.findall(t) or ["."])[: self.max_words] for t in texts]
        if self.sentence_model is not None:
            out = self.sentence_model.encode([" ".join(w) for w in words], self.batch_size)  # (n, D)
            return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        rows = embed(self.embedder, words, layers=[-1], batch_size=self.batch_size)
        mean = np.stack([r[0].mean(axis=0) for r in rows])  # (n, D)
        return mean / np.maximum(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12)

    def similarities(self, texts: Sequence[str]) -> np.ndarray:
        """``(n, K)`` mean cosine similarity to each class's prototypes (classes sorted)."""
        classes = sorted(self.prototypes)
        protos = self.vectors([p for c in classes for p in self.prototypes[c]])
        sims = self.vectors(texts) @ protos.T  # (n, total prototypes)
        out, k = np.empty((len(texts), len(classes))), 0
        for j, c in enumerate(classes):
            n = len(self.prototypes[c])
            out[:, j] = sims[:, k:k + n].mean(axis=1)
            k += n
        return out

    def label_batch(self, examples: Sequence[TextExample]) -> list[int]:
        if not examples:
            return []
        return _vote_by_margin(self.similarities([ex.text for ex in examples]),
                               sorted(self.prototypes), self.margin)


def prototype_lf(name: str, model_dir: str | Path, prototypes: Mapping[int, Sequence[str]],
                 margin: float = 0.0, max_words: int = 100, batch_size: int = 32) -> PrototypeLF:
    """A sentence encoder as an LF (see the module docstring): votes the class whose
    prototype sentences are closest on average (cosine), if it beats the next by ``margin``."""
    return PrototypeLF(name, model_dir, prototypes, margin, max_words, batch_size)


def _vote_by_margin(scores: np.ndarray, classes: Sequence[int], margin: float) -> list[int]:
    """Per row of ``scores`` (n, K): the best class if it beats the next by ``margin`` (and by
    more than 0: a tie abstains), else ABSTAIN."""
    top = np.sort(scores, axis=1)
    best = scores.argmax(axis=1)
    return [classes[b] if gap >= margin and gap > 0 else ABSTAIN
            for b, gap in zip(best, top[:, -1] - top[:, -2])]


# ----------------------------------------------------------------------------- zero-shot GPT


class ZeroShotLF(BatchLabelingFunction):
    """See :func:`zero_shot_lf`."""

    def __init__(self, name: str, model_dir: str | Path, template: str,
                 verbalizers: Mapping[int, str | Sequence[str]], margin: float,
                 calibrate: bool, batch_size: int = 16) -> None:
        super().__init__(name, model_dir)
        if "{text}" not in template:
            raise ConfigError(f"labeling function {name!r}: the template needs a {{text}} slot")
        if len(verbalizers) < 2:
            raise ConfigError(f"labeling function {name!r}: verbalizers for 2 or more classes")
        if margin < 0:
            raise ConfigError(f"labeling function {name!r}: margin must be >= 0, got {margin}")
        self.template = template
        self.verbalizers = {int(c): (v,) if isinstance(v, str) else tuple(v)
                            for c, v in verbalizers.items()}
        self.margin, self.calibrate, self.batch_size = float(margin), calibrate, batch_size

    @cached_property
    def lm(self) -> tuple[Any, Any]:
        from muppets.interop.hf_gpt import load_hf_gpt
        from muppets.tokenizers import ByteLevelBPETokenizer
        return load_hf_gpt(self.model_dir).eval(), ByteLevelBPETokenizer.load(self.model_dir)

    def settings(self) -> str:
        return repr((self.template, sorted(self.verbalizers.items()), self.margin, self.calibrate))

    def scores(self, texts: Sequence[str]) -> np.ndarray:
        """``(n, K)`` class scores (classes in sorted order), calibrated if asked."""
        from muppets.transfer.zeroshot import continuation_logprobs
        model, tok = self.lm
        classes = sorted(self.verbalizers)
        pairs = [(self.template.replace("{text}", t), v)
                 for t in [*texts, "N/A"] for c in classes for v in self.verbalizers[c]]
        logp = [s for s, _ in continuation_logprobs(model, tok, [p for p, _ in pairs],
                                                     [v for _, v in pairs], self.batch_size)]
        per_text = sum(len(self.verbalizers[c]) for c in classes)
        out = np.empty((len(texts) + 1, len(classes)))
        for i in range(len(texts) + 1):
            row, k = logp[i * per_text:(i + 1) * per_text], 0
            for j, c in enumerate(classes):
                n = len(self.verbalizers[c])
                out[i, j] = np.logaddexp.reduce(row[k:k + n])
                k += n
        return out[:-1] - out[-1] if self.calibrate else out[:-1]

    def label_batch(self, examples: Sequence[TextExample]) -> list[int]:
        if not examples:
            return []
        return _vote_by_margin(self.scores([ex.text for ex in examples]),
                               sorted(self.verbalizers), self.margin)


def zero_shot_lf(name: str, model_dir: str | Path, template: str,
                 verbalizers: Mapping[int, str | Sequence[str]], margin: float = 0.0,
                 calibrate: bool = True, batch_size: int = 16) -> ZeroShotLF:
    """A GPT language model prompted zero-shot as an LF (see the module docstring).

    ``template`` holds ``{text}``, e.g. ``"Review: {text}\\nSentiment:"``; ``verbalizers``
    maps each class to its continuation(s), e.g. ``{0: " negative", 1: " positive"}`` (mind the
    leading space); the LF votes the best class if it beats the next by ``margin`` nats."""
    return ZeroShotLF(name, model_dir, template, verbalizers, margin, calibrate, batch_size)
