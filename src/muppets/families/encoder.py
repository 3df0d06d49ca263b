"""What every bidirectional encoder family shares: one :class:`Family` built from its
:class:`~muppets.interop.hf_bert.EncoderFormat` (names) and its tokenizer loader.

BERT, RoBERTa / XLM-R / CamemBERT, DistilBERT and ELECTRA all run on
:class:`~muppets.models.bert.BertBackbone` (the maths is the same; the differences are config
flags), so loading, saving and task-model I/O are the same functions called with another format.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from muppets.families.registry import Family, config_reader
from muppets.heads import TaskModel
from muppets.interop.hf_bert import EncoderFormat, load_hf_bert, save_hf_bert
from muppets.interop.hf_tasks import load_hf_task_model, save_hf_task_model
from muppets.interop.model_card import Provenance
from muppets.interop.safetensors_io import read_shapes
from muppets.models.bert import BertForPreTraining


def encoder_family(name: str, model_types: tuple[str, ...], fmt: EncoderFormat,
                   tokenizer: Callable[[Path], Any], token_types: bool, description: str) -> Family:
    """A :class:`Family` whose models are :class:`~muppets.models.bert.BertForPreTraining` and
    whose directories are written in ``fmt``'s names."""

    def new_task_model(directory: str | Path, kind: str, num_labels: int | None, tok: Any = None,
                       orderings: int = 1, lm_coef: float = 0.0, pool: str | None = None,
                       dropout: float | None = None) -> TaskModel:
        model = load_hf_task_model(directory, kind=kind, num_labels=num_labels, pool=pool, dropout=dropout, fmt=fmt)
        model.family = name
        return model

    def load_task_model(directory: str | Path, kind: str | None = None, num_labels: int | None = None) -> TaskModel:
        model = load_hf_task_model(directory, kind=kind, num_labels=num_labels, fmt=fmt)
        model.family = name
        return model

    def save_task_model(model: TaskModel, directory: str | Path, tok: Any = None, labels: Sequence[str] = (),
                        provenance: Provenance | None = None, label_names: Sequence[str] = ()) -> Path:
        return save_hf_task_model(model, directory, tok, list(labels), fmt=fmt, provenance=provenance,
                                  label_names=list(label_names))

    def has_mlm(directory: Path) -> bool:
        return f"{fmt.heads['mlm.dense']}.weight" in read_shapes(directory)

    return Family(
        name=name, model_types=model_types, causal=False, token_types=token_types,
        load=partial(load_hf_bert, fmt=fmt), save=partial(_save, fmt=fmt), tokenizer=tokenizer,
        task_tokenizer=tokenizer, new_task_model=new_task_model, load_task_model=load_task_model,
        save_task_model=save_task_model, has_mlm=has_mlm, build=BertForPreTraining,
        read_config=config_reader(fmt.from_config), description=description)


def _save(model: Any, directory: str | Path, tokenizer: Any = None,
          dropout: tuple[float, float] | None = None, provenance: Provenance | None = None, *,
          fmt: EncoderFormat) -> Path:
    return save_hf_bert(model, directory, tokenizer, dropout, fmt=fmt, provenance=provenance)
