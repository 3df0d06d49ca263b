"""Which model family a directory holds, and the task model / tokenizer of each.

Fine-tuning, evaluation and :class:`~muppets.transfer.predict.Predictor` call these instead of a
family's own loaders; each is one look-up in :mod:`muppets.families` (BERT, RoBERTa / XLM-R,
DistilBERT, ELECTRA — HF ``…For<Task>`` directories, :mod:`muppets.interop.hf_tasks` — and
GPT / GPT-2 — byte-level BPE with task tokens, last-token head, auxiliary LM loss,
:mod:`muppets.transfer.gpt_tasks`), so no code here knows a family by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from muppets import families
from muppets.errors import CheckpointError
from muppets.heads import TaskModel
from muppets.interop.model_card import Provenance

SIMILARITY_TASKS = ("mrpc", "stsb", "qqp")  # a family with pair_orderings 2 (GPT) reads both orders of these pairs (§3.3)


def family(directory: str | Path) -> str:
    """The name of the family of an HF model directory (``bert``, ``gpt``, ``roberta`` …)."""
    return families.of_directory(directory).name


def load_tokenizer(directory: str | Path) -> Any:
    """The task tokenizer of a model directory (GPT: with its start/delim/extract tokens)."""
    return families.of_directory(directory).task_tokenizer(directory)


def default_orderings(task_name: str, kind: str, directory: str | Path) -> int:
    """The family's pair orderings (GPT: 2) on similarity pairs, else 1."""
    similarity = kind in ("pair", "regress") and task_name in SIMILARITY_TASKS
    return families.of_directory(directory).pair_orderings if similarity else 1


def new_task_model(directory: str | Path, kind: str, num_labels: int | None, tok: Any, orderings: int = 1,
                   lm_coef: float = 0.5, pool: str | None = None, dropout: float | None = None) -> TaskModel:
    """A task model to fine-tune: the directory's backbone (and head, when it fits) + a head.
    ``pool``: the sentence vector (default: the family's, ``first`` or GPT's ``last``);
    ``dropout``: every dropout of the backbone and the head (default: the directory's config.json)."""
    return families.of_directory(directory).new_task_model(directory, kind, num_labels, tok, orderings,
                                                            lm_coef, pool=pool, dropout=dropout)


def load_task_model(directory: str | Path, kind: str | None = None,
                    num_labels: int | None = None) -> TaskModel:
    """A fine-tuned task model, as saved by :func:`save_task_model`. A directory without the
    task's trained head (a pretrained encoder) is refused: scoring or serving a head of random
    weights would report numbers that mean nothing."""
    model = families.of_directory(directory).load_task_model(directory, kind=kind, num_labels=num_labels)
    if model.fresh_head:
        hint = ("it was fine-tuned for another label set" if any("has shape" in r for r in model.fresh_head) else
                "a fine-tuned task directory is needed (muppets finetune's best/), not a pretrained model")
        raise CheckpointError(f"{directory}: has no trained {model.kind} head for this task "
                              f"({'; '.join(model.fresh_head)}): {hint}")
    return model


def save_task_model(model: TaskModel, directory: str | Path, tok: Any, labels: Sequence[str] = (),
                    provenance: Provenance | None = None, label_names: Sequence[str] = ()) -> Path:
    """Write a task model in its family's names, so :func:`load_task_model` (and, for the
    encoder families, transformers) reads it, with a model card from ``provenance``.
    ``labels`` are the task's label values, ``label_names`` their readable names (default: the
    labels), which predictions show (:func:`~muppets.interop.hf_tasks.saved_label_names`)."""
    return families.of_model(model).save_task_model(model, directory, tok, labels, provenance=provenance,
                                                    label_names=label_names)
