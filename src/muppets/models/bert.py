"""BERT (Devlin et al. 2019): a post-LN transformer encoder with MLM and NSP pretraining heads.

The backbone answers the ``Encoded`` contract (docs/concepts/architecture.md):
``BertBackbone(ids, segments, mask) -> Encoded`` with the embedding output first and every layer
after it. The MLM head runs **only at the masked positions** it is given, so a CPU step does not
spend most of its time on the 30k-way output layer at positions that carry no label; given no
positions, it scores every position (the Hugging Face ``prediction_logits`` view, used for parity
and feature use).

BERT's relatives run on the same classes (:mod:`muppets.families`): RoBERTa / XLM-R set
``padded_positions`` and one token type, DistilBERT no token types, ELECTRA an
``embedding_size`` below ``hidden_size`` (a projection lifts the embeddings; the MLM head maps
back down); no family copies the model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from muppets.config import from_dict
from muppets.errors import ConfigError
from muppets.nn.block import BlockConfig, TransformerBlock, init_weights
from muppets.nn.embeddings import InputEmbeddings
from muppets.nn.encoded import Encoded
from muppets.nn.feedforward import activation
from muppets.nn.linear_ce import linear_cross_entropy, pad_rows_to_bucket
from muppets.nn.packing import Packing
from muppets.nn.pooler import Pooler

IGNORE = -100  # label of a slot that carries no MLM target (padding of the position list)


@dataclass
class BertConfig:
    vocab_size: int = 30522  # WordPiece vocabulary size
    hidden_size: int = 256  # model width H
    num_layers: int = 4  # transformer blocks L
    num_heads: int = 4  # attention heads A (presets use H / 64)
    intermediate_size: int = 1024  # feed-forward inner width (presets use 4H)
    max_position_embeddings: int = 512  # longest sequence the position table covers
    type_vocab_size: int = 2  # segment ids (A / B)
    hidden_dropout: float = 0.1  # dropout on embeddings and sub-layer outputs
    attention_dropout: float = 0.1  # dropout on attention probabilities
    layer_norm_eps: float = 1e-12  # LayerNorm epsilon
    initializer_range: float = 0.02  # std of the normal weight initialisation
    pad_token_id: int = 0  # id of [PAD]; its embedding row starts at zero
    hidden_act: str = "gelu"  # feed-forward activation (exact erf GELU as in BERT)
    norm_first: bool = False  # True: pre-LN blocks and a final LayerNorm (stable at high lr; no transformers class runs it)
    tie_word_embeddings: bool = True  # False: the MLM decoder is its own (V, H) matrix, so the softmax's pull on every row no longer moves the input embeddings
    # --- the few real differences of BERT's relatives (muppets.families): defaults are BERT's
    padded_positions: bool = False  # RoBERTa / XLM-R: position ids count real tokens from pad_token_id + 1, pads sit at pad_token_id (fairseq)
    embedding_size: int = 0  # ELECTRA: width E of the embedding tables when not H (0 = H); a linear layer lifts them to H
    model_type: str = "bert"  # the HF model_type it is read and written as (roberta, xlm-roberta, camembert, distilbert, electra)
    mlm_act: str = ""  # activation of the MLM transform ("" = hidden_act; RoBERTa's and ELECTRA's heads always use gelu)

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads:
            raise ConfigError(
                f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}"
            )
        activation(self.hidden_act)
        activation(self.mlm_act or self.hidden_act)
        if self.embedding_size < 0:
            raise ConfigError(f"embedding_size {self.embedding_size} must be >= 0 (0: the hidden size)")

    @property
    def embedding_width(self) -> int:
        """E: the width of the embedding tables (H unless ``embedding_size`` is set)."""
        return self.embedding_size or self.hidden_size

    @property
    def max_positions(self) -> int:
        """The longest input the position table serves: ``max_position_embeddings``, less the
        ``pad_token_id + 1`` rows below the first position where positions are padded
        (RoBERTa / XLM-R: 514 rows, 512 tokens)."""
        return self.max_position_embeddings - (self.pad_token_id + 1 if self.padded_positions else 0)

    @classmethod
    def preset(cls, name: str, **overrides) -> "BertConfig":
        """A named size (``bert-tiny`` … ``bert-large``), with field overrides."""
        if name not in BERT_PRESETS:
            raise ConfigError(f"unknown BERT preset {name!r}; choose one of {', '.join(BERT_PRESETS)}")
        L, H = BERT_PRESETS[name]
        base = dict(num_layers=L, hidden_size=H, num_heads=H // 64, intermediate_size=4 * H)
        return from_dict(cls, {**base, **overrides})

    def block(self) -> BlockConfig:
        return BlockConfig(
            hidden_size=self.hidden_size,
            num_heads=self.num_heads,
            intermediate_size=self.intermediate_size,
            hidden_dropout=self.hidden_dropout,
            attention_dropout=self.attention_dropout,
            layer_norm_eps=self.layer_norm_eps,
            norm_first=self.norm_first,
            act=self.hidden_act,
        )


# (layers, hidden) of the sizes Turc et al. 2019 released and the two original BERTs.
BERT_PRESETS: dict[str, tuple[int, int]] = {
    "bert-tiny": (2, 128),
    "bert-mini": (4, 256),
    "bert-small": (4, 512),
    "bert-medium": (8, 512),
    "bert-base": (12, 768),
    "bert-large": (24, 1024),
}


def padding_mask(attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """``(B, T)`` 0/1 or bool -> ``(B, 1, 1, T)`` bool for SDPA, or None when nothing is padded."""
    if attention_mask is None:
        return None
    mask = attention_mask.bool()
    if bool(mask.all()):
        return None
    return mask[:, None, None, :]


def padded_position_ids(input_ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """RoBERTa's positions (fairseq ``make_positions``): real tokens count up from
    ``pad_id + 1``, padding tokens sit at ``pad_id``. ``(B, T) -> (B, T)``.

    >>> padded_position_ids(torch.tensor([[0, 5, 6, 1, 1]]), 1).tolist()
    [[2, 3, 4, 1, 1]]
    """
    real = (input_ids != pad_id).long()  # (B, T)
    return real.cumsum(1) * real + pad_id


class BertBackbone(nn.Module):
    """Embeddings + L transformer blocks (post-LN as BERT, or pre-LN with a final LayerNorm
    that the last layer of ``Encoded`` passes through); returns every layer (``Encoded``)."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embeddings = InputEmbeddings(
            cfg.vocab_size, cfg.embedding_width, cfg.max_position_embeddings, cfg.type_vocab_size,
            layer_norm=True, eps=cfg.layer_norm_eps, dropout=cfg.hidden_dropout,
            padding_idx=cfg.pad_token_id,
        )
        # ELECTRA: embeddings of width E < H are lifted to H before the first block (Clark et al. 2020, §3.2)
        self.project = nn.Linear(cfg.embedding_width, cfg.hidden_size) if cfg.embedding_size else None
        self.layers = nn.ModuleList(TransformerBlock(cfg.block()) for _ in range(cfg.num_layers))
        self.final_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps) if cfg.norm_first else None

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        unpad: bool = False,
    ) -> Encoded:
        """input_ids, token_type_ids, attention_mask: ``(B, T)`` -> Encoded with L+1 ``(B, T, H)``.

        ``unpad``: the blocks compute the real tokens only (:mod:`muppets.nn.packing`; an inference
        speed-up for uneven batches); the layers then hold zeros at padding positions."""
        offset = self.cfg.pad_token_id + 1 if self.cfg.padded_positions else 0
        if input_ids.shape[1] + offset > self.cfg.max_position_embeddings:
            raise ValueError(
                f"sequence length {input_ids.shape[1]} exceeds max_position_embeddings "
                f"{self.cfg.max_position_embeddings}" + (f" - {offset}" if offset else "")
            )
        mask4 = padding_mask(attention_mask)
        positions = padded_position_ids(input_ids, self.cfg.pad_token_id) if offset else None
        x = self.embeddings(input_ids, token_type_ids, positions)  # (B, T, E)
        if self.project is not None:
            x = self.project(x)  # (B, T, H)
        layers = [x]
        if unpad and mask4 is not None:
            packing = Packing.from_mask(attention_mask)
            packed = packing.pack(x)  # (N, H)
            for block in self.layers:
                packed = block(packed, mask4, packing=packing)
                layers.append(packing.unpack(packed))
            x = layers[-1]
        else:
            for block in self.layers:
                x = block(x, mask4)
                layers.append(x)
        if self.final_norm is not None:  # pre-LN: the residual stream is normalised once at the top
            layers[-1] = self.final_norm(x)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids, dtype=torch.bool)
        return Encoded(layers=layers, mask=attention_mask.bool())


