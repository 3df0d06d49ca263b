"""Which model family a directory holds, and the task model / tokenizer of each.

Fine-tuning, evaluation and :class:`~muppets.transfer.predict.Predictor` call these instead of a
family's own loaders, so one pipeline serves BERT (WordPiece, ``[CLS]`` pooler, HF ``BertFor…``
directories — :mod:`muppets.interop.hf_tasks`) and GPT / GPT-2 (byte-level BPE with task tokens,
last-token head, auxiliary LM loss — :mod:`muppets.transfer.gpt_tasks`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from muppets.errors import CheckpointError
from muppets.heads import TaskModel
from muppets.interop.hf_tasks import load_hf_task_model, save_hf_task_model
from muppets.interop.safetensors_io import read_json_object
from muppets.tokenizers.wordpiece import WordPieceTokenizer
from muppets.transfer.gpt_tasks import (GPTTaskModel, GPTTaskTokenizer, build_gpt_task_model,
                                        load_gpt_task_model, save_gpt_task_model)

GPT_TYPES = ("gpt2", "openai-gpt")
SIMILARITY_TASKS = ("mrpc", "stsb", "qqp")  # GPT reads both orders of these pairs (§3.3)


def family(directory: str | Path) -> str:
    """``"gpt"`` for an HF GPT-2 / GPT-1 directory, else ``"bert"``."""
    path = Path(directory) / "config.json"
    if not path.is_file():
        raise CheckpointError(f"{directory}: no config.json (is this a Hugging Face model directory?)")
    model_type = read_json_object(path).get("model_type", "bert")
    return "gpt" if model_type in GPT_TYPES else "bert"


def load_tokenizer(directory: str | Path) -> WordPieceTokenizer | GPTTaskTokenizer:
    """The task tokenizer of a model directory (GPT: with its start/delim/extract tokens)."""
    if family(directory) == "gpt":
        return GPTTaskTokenizer.load(directory)
    return WordPieceTokenizer.load(directory)


def default_orderings(task_name: str, kind: str, directory: str | Path) -> int:
    """2 for GPT on similarity pairs (both orders, §3.3), else 1."""
    gpt = family(directory) == "gpt"
    return 2 if gpt and kind in ("pair", "regress") and task_name in SIMILARITY_TASKS else 1


def new_task_model(directory: str | Path, kind: str, num_labels: int | None,
                   tok: WordPieceTokenizer | GPTTaskTokenizer, orderings: int = 1,
                   lm_coef: float = 0.5, pool: str | None = None, dropout: float | None = None) -> TaskModel:
    """A task model to fine-tune: the directory's backbone (and head, when it fits) + a head.
    ``pool``: the sentence vector (default: BERT ``first``, GPT ``last``); ``dropout``: every
    dropout of the backbone and the head (default: the directory's config.json)."""
    if family(directory) == "gpt":
        assert isinstance(tok, GPTTaskTokenizer)
        return build_gpt_task_model(directory, kind, num_labels or 0, tok, orderings, lm_coef,
                                    pool=pool or "last", dropout=dropout)
    return load_hf_task_model(directory, kind=kind, num_labels=num_labels, pool=pool, dropout=dropout)


def load_task_model(directory: str | Path, kind: str | None = None,
                    num_labels: int | None = None) -> TaskModel:
    """A fine-tuned task model, as saved by :func:`save_task_model`. A directory without the
    task's trained head (a pretrained encoder) is refused: scoring or serving a head of random
    weights would report numbers that mean nothing."""
    if family(directory) == "gpt":
        return load_gpt_task_model(directory)
    model = load_hf_task_model(directory, kind=kind, num_labels=num_labels)
    if model.fresh_head:
        hint = ("it was fine-tuned for another label set" if any("has shape" in r for r in model.fresh_head) else
                "a fine-tuned task directory is needed (muppets finetune's best/), not a pretrained model")
        raise CheckpointError(f"{directory}: has no trained {model.kind} head for this task "
                              f"({'; '.join(model.fresh_head)}): {hint}")
    return model


def save_task_model(model: TaskModel, directory: str | Path,
                    tok: WordPieceTokenizer | GPTTaskTokenizer, labels: Sequence[str] = ()) -> Path:
    """Write a task model so :func:`load_task_model` (and, for BERT, transformers) reads it."""
    if isinstance(model, GPTTaskModel):
        assert isinstance(tok, GPTTaskTokenizer)
        return save_gpt_task_model(model, directory, tok, labels)
    return save_hf_task_model(model, directory, tok, list(labels))
