"""The one table of model families: every command finds a directory's family here.

A :class:`Family` is registered once (by its module in :mod:`muppets.families`) with the
``model_type`` values of config.json it reads, its loaders and writers, and the few properties
callers branch on — so code that runs a model asks the family, and never tests its name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from muppets.errors import CheckpointError
from muppets.interop.safetensors_io import read_json_object

DEFAULT_MODEL_TYPE = "bert"  # what a config.json without a model_type is (older BERT directories)


@dataclass(frozen=True)
class Family:
    """One model family: how its Hugging Face directories are read and written, and what it is.

    The callables take a model directory first; ``load`` returns the pretraining (or LM) model,
    which has ``.cfg`` and ``.backbone`` (an ``Encoded``-returning module, the contract of
    docs/concepts/architecture.md).
    """

    name: str  # registry key; also the "kind" embedders and pages report
    model_types: tuple[str, ...]  # config.json "model_type" values this family reads
    causal: bool  # left-to-right: words pooled by their last piece, causal attention pages, LM routes
    token_types: bool  # inputs carry segment ids the model was trained with (BERT, ELECTRA)
    load: Callable[..., nn.Module]  # (directory, **config overrides) -> pretraining / LM model; an encoder's also heads=("mlm", …) run
    save: Callable[..., Path]  # (model, directory, tokenizer=None, provenance=None) -> directory, in this family's names, with its model card
    tokenizer: Callable[[Path], Any]  # directory -> its text tokenizer
    task_tokenizer: Callable[[Path], Any]  # directory -> the tokenizer task features use (GPT: with task tokens)
    new_task_model: Callable[..., Any]  # (directory, kind, num_labels, tok, orderings, lm_coef, pool, dropout)
    load_task_model: Callable[..., Any]  # (directory, kind=None, num_labels=None) -> TaskModel
    save_task_model: Callable[..., Path]  # (model, directory, tok, labels, provenance=None, label_names=()) -> directory, with its model card
    has_mlm: Callable[[Path], bool]  # whether a directory's weights hold a masked-LM head (fill-mask)
    build: Callable[[Any], nn.Module]  # config -> a freshly initialised model of the kind ``load`` returns
    read_config: Callable[[Path], Any]  # directory -> its config.json as our config (what ``build`` takes)
    pair_orderings: int = 1  # GPT: similarity pairs are read in both orders (Radford et al. 2018, §3.3)
    onnx: bool = True  # its models trace to ONNX (muppets export onnx); a packed BiLSTM's lengths do not
    description: str = ""  # one line for tables and errors

    @property
    def default_pooling(self) -> str:
        """The piece a word is read from: ``last`` for a left-to-right model, the only piece it
        reads after seeing the whole word; ``first`` for the bidirectional encoders."""
        return "last" if self.causal else "first"


def config_reader(from_hf: Callable[[dict, str], Any]) -> Callable[[Path], Any]:
    """A family's ``read_config``: ``directory/config.json`` through ``from_hf(data, source)``."""
    def read_config(directory: str | Path) -> Any:
        path = Path(directory) / "config.json"
        if not path.is_file():
            raise CheckpointError(f"{directory}: no config.json (is this a Hugging Face model directory?)")
        return from_hf(read_json_object(path), str(path))

    return read_config


_FAMILIES: dict[str, Family] = {}
_BY_MODEL_TYPE: dict[str, Family] = {}


def register(family: Family) -> Family:
    """Add a family to the table (each name and model_type once)."""
    clash = [t for t in family.model_types if t in _BY_MODEL_TYPE and _BY_MODEL_TYPE[t] is not family]
    if family.name in _FAMILIES or clash:
        raise ValueError(f"family {family.name!r} or model_type {clash} registered twice")
    _FAMILIES[family.name] = family
    _BY_MODEL_TYPE.update({t: family for t in family.model_types})
    return family


def families() -> tuple[Family, ...]:
    """Every registered family, in registration order."""
    return tuple(_FAMILIES.values())


def get(name: str) -> Family:
    """The family called ``name``."""
    if name not in _FAMILIES:
        raise KeyError(f"no model family {name!r}; known: {', '.join(_FAMILIES)}")
    return _FAMILIES[name]


def is_family(name: str) -> bool:
    return name in _FAMILIES


def for_model_type(model_type: Any, source: str | Path = "config.json") -> Family:
    """The family of a config.json ``model_type``; an unknown one is a :class:`CheckpointError`
    naming the file, the key and the families muppets reads."""
    if isinstance(model_type, str) and model_type in _BY_MODEL_TYPE:
        return _BY_MODEL_TYPE[model_type]
    known = ", ".join(sorted(_BY_MODEL_TYPE))
    raise CheckpointError(f"{source}: key 'model_type' is {model_type!r}, not a model family muppets reads "
                          f"(one of: {known})")


def of_directory(directory: str | Path) -> Family:
    """The family of an HF model directory, from its config.json's ``model_type``."""
    path = Path(directory) / "config.json"
    if not path.is_file():
        raise CheckpointError(f"{directory}: no config.json (is this a Hugging Face model directory?)")
    return for_model_type(read_json_object(path).get("model_type", DEFAULT_MODEL_TYPE), path)


def of_model(model: nn.Module) -> Family:
    """The family a task model was built as: its ``family`` attribute, else its backbone
    config's ``model_type``, else the default's."""
    if getattr(model, "family", ""):
        return get(model.family)
    cfg = getattr(getattr(model, "backbone", None), "cfg", None)
    return for_model_type(getattr(cfg, "model_type", DEFAULT_MODEL_TYPE), "the model's config")
