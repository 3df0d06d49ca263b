"""A small BiLSTM task model (Tang et al. 2019, "Distilling Task-Specific Knowledge from BERT
into Simple Neural Networks"): the student of ``muppets distill``.

Word embeddings -> dropout -> a bidirectional LSTM (packed: padding never reaches it) ->
:class:`~muppets.nn.encoded.Encoded`; the shared heads of :mod:`muppets.heads` read it. Tang's
sentence classifier is the ``max`` pool (the elementwise maximum of the BiLSTM states over the
real tokens) and a ReLU layer (``mlp_size``) before the output layer.

Inputs are ids of the teacher's WordPiece vocabulary, so a student reads the same pieces as its
teacher. A sentence pair is read as one sequence, ``[CLS] a [SEP] b [SEP]``, as the features of
every task give it; segment ids are ignored (Tang's siamese ``[a, b, a*b, |a-b|]`` is not built).

There is no pretraining model of this family: a directory holds a task model (``config.json``
with ``model_type`` ``muppets-bilstm``, ``model.safetensors`` in our own names, the tokenizer
files), which every command that takes a fine-tuned directory reads (evaluate, Predictor, serve
/predict). It is not exported to ONNX (packed sequences have data-dependent lengths).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from muppets.config import from_dict
from muppets.errors import CheckpointError, ConfigError
from muppets.families.registry import Family, config_reader, register
from muppets.heads import TaskModel, build_head
from muppets.interop.hf_tasks import architecture_of, task_entries, task_kind
from muppets.interop.model_card import Provenance, write_config, write_model_card
from muppets.interop.safetensors_io import read_json_object, read_weights, write_weights
from muppets.nn.block import init_weights
from muppets.nn.encoded import Encoded
from muppets.nn.lstm import packed_lstm
from muppets.tokenizers.wordpiece import WordPieceTokenizer

MODEL_TYPE = "muppets-bilstm"
NAME = "bilstm"


@dataclass
class BiLSTMConfig:
    """A BiLSTM task model's sizes (Tang et al. 2019: 300-d embeddings, one BiLSTM layer)."""

    vocab_size: int = 30522  # embedding rows: the (teacher's) WordPiece vocabulary
    embedding_size: int = 300  # E, width of a word embedding (Tang: 300-d word2vec)
    lstm_size: int = 150  # LSTM state per direction; the Encoded width (hidden_size) is 2 * lstm_size
    num_layers: int = 1  # stacked BiLSTM layers
    dropout: float = 0.1  # on the embeddings, between LSTM layers and in the head
    mlp_size: int = 0  # sentence heads: width of the ReLU layer before the output (Tang's MLP); 0 = none
    max_position_embeddings: int = 512  # longest input the features may build (an LSTM has no position table)
    pad_token_id: int = 0  # the tokenizer's [PAD] id: its embedding row stays zero
    initializer_range: float = 0.1  # std of fresh embedding rows and head weights (the LSTM: torch's U(±1/√lstm_size))
    model_type: str = MODEL_TYPE  # config.json "model_type"

    def __post_init__(self) -> None:
        checks = [("vocab_size", self.vocab_size > 0), ("embedding_size", self.embedding_size > 0),
                  ("lstm_size", self.lstm_size > 0), ("num_layers", self.num_layers >= 1),
                  ("dropout", 0.0 <= self.dropout < 1.0), ("mlp_size", self.mlp_size >= 0),
                  ("max_position_embeddings", self.max_position_embeddings > 0),
                  ("pad_token_id", 0 <= self.pad_token_id < self.vocab_size),
                  ("initializer_range", self.initializer_range > 0), ("model_type", self.model_type == MODEL_TYPE)]
        for key, ok in checks:
            if not ok:
                raise ConfigError(f"BiLSTMConfig: {key}={getattr(self, key)!r} is out of range", key=key)

    @property
    def hidden_size(self) -> int:
        """Width of the Encoded output (what heads read): both directions, ``2 * lstm_size``."""
        return 2 * self.lstm_size

    @property
    def max_positions(self) -> int:
        """The longest input (as :attr:`muppets.models.bert.BertConfig.max_positions`)."""
        return self.max_position_embeddings


