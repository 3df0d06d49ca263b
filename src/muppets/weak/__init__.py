"""Weak supervision: labeling functions → label matrix → label model → probabilistic labels.

* :mod:`~muppets.weak.lf` — labeling functions (decorator, classes, keyword / regex / lexicon /
  length builders, LF files)
* :mod:`~muppets.weak.apply` — the applier (parallel, progress bar, cache) and text files
* :mod:`~muppets.weak.analysis` — Snorkel-equal LF summary, table and plot
* :mod:`~muppets.weak.majority`, :mod:`~muppets.weak.dawid_skene`,
  :mod:`~muppets.weak.label_model` — the label models (shared API in :mod:`~muppets.weak.base`)
"""

from muppets.weak.analysis import LFSummary, lf_summary, plot_lf_summary
from muppets.weak.apply import apply_lfs, read_texts
from muppets.weak.dawid_skene import DawidSkene
from muppets.weak.label_model import LabelModel
from muppets.weak.lf import (ABSTAIN, LabelingFunction, keyword_lf, labeling_function, length_lf,
                             lexicon_lf, load_lfs, regex_lf)
from muppets.weak.majority import MajorityVote

__all__ = ["ABSTAIN", "LabelingFunction", "labeling_function", "keyword_lf", "regex_lf",
           "lexicon_lf", "length_lf", "load_lfs", "apply_lfs", "read_texts", "LFSummary",
           "lf_summary", "plot_lf_summary", "MajorityVote", "DawidSkene", "LabelModel",
           "MODELS", "make_label_model"]

MODELS = ("majority", "dawid-skene", "snorkel")  # names the CLI accepts


def make_label_model(name: str, cardinality: int):
    """A fresh label model by CLI name (``majority``, ``dawid-skene``, ``snorkel``)."""
    from muppets.errors import ConfigError
    builders = {"majority": MajorityVote, "dawid-skene": DawidSkene, "snorkel": LabelModel}
    if name not in builders:
        raise ConfigError(f"unknown label model {name!r}; choose one of {MODELS}")
    return builders[name](cardinality)