class MlmHead(nn.Module):
    """Transform (dense + act + LayerNorm), then the decoder, + bias. The decoder is the word
    embedding matrix (tied, BERT's choice) unless ``cfg.tie_word_embeddings`` is False: then it
    is its own ``(V, H)`` matrix (Chung et al. 2021, "Rethinking embedding coupling"), and the
    gradient the softmax sends to every vocabulary row at every prediction stays out of the
    input embeddings."""

    def __init__(self, cfg: BertConfig, word_embeddings: nn.Embedding) -> None:
        super().__init__()
        E = cfg.embedding_width  # the decoder is (V, E); ELECTRA's generator maps H down to E
        self.dense = nn.Linear(cfg.hidden_size, E)
        self.act = activation(cfg.mlm_act or cfg.hidden_act)
        self.norm = nn.LayerNorm(E, eps=cfg.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        self.word_embeddings = [word_embeddings]  # a list, so the tied weight is not registered twice
        self.decoder = None if cfg.tie_word_embeddings else nn.Linear(E, cfg.vocab_size, bias=False)

    @property
    def decoder_weight(self) -> torch.Tensor:
        """``(V, E)``: the word embeddings (tied) or the head's own decoder."""
        return self.word_embeddings[0].weight if self.decoder is None else self.decoder.weight

    def transform(self, hidden: torch.Tensor) -> torch.Tensor:
        """``(..., H) -> (..., E)``: dense, activation, LayerNorm."""
        return self.norm(self.act(self.dense(hidden)))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: ``(..., H)`` -> logits ``(..., V)``."""
        return F.linear(self.transform(hidden), self.decoder_weight, self.bias)

    def loss(self, hidden: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Summed cross entropy and #correct at ``hidden (M, H)`` vs ``targets (M,)``, without
        materialising the ``(M, V)`` logits (see :mod:`muppets.nn.linear_ce`). Under CPU bf16
        autocast the rows are padded to a few shapes (:func:`~muppets.nn.linear_ce.pad_rows_to_bucket`)."""
        hidden, targets = pad_rows_to_bucket(hidden, targets, IGNORE)
        h = self.transform(hidden)
        return linear_cross_entropy(h, self.decoder_weight, self.bias, targets)


@dataclass
class PretrainingOutput:
    """What :class:`BertForPreTraining` returns.

    mlm_logits: ``(B, T, V)`` when no positions are given, ``(B*P, V)`` for positions without
        labels; None when labels are given (the loss is then computed fused, without logits).
    nsp_logits: ``(B, 2)``; index 0 = IsNext, 1 = NotNext (Hugging Face's convention).
    loss_sums / counts: per term (``mlm``, ``nsp``) the summed loss and its number of units.
    correct: per term the number of correct predictions (for accuracy).
    """

    encoded: Encoded
    mlm_logits: torch.Tensor | None
    nsp_logits: torch.Tensor
    loss_sums: dict[str, torch.Tensor] = field(default_factory=dict)
    counts: dict[str, torch.Tensor] = field(default_factory=dict)
    correct: dict[str, torch.Tensor] = field(default_factory=dict)


class BertForPreTraining(nn.Module):
    """Backbone + pooler + MLM head + NSP head (Devlin et al. 2019, §3.1)."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.backbone = BertBackbone(cfg)
        self.pooler = Pooler(cfg.hidden_size)
        self.mlm = MlmHead(cfg, self.backbone.embeddings.tokens)
        self.nsp = nn.Linear(cfg.hidden_size, 2)
        init_weights(self, cfg.initializer_range)

    def train_nsp(self, on: bool) -> BertForPreTraining:
        """Whether the pooler and NSP head train (they do by default); returns ``self``.

        MLM-only pretraining (no NSP labels) gives them no gradient, so it turns them off:
        frozen (``requires_grad=False``), they are left out of the optimizer and out of what
        DDP waits to all-reduce, and they keep their values, so the exported directory still
        has every weight that Hugging Face's ``BertForPreTraining`` loads.
        """
        for param in (*self.pooler.parameters(), *self.nsp.parameters()):
            param.requires_grad_(on)
        return self

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        mlm_positions: torch.Tensor | None = None,
        mlm_labels: torch.Tensor | None = None,
        nsp_labels: torch.Tensor | None = None,
    ) -> PretrainingOutput:
        """Ids, segments, mask ``(B, T)``; mlm_positions, mlm_labels ``(B, P)`` (label -100 =
        empty slot); nsp_labels ``(B,)`` with 0 = IsNext, 1 = NotNext."""
        encoded = self.backbone(input_ids, token_type_ids, attention_mask)
        hidden = encoded.last  # (B, T, H)
        nsp_logits = self.nsp(self.pooler(hidden))  # (B, 2)
        out = PretrainingOutput(encoded=encoded, mlm_logits=None, nsp_logits=nsp_logits)
        if mlm_positions is None:
            out.mlm_logits = self.mlm(hidden)  # (B, T, V)
        elif mlm_labels is None:
            picked, _ = _gather_labelled(hidden, mlm_positions, None)  # (B*P, H)
            out.mlm_logits = self.mlm(picked)  # (B*P, V)
        else:
            picked, targets = _gather_labelled(hidden, mlm_positions, mlm_labels)  # (M, H), (M,)
            out.loss_sums["mlm"], out.correct["mlm"] = self.mlm.loss(picked, targets)
            out.counts["mlm"] = torch.tensor(float(targets.numel()))
        if nsp_labels is not None:
            out.loss_sums["nsp"] = F.cross_entropy(nsp_logits.float(), nsp_labels, reduction="sum")
            out.counts["nsp"] = torch.tensor(float(nsp_labels.numel()))
            out.correct["nsp"] = (nsp_logits.argmax(-1) == nsp_labels).sum()
        return out


def _gather_labelled(
    hidden: torch.Tensor, positions: torch.Tensor, labels: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Pick the rows of ``hidden (B, T, H)`` at ``positions (B, P)`` that carry a label.

    Returns ``(M, H)`` and the ``(M,)`` labels (all slots when ``labels`` is None).
    """
    B, T, H = hidden.shape
    flat = (positions + torch.arange(B, device=positions.device)[:, None] * T).reshape(-1)  # (B*P,)
    if labels is None:
        return hidden.reshape(B * T, H).index_select(0, flat), None
    labels = labels.reshape(-1)
    keep = labels != IGNORE
    flat, labels = flat[keep], labels[keep]
    return hidden.reshape(B * T, H).index_select(0, flat), labels  # (M, H), (M,)


def config_dict(cfg: BertConfig) -> dict:
    """The config as a plain dict (saved beside weights and in checkpoints)."""
    return dataclasses.asdict(cfg)
