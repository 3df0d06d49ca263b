"""muppets: pretrained language representations you can train on a CPU.

The notebook API (each name is imported on first use, so ``import muppets`` loads no torch):

* :func:`load` — a model directory as the right object: a fine-tuned task model as a
  :class:`Predictor`, a sentence-transformers directory as a ``SentenceModel``, a pretrained
  encoder or GPT as its model, an ELMo / NNLM / word2vec run as its embedder, an ONNX export as
  the server runs it (``OnnxPredictor``, ``OnnxSentenceModel``)
* :class:`Predictor` — a fine-tuned model on raw inputs: ``predictor(texts)`` gives labels and
  scores, entity groups with character offsets for raw text, answers with their span
* :func:`encode` — texts to sentence vectors, as sentence-transformers' ``encode``
* :mod:`weak` — labeling functions and the label models (:class:`MajorityVote`,
  :class:`DawidSkene`, :class:`LabelModel`)

Examples::

    >>> import muppets
    >>> vectors = muppets.encode(["The bank closed.", "A river bank."], model="minilm")
    >>> vectors.shape, round(float((vectors[0] ** 2).sum()), 4)
    ((2, 384), 1.0)
    >>> muppets.encode("one text").shape
    (384,)
    >>> import numpy as np
    >>> L = np.array([[0, 0, -1], [1, 1, 0], [1, -1, 1]])    # 3 rows x 3 labeling functions; -1 abstains
    >>> muppets.MajorityVote(cardinality=2).fit(L).predict(L).tolist()
    [0, 1, 1]
    >>> muppets.weak.ABSTAIN
    -1

A fine-tuned tagger on raw text (the shapes of transformers' pipelines)::

    ner = muppets.load("runs/ner/best")                      # a Predictor
    ner("John lives in Paris.")
    # [{'entity_group': 'PER', 'score': 0.99, 'word': 'John', 'start': 0, 'end': 4},
    #  {'entity_group': 'LOC', 'score': 0.98, 'word': 'Paris', 'start': 14, 'end': 19}]

Layout (see docs/concepts/architecture.md): ``tokenizers/`` → ``data/`` → ``objectives/`` →
``nn/`` + ``models/`` → ``train/`` → ``transfer/``; ``interop/`` reads and writes Hugging Face
directories; ``serve/`` is the HTTP server; ``cli.py`` is a thin shell.
"""

import importlib

__version__ = "0.1.0"

_HOME = {
    "load": "muppets.api", "encode": "muppets.api",
    "Predictor": "muppets.transfer.predict",
    "SentenceModel": "muppets.sentence.encode",
    "MajorityVote": "muppets.weak", "DawidSkene": "muppets.weak", "LabelModel": "muppets.weak",
}
_MODULES = ("weak",)

__all__ = ["__version__", *_HOME, *_MODULES]


def __getattr__(name: str) -> object:  # typing is not imported: it would double the import time
    if name in _MODULES:
        return importlib.import_module(f"muppets.{name}")
    if name in _HOME:
        return getattr(importlib.import_module(_HOME[name]), name)
    raise AttributeError(f"module 'muppets' has no attribute {name!r}")


def __dir__() -> list:
    return sorted({*globals(), *__all__})
