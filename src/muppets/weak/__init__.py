"""Weak supervision: labeling functions → label matrix → label model → probabilistic labels.

* :mod:`~muppets.weak.lf` — labeling functions (decorator, classes, keyword / regex / lexicon /
  length builders, LF files)
* :mod:`~muppets.weak.apply` — the applier (parallel, progress bar, cache) and text files
* :mod:`~muppets.weak.model_lfs` — model-based LFs from muppets models (a fine-tuned
  classifier or tagger with a threshold, prototype sentences, a zero-shot GPT prompt),
  applied in batches
* :mod:`~muppets.weak.analysis` — Snorkel-equal LF summary, table and plot
* :mod:`~muppets.weak.majority`, :mod:`~muppets.weak.dawid_skene`,
  :mod:`~muppets.weak.label_model` — the label models (shared API in :mod:`~muppets.weak.base`)
* :mod:`~muppets.weak.pipeline` — what ``muppets weak analyze|label`` do

Names are imported on first use, so ``muppets --help`` does not load torch.
"""

from __future__ import annotations

import importlib
from typing import Any

MODELS = ("majority", "dawid-skene", "snorkel")  # label model names the CLI accepts

_HOME = {
    "ABSTAIN": "lf", "LabelingFunction": "lf", "labeling_function": "lf", "keyword_lf": "lf",
    "regex_lf": "lf", "lexicon_lf": "lf", "length_lf": "lf", "load_lfs": "lf",
    "apply_lfs": "apply", "read_texts": "apply",
    "LFSummary": "analysis", "lf_summary": "analysis", "plot_lf_summary": "analysis",
    "predictor_lf": "model_lfs", "tagger_lf": "model_lfs", "zero_shot_lf": "model_lfs",
    "prototype_lf": "model_lfs",
    "MajorityVote": "majority", "DawidSkene": "dawid_skene", "LabelModel": "label_model",
    "covered": "matrix",
}

__all__ = [*_HOME, "MODELS", "make_label_model"]


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(f"muppets.weak.{_HOME[name]}"), name)
    raise AttributeError(f"module 'muppets.weak' has no attribute {name!r}")


def make_label_model(name: str, cardinality: int, class_balance: Any = None) -> Any:
    """A fresh label model by CLI name: ``majority`` (:class:`MajorityVote`), ``dawid-skene``
    (:class:`DawidSkene`), ``snorkel`` (:class:`LabelModel`, the Snorkel-style model); each
    takes a fixed ``class_balance`` (None: learned by the latent-class models, unused by
    majority vote, which then abstains on rows no LF labels)."""
    from muppets.errors import ConfigError
    homes = {"majority": "MajorityVote", "dawid-skene": "DawidSkene", "snorkel": "LabelModel"}
    if name not in homes:
        raise ConfigError(f"unknown label model {name!r}; choose one of {MODELS}")
    return __getattr__(homes[name])(cardinality, class_balance=class_balance)
