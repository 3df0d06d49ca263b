"""GPT-1 and GPT-2 (Radford et al. 2018, 2019): the left-to-right family.

Weights: :mod:`muppets.interop.hf_gpt` (Conv1D transposes); byte-level BPE; task models add
``<|start|> <|delim|> <|extract|>`` and an auxiliary LM loss (:mod:`muppets.transfer.gpt_tasks`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from muppets.families.registry import Family, config_reader, register
from muppets.heads import TaskModel
from muppets.interop.hf_gpt import config_from_hf, load_hf_gpt, save_hf_gpt
from muppets.interop.model_card import Provenance
from muppets.models.gpt import GPTLanguageModel
from muppets.tokenizers.bpe import ByteLevelBPETokenizer
from muppets.transfer.gpt_tasks import (GPTTaskTokenizer, build_gpt_task_model, load_gpt_task_model,
                                        save_gpt_task_model)


def _new_task_model(directory: str | Path, kind: str, num_labels: int | None, tok: GPTTaskTokenizer,
                    orderings: int = 1, lm_coef: float = 0.5, pool: str | None = None,
                    dropout: float | None = None) -> TaskModel:
    model = build_gpt_task_model(directory, kind, num_labels or 0, tok, orderings, lm_coef,
                                 pool=pool or "last", dropout=dropout)
    model.family = "gpt"
    return model


def _load_task_model(directory: str | Path, kind: str | None = None, num_labels: int | None = None) -> TaskModel:
    model = load_gpt_task_model(directory)
    model.family = "gpt"
    return model


def _save_task_model(model: Any, directory: str | Path, tok: GPTTaskTokenizer, labels: Sequence[str] = (),
                     provenance: Provenance | None = None, label_names: Sequence[str] = ()) -> Path:
    return save_gpt_task_model(model, directory, tok, labels, provenance, label_names)


FAMILY = register(Family(
    name="gpt", model_types=("gpt2", "openai-gpt"), causal=True, token_types=False,
    load=load_hf_gpt, save=save_hf_gpt, tokenizer=ByteLevelBPETokenizer.load,
    task_tokenizer=GPTTaskTokenizer.load, new_task_model=_new_task_model,
    load_task_model=_load_task_model, save_task_model=_save_task_model,
    has_mlm=lambda directory: False, build=GPTLanguageModel, read_config=config_reader(config_from_hf),
    pair_orderings=2,
    description="GPT-1 / GPT-2: byte-level BPE, causal LM, task tokens + auxiliary LM loss"))