class BiLSTMBackbone(nn.Module):
    """``input_ids (B, T)`` -> Encoded: ``layers = [embeddings (B, T, E), BiLSTM states (B, T, 2·lstm_size)]``
    (the two widths are equal with the defaults, E = 300 = 2 · 150), zero at padding."""

    def __init__(self, cfg: BiLSTMConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embeddings = nn.Embedding(cfg.vocab_size, cfg.embedding_size, padding_idx=cfg.pad_token_id)
        self.lstm = nn.LSTM(cfg.embedding_size, cfg.lstm_size, num_layers=cfg.num_layers, batch_first=True,
                            bidirectional=True, dropout=cfg.dropout if cfg.num_layers > 1 else 0.0)
        self.dropout = nn.Dropout(cfg.dropout)
        init_weights(self.embeddings, cfg.initializer_range)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, unpad: bool = False) -> Encoded:
        """``token_type_ids`` are ignored (a pair is one sequence); ``unpad`` is accepted for the
        backbones' common signature: the LSTM reads packed rows always."""
        mask = (input_ids != self.cfg.pad_token_id) if attention_mask is None else attention_mask.bool()  # (B, T)
        x = self.embeddings(input_ids) * mask[..., None]  # (B, T, E)
        states = packed_lstm(self.lstm, self.dropout(x), mask)  # (B, T, 2·lstm_size)
        return Encoded([x, states], mask)


# ----------------------------------------------------------------------------- task models


def build_task_model(cfg: BiLSTMConfig, kind: str, num_labels: int, pool: str = "max") -> TaskModel:
    """A freshly initialised BiLSTM task model of ``kind`` (heads: :func:`muppets.heads.build_head`)."""
    head = build_head(kind, cfg.hidden_size, num_labels, cfg.dropout, cfg.initializer_range, pool=pool,
                      mlp_size=cfg.mlp_size)
    model = TaskModel(BiLSTMBackbone(cfg), head, kind)
    model.family = NAME
    return model


def new_student(kind: str, num_labels: int, vocab_size: int, pad_id: int,
                embeddings: torch.Tensor | None = None, pool: str = "max", **config_overrides: Any) -> TaskModel:
    """A fresh BiLSTM student for ``muppets distill``: ids of a ``vocab_size`` vocabulary
    (the teacher's) whose ``[PAD]`` is ``pad_id``.

    ``embeddings``: a ``(vocab_size, E)`` table to start the word embeddings from (the teacher's
    word embeddings, word2vec vectors …; sets ``embedding_size = E``); None: random rows.
    ``config_overrides``: other :class:`BiLSTMConfig` fields (``lstm_size=300``, ``mlp_size=400`` …).
    """
    if embeddings is not None:
        if embeddings.dim() != 2 or embeddings.shape[0] != vocab_size:
            raise ConfigError(f"embeddings of shape {tuple(embeddings.shape)}: expected ({vocab_size}, E), "
                              "one row per vocabulary id")
        config_overrides["embedding_size"] = int(embeddings.shape[1])
    cfg = BiLSTMConfig(vocab_size=vocab_size, pad_token_id=pad_id, **config_overrides)
    model = build_task_model(cfg, kind, num_labels, pool)
    if embeddings is not None:
        with torch.no_grad():
            model.backbone.embeddings.weight.copy_(embeddings)
    return model


def save_task_model(model: TaskModel, directory: str | Path, tok: Any = None, labels: Sequence[str] = (),
                    provenance: Provenance | None = None, label_names: Sequence[str] = ()) -> Path:
    """``config.json`` (the config, ``muppets_task``, ``id2label``), ``model.safetensors`` in
    our parameter names, the tokenizer's files and a model card."""
    if not isinstance(model.backbone, BiLSTMBackbone):
        raise CheckpointError("only a BiLSTMBackbone task model is saved as a muppets-bilstm directory")
    directory = Path(directory)
    cfg = model.backbone.cfg
    write_weights({k: v.contiguous() for k, v in model.state_dict().items()}, directory / "model.safetensors",
                  {"format": "pt"})
    write_config(directory, {**asdict(cfg), "architectures": [architecture_of("MuppetsBiLSTM", model.kind)],
                             **task_entries(model, labels, label_names)})
    if tok is not None:
        tok.save(directory)
    write_model_card(directory, provenance)
    return directory


