"""Task models on frozen features: layer combination, a BiLSTM, and a classifier or tagger head.

The feature-based recipe of ELMo (Peters et al. 2018, §3.3) and of the BERT paper's NER
experiment (Devlin et al. 2019, §5.3): the backbone is never run here — its per-word layers
come in precomputed as ``features (B, K, T, D)`` — and only this model is trained:

1. :class:`LayerCombiner` makes one vector per word from the ``K`` layers: ``mix`` is a
   :class:`~muppets.nn.scalar_mix.ScalarMix` (``γ Σ_k softmax(w)_k h_k``, optionally
   layer-normalised), ``sum`` adds them (BERT's "sum of the last four"), ``cat`` concatenates
   them (``K·D`` wide, "concat last four"), ``single`` takes the one layer given;
2. optional ``extra (B, T, E)`` vectors are concatenated to it — ELMo's
   ``[x_k; ELMo_k]`` with static word vectors ``x_k`` (§3.3);
3. dropout, then a BiLSTM (packed, so padding never reaches the backward direction);
4. ``classify``: the BiLSTM states max- or mean-pooled over the real words, dropout, a linear
   layer; ``tag``: dropout, a linear layer per word, and either a per-word softmax or a
   :class:`~muppets.nn.crf.CRF` over the sequence.

``forward`` returns the loss as a SUM over its units (sentences for ``classify``, words for
``tag``) for the shared :class:`~muppets.train.Trainer`; :meth:`FeatureTaskModel.predict` gives
label ids. :func:`save_feature_model` / :func:`load_feature_model` write and read
``config.json`` + ``model.safetensors``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from muppets.config import from_dict, write_json_atomic
from muppets.errors import ConfigError
from muppets.heads import mean_tokens
from muppets.interop.safetensors_io import read_model_dir, write_weights
from muppets.nn.crf import CRF
from muppets.nn.encoded import Encoded
from muppets.nn.lstm import packed_lstm
from muppets.nn.scalar_mix import ScalarMix
from muppets.sentence.pooling import pool_one
from muppets.transfer.features import IGNORE
COMBINES = ("mix", "sum", "cat", "single")
FORMAT = "muppets.feature-model/1"


@dataclass
class FeatureModelConfig:
    kind: str = "classify"  # classify (one label per sentence) | tag (one label per word)
    num_labels: int = 2  # output classes / tags
    num_layers: int = 1  # K: backbone layers in each input
    dim: int = 0  # D: width of each layer
    combine: str = "single"  # mix (ScalarMix) | sum | cat | single (K must be 1)
    layer_norm: bool = False  # mix: normalise each layer first (ELMo/AllenNLP's masked whole-layer norm)
    extra_dim: int = 0  # E: width of static vectors concatenated to the combined layers (0 = none)
    hidden: int = 128  # LSTM units per direction
    lstm_layers: int = 1  # stacked BiLSTM layers
    dropout: float = 0.3  # on the input vectors, between LSTM layers and before the output layer
    pool: str = "max"  # classify: max | mean of the BiLSTM states over the real words
    crf: bool = False  # tag: a CRF output layer (else a per-word softmax)
    mix_l2: float = 0.0  # mix: lambda of ELMo's penalty lambda * |w|^2 on the mix logits (0 = none)

    def __post_init__(self) -> None:
        checks = [("kind", self.kind in ("classify", "tag")), ("num_labels", self.num_labels >= 1),
                  ("num_layers", self.num_layers >= 1), ("dim", self.dim >= 1),
                  ("combine", self.combine in COMBINES), ("extra_dim", self.extra_dim >= 0),
                  ("hidden", self.hidden >= 1), ("lstm_layers", self.lstm_layers >= 1),
                  ("dropout", 0.0 <= self.dropout < 1.0), ("pool", self.pool in ("max", "mean")),
                  ("single", self.combine != "single" or self.num_layers == 1),
                  ("mix_l2", self.mix_l2 >= 0 and (self.mix_l2 == 0 or self.combine == "mix"))]
        for name, ok in checks:
            if not ok:
                raise ConfigError(f"feature model {name}: invalid value in {self}", key=name)

    @property
    def input_dim(self) -> int:
        """Width of what the BiLSTM reads."""
        return (self.num_layers * self.dim if self.combine == "cat" else self.dim) + self.extra_dim


class LayerCombiner(nn.Module):
    """``features (B, K, T, D)`` (+ ``mask (B, T)``) -> ``(B, T, D)`` (``(B, T, K·D)`` for cat)."""

    def __init__(self, combine: str, num_layers: int, layer_norm: bool = False) -> None:
        super().__init__()
        if combine not in COMBINES:
            raise ConfigError(f"combine {combine!r} is not one of {', '.join(COMBINES)}")
        self.combine = combine
        self.mix = ScalarMix(num_layers, layer_norm=layer_norm) if combine == "mix" else None

    def forward(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        B, K, T, D = features.shape
        if self.mix is not None:
            return self.mix(list(features.unbind(1)), mask)
        if self.combine == "sum":
            return features.sum(1)
        if self.combine == "cat":
            return features.permute(0, 2, 1, 3).reshape(B, T, K * D)  # (B, T, K·D), layer-major per word
        return features[:, 0]

    def weights(self) -> dict[str, object] | None:
        """The learned mix as plain numbers (``{"weights": s, "gamma": γ}``), None without a mix."""
        if self.mix is None:
            return None
        return {"weights": self.mix.weights(), "gamma": self.mix.gamma_value()}


@dataclass
class FeatureTaskOutput:
    loss_sums: dict[str, torch.Tensor]  # {"task": the loss summed over sentences (classify) or words (tag)}
    logits: torch.Tensor  # (B, C) or (B, T, C) emissions


class FeatureTaskModel(nn.Module):
    """See the module docstring; built from a :class:`FeatureModelConfig`."""

    def __init__(self, cfg: FeatureModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.combiner = LayerCombiner(cfg.combine, cfg.num_layers, cfg.layer_norm)
        self.dropout = nn.Dropout(cfg.dropout)
        self.lstm = nn.LSTM(cfg.input_dim, cfg.hidden, num_layers=cfg.lstm_layers, batch_first=True,
                            bidirectional=True, dropout=cfg.dropout if cfg.lstm_layers > 1 else 0.0)
        self.output = nn.Linear(2 * cfg.hidden, cfg.num_labels)
        self.crf = CRF(cfg.num_labels) if cfg.kind == "tag" and cfg.crf else None

    def encode(self, features: torch.Tensor, attention_mask: torch.Tensor,
               extra: torch.Tensor | None = None) -> torch.Tensor:
        """BiLSTM states ``(B, T, 2·hidden)``, zero at padding."""
        mask = attention_mask.bool()
        x = self.combiner(features, mask)  # (B, T, D')
        if extra is not None:
            x = torch.cat([x, extra.to(x.dtype)], dim=-1)  # (B, T, D' + E)
        return packed_lstm(self.lstm, self.dropout(x), mask)  # (B, T, 2h)

    def logits(self, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``(B, C)`` sentence scores or ``(B, T, C)`` per-word emissions."""
        if self.cfg.kind == "tag":
            return self.output(self.dropout(states))
        if self.cfg.pool == "mean":
            pooled = mean_tokens(Encoded([states], mask))  # (B, 2h)
        else:
            pooled = pool_one(states, mask, "max")  # (B, 2h)
        return self.output(self.dropout(pooled))

    def forward(self, features: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor | None = None,
                extra: torch.Tensor | None = None) -> FeatureTaskOutput:
        """``features (B, K, T, D)``, ``attention_mask (B, T)``, ``labels (B,)`` or ``(B, T)``
        (-100 at padding), ``extra (B, T, E)``."""
        mask = attention_mask.bool()
        logits = self.logits(self.encode(features, mask, extra), mask)
        if labels is None:
            return FeatureTaskOutput({}, logits)
        sums = {"task": self.loss(logits, labels, mask)}
        if self.cfg.mix_l2 > 0:  # one unit per micro-batch (FeatureEpochData): the mean is lambda * |w|^2
            sums["mix_l2"] = self.cfg.mix_l2 * self.combiner.mix.logits.square().sum()
        return FeatureTaskOutput(sums, logits)

    def loss(self, logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if self.cfg.kind == "classify":
            return F.cross_entropy(logits.float(), labels, reduction="sum")
        if self.crf is None:
            return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                   ignore_index=IGNORE, reduction="sum")
        return self.crf.neg_log_likelihood(logits.float(), labels.clamp_min(0), mask).sum()

    @torch.no_grad()
    def predict(self, features: torch.Tensor, attention_mask: torch.Tensor,
                extra: torch.Tensor | None = None) -> list:
        """Label ids: one per sentence (classify), or one list per sentence of its real length (tag)."""
        mask = attention_mask.bool()
        logits = self.logits(self.encode(features, mask, extra), mask)
        if self.cfg.kind == "classify":
            return logits.argmax(-1).tolist()
        if self.crf is not None:
            return self.crf.decode(logits.float(), mask)
        return [row[: int(n)].tolist() for row, n in zip(logits.argmax(-1), mask.sum(1))]


def save_feature_model(model: FeatureTaskModel, directory: str | Path, extra: dict | None = None) -> Path:
    """``config.json`` (format, model config, ``extra`` such as labels) + ``model.safetensors``."""
    directory = Path(directory)
    write_weights(model.state_dict(), directory / "model.safetensors", metadata={"format": FORMAT})
    write_json_atomic(directory / "config.json", {"format": FORMAT, "model": asdict(model.cfg), **(extra or {})})
    return directory


def load_feature_model(directory: str | Path) -> tuple[FeatureTaskModel, dict]:
    """The model (eval mode) and the whole ``config.json`` of a :func:`save_feature_model` directory."""
    return read_model_dir(directory, FORMAT, "a feature-based task model",
                          lambda meta: FeatureTaskModel(from_dict(FeatureModelConfig, meta["model"])))