def load_task_model(directory: str | Path, kind: str | None = None, num_labels: int | None = None) -> TaskModel:
    """A saved BiLSTM task model (:func:`save_task_model`); a head of another kind or label count
    than saved starts fresh (listed in ``fresh_head``)."""
    return _from_directory(Path(directory), kind, num_labels)


def new_task_model(directory: str | Path, kind: str, num_labels: int | None, tok: Any = None,
                   orderings: int = 1, lm_coef: float = 0.0, pool: str | None = None,
                   dropout: float | None = None) -> TaskModel:
    """A task model to fine-tune from a BiLSTM directory: its backbone, and its head when the
    kind and labels fit (``orderings`` and ``lm_coef`` do not apply to this family)."""
    return _from_directory(Path(directory), kind, num_labels, pool, dropout)


def _from_directory(directory: Path, kind: str | None, num_labels: int | None, pool: str | None = None,
                    dropout: float | None = None) -> TaskModel:
    cfg = read_config(directory)  # a directory without config.json: a CheckpointError that says so
    data = read_json_object(directory / "config.json")
    if dropout is not None:
        cfg = dataclasses.replace(cfg, dropout=dropout)
    saved = data.get("muppets_task") or {}
    kind = kind or task_kind(data, directory)
    n = num_labels or len(saved.get("labels") or data.get("id2label") or ()) or 2
    model = build_task_model(cfg, kind, n, pool or saved.get("pool") or "max")
    state, own = read_weights(directory), model.state_dict()
    missing = [k for k in own if k.startswith("backbone.") and k not in state]
    if missing:
        raise CheckpointError(f"{directory}: missing backbone weights {missing[:5]}")
    for name in [k for k in state if k.startswith("backbone.")]:
        if name not in own or state[name].shape != own[name].shape:
            raise CheckpointError(f"{directory}: {name} does not fit the config's model")
    fresh = [k for k in own if k.startswith("head.") and (k not in state or state[k].shape != own[k].shape)]
    model.load_state_dict({k: v for k, v in state.items() if k in own and k not in fresh}, strict=False)
    model.fresh_head = [f"{', '.join(fresh)} not in its weights (or of other shapes)"] if fresh else []
    return model


def _from_hf(data: dict, source: str) -> BiLSTMConfig:
    names = {f.name for f in dataclasses.fields(BiLSTMConfig)}
    return from_dict(BiLSTMConfig, {k: v for k, v in data.items() if k in names}, prefix=f"{source}: ")


read_config = config_reader(_from_hf)


def _no_pretraining_model(directory: str | Path, *args: Any, **overrides: Any) -> nn.Module:
    raise CheckpointError(f"{directory}: a {MODEL_TYPE} directory holds a task model only, no pretraining or "
                          "language model to load; read it as a task model (muppets evaluate, Predictor, "
                          "serve /predict)")


def _no_save(model: Any, directory: str | Path, *args: Any, **kwargs: Any) -> Path:
    raise CheckpointError(f"{directory}: the BiLSTM family has no pretraining model to save; "
                          "save a task model (save_task_model)")


FAMILY = register(Family(
    name=NAME, model_types=(MODEL_TYPE,), causal=False, token_types=False,
    load=_no_pretraining_model, save=_no_save, tokenizer=WordPieceTokenizer.load,
    task_tokenizer=WordPieceTokenizer.load, new_task_model=new_task_model, load_task_model=load_task_model,
    save_task_model=save_task_model, has_mlm=lambda directory: False,
    build=BiLSTMBackbone,  # config -> a fresh backbone: the family has no pretraining model
    read_config=read_config, onnx=False,
    description="a BiLSTM task model on WordPiece ids (Tang et al. 2019), the distillation student"))
