"""ELMo (Peters et al. 2018): a character-based bidirectional LSTM language model.

The biLM (§3.1; Józefowicz et al. 2016's CNN-BIG-LSTM, halved) has three parts:

* a **token encoder**, context-free: each word's characters go through a char CNN
  (:class:`~muppets.nn.char_cnn.CharCNN`), ``num_highway`` highway layers
  (:class:`~muppets.nn.highway.Highway`) and a linear projection to ``projection_dim`` = ``p``;
* a **forward** and a **backward** stack of ``num_layers`` LSTMs with a projection (the cell
  holds ``lstm_dim`` units, the output ``p``: ``torch.nn.LSTM(proj_size=p)``), a residual
  connection from every layer after the first to its input, and dropout on each layer's input.
  The forward stack reads ``x_1 … x_T`` and models ``p(x_{t+1} | x_≤t)``; the backward stack
  reads the sentence reversed and models ``p(x_{t−1} | x_≥t)``;
* a **softmax** over a word vocabulary, ``p(x | h) = softmax(W h + b)``, computed fused with the
  cross entropy (:func:`~muppets.nn.linear_ce.linear_cross_entropy`), never as ``(B, T, V)``.

The token encoder and the softmax are shared by the two directions; the LSTMs are not (eq. 2
ties ``Θ_x`` and ``Θ_s``). Both directions' losses are summed: ``loss_sums = {"fwd", "bwd"}``.

The backbone answers the ``Encoded`` contract (docs/concepts/architecture.md) with ``L + 1``
layers of width ``2p`` (§3.2's ``R_k``): the token layer duplicated ``[x; x]`` (so all layers have
one width, as in ELMo), then ``[h_fwd; h_bwd]`` of every LSTM layer (after its residual
connection). Padded positions are 0.

Not reproduced: bilm-tf clips the LSTM cell and projection at ±3 (``torch.nn.LSTM`` has no clip;
gradient-norm clipping and AdamW keep training stable here), and carries LSTM state from one
batch to the next (ours is stateless, for exact resume: see :mod:`muppets.objectives.bilm`).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import torch
from torch import nn

from muppets.config import from_dict
from muppets.errors import ConfigError
from muppets.nn.char_cnn import ACTIVATIONS, CharCNN
from muppets.nn.encoded import Encoded
from muppets.nn.highway import Highway
from muppets.nn.linear_ce import linear_cross_entropy

# torch's CPU LSTM warns on every process that oneDNN has no projected LSTM and it uses its own
# kernel: expected here, so the message is silenced (only that one).
warnings.filterwarnings("ignore", message="LSTM with projections is not supported with oneDNN")

IGNORE = -100  # target of a position that predicts nothing (window edge, padding, trivial boundary)
ORIGINAL_FILTERS = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]  # 2048 in all


@dataclass
class ElmoConfig:
    vocab_size: int = 50000  # softmax words: ids 0 … vocab_size-1 of the WordVocab (rarer words are <unk> targets)
    max_chars: int = 50  # characters per token, begin/end-of-word markers included (ELMo: 50)
    num_chars: int = 262  # character ids: 0 padded token, 1-256 bytes, 257-261 specials (tokenizers.characters)
    char_dim: int = 16  # character embedding size (ELMo: 16)
    filters: list[list[int]] = field(default_factory=lambda: [list(f) for f in ORIGINAL_FILTERS])  # [width, n] banks
    char_activation: str = "relu"  # after max-over-time pooling: relu (ELMo) | tanh (Kim et al. 2016)
    num_highway: int = 2  # highway layers on the char CNN output (ELMo: 2)
    highway_carry_bias: float = 1.0  # initial carry-gate bias (+1 AllenNLP; +2 = bilm-tf's -2 transform bias)
    projection_dim: int = 512  # p: token representation and LSTM output size (ELMo: 512)
    lstm_dim: int = 4096  # LSTM cell size, projected to p at each step (ELMo: 4096)
    num_layers: int = 2  # LSTM layers per direction (ELMo: 2)
    residual: bool = True  # add each LSTM layer's input to its output (all layers but the first)
    dropout: float = 0.1  # on every LSTM layer's input and on the top output before the softmax
    lstm_forget_bias: float = 1.0  # initial forget-gate bias (bilm-tf's LSTMCell default)

    def __post_init__(self) -> None:
        if self.char_activation not in ACTIVATIONS:
            raise ConfigError(f"char_activation: {self.char_activation!r} is not one of {', '.join(ACTIVATIONS)}")
        widest = max((f[0] for f in self.filters), default=0)
        if not 0 < widest <= self.max_chars:
            raise ConfigError(f"filters: widest filter {widest} does not fit max_chars {self.max_chars}")
        if self.lstm_dim < self.projection_dim:
            raise ConfigError(f"lstm_dim {self.lstm_dim} is smaller than projection_dim {self.projection_dim}")
        if self.vocab_size < 5 or self.num_layers < 1 or not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"vocab_size {self.vocab_size} (>= 5), num_layers {self.num_layers} (>= 1) "
                              f"or dropout {self.dropout} (in [0, 1)) is out of range")

    @classmethod
    def preset(cls, name: str, **overrides) -> "ElmoConfig":
        """A named size (``elmo-tiny``, ``elmo-small``, ``elmo-original``), with field overrides."""
        if name not in ELMO_PRESETS:
            raise ConfigError(f"unknown ELMo preset {name!r}; choose one of {', '.join(ELMO_PRESETS)}")
        return from_dict(cls, {**ELMO_PRESETS[name], **overrides})

    @property
    def num_filters(self) -> int:
        return sum(n for _, n in self.filters)

    @property
    def output_dim(self) -> int:
        """Width of every ``Encoded`` layer: ``2p``."""
        return 2 * self.projection_dim


# elmo-tiny: tests. elmo-small: the 60-CPU-minute size (configs/elmo-small.yaml): ELMo's five
# narrowest filter banks (512 filters), p = 128 and 1024-unit cells: 1.2M multiply-adds per token,
# layer and direction against the original's 18.9M (10M parameters with a 16k softmax; a step of
# 2048 tokens costs ~0.4 s char CNN, ~1.3 s LSTMs, ~1.3 s softmax on one core).
# elmo-original: the released 2x4096_512_2048cnn_2xhighway model (93.6M parameters without softmax).
ELMO_PRESETS: dict[str, dict] = {
    "elmo-tiny": dict(char_dim=8, filters=[[1, 8], [2, 8], [3, 16]], projection_dim=16, lstm_dim=32),
    "elmo-small": dict(filters=[list(f) for f in ORIGINAL_FILTERS[:5]], projection_dim=128, lstm_dim=1024),
    "elmo-original": dict(filters=[list(f) for f in ORIGINAL_FILTERS], projection_dim=512, lstm_dim=4096),
}


class TokenEncoder(nn.Module):
    """Context-free token vectors: char CNN -> highway layers -> projection.
    ``char_ids (B, T, C)`` -> ``(B, T, p)``.

    The encoder runs once per *distinct* character row of the batch (a 2048-token batch of
    running text holds ~700 distinct words), then the vectors are gathered back to their
    positions: the same result, and the char CNN — the costliest part per token — runs ~3x less.
    """

    def __init__(self, cfg: ElmoConfig) -> None:
        super().__init__()
        self.char_cnn = CharCNN(cfg.num_chars, cfg.char_dim, cfg.filters, cfg.char_activation)
        self.highway = Highway(cfg.num_filters, cfg.num_highway, cfg.highway_carry_bias)
        self.projection = nn.Linear(cfg.num_filters, cfg.projection_dim)

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        *lead, C = char_ids.shape
        rows, inverse = torch.unique(char_ids.reshape(-1, C), dim=0, return_inverse=True)  # (U, C), (N,)
        vectors = self.projection(self.highway(self.char_cnn(rows)))  # (U, p)
        return vectors[inverse].reshape(*lead, -1)  # (B, T, p)


class LSTMStack(nn.Module):
    """One direction's LSTM layers (left to right over what it is given).

    Layer ``l`` computes ``h_l = LSTM_l(dropout(h_{l−1})) (+ h_{l−1} for l ≥ 2 when residual)``.
    ``x (B, T, p)`` -> a list of ``num_layers`` outputs ``(B, T, p)``. Padding must be on the
    right: a left-to-right LSTM's outputs at real positions never depend on what follows.
    """

    def __init__(self, cfg: ElmoConfig) -> None:
        super().__init__()
        p, h = cfg.projection_dim, cfg.lstm_dim
        proj = p if h > p else 0  # torch.nn.LSTM: proj_size must be < hidden_size (0 = none)
        self.layers = nn.ModuleList(nn.LSTM(p, h, batch_first=True, proj_size=proj) for _ in range(cfg.num_layers))
        self.dropout = nn.Dropout(cfg.dropout)
        self.residual = cfg.residual

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        outputs = []
        for i, lstm in enumerate(self.layers):
            y, _ = lstm(self.dropout(x))  # (B, T, p)
            x = y + x if self.residual and i > 0 else y
            outputs.append(x)
        return outputs


@dataclass
class BiLMStates:
    """Every state of one biLM pass (time in the original order for both directions).

    token: ``(B, T, p)``; forward / backward: ``num_layers`` tensors ``(B, T, p)``; mask ``(B, T)``.
    """

    token: torch.Tensor
    forward: list[torch.Tensor]
    backward: list[torch.Tensor]
    mask: torch.Tensor

    def encoded(self) -> Encoded:
        """``[x; x]``, then ``[h_fwd; h_bwd]`` per layer, each ``(B, T, 2p)``, zero at padding."""
        m = self.mask.unsqueeze(-1).to(self.token.dtype)  # (B, T, 1)
        layers = [torch.cat([self.token, self.token], dim=-1) * m]
        layers += [torch.cat([f, b], dim=-1) * m for f, b in zip(self.forward, self.backward)]
        return Encoded(layers=layers, mask=self.mask)


class ElmoBackbone(nn.Module):
    """Token encoder + forward and backward LSTM stacks; returns ``Encoded`` (``L + 1`` layers)."""

    def __init__(self, cfg: ElmoConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.token_encoder = TokenEncoder(cfg)
        self.forward_lstm = LSTMStack(cfg)
        self.backward_lstm = LSTMStack(cfg)

    def forward(self, char_ids: torch.Tensor, mask: torch.Tensor | None = None) -> Encoded:
        """``char_ids (B, T, C)``, ``mask (B, T)`` (right padding) -> Encoded of ``(B, T, 2p)`` layers."""
        return self.states(char_ids, mask).encoded()

    def states(self, char_ids: torch.Tensor, mask: torch.Tensor | None = None) -> BiLMStates:
        """The per-direction states; ``mask`` defaults to the tokens whose char row is not all 0."""
        self._check_chars(char_ids)
        mask = (char_ids != 0).any(-1) if mask is None else mask.bool()
        lengths = right_padded_lengths(mask)  # (B,)
        token = self.token_encoder(char_ids)  # (B, T, p)
        fwd = self.forward_lstm(token)
        bwd = [reverse_padded(h, lengths) for h in self.backward_lstm(reverse_padded(token, lengths))]
        return BiLMStates(token, fwd, bwd, mask)

    def _check_chars(self, char_ids: torch.Tensor) -> None:
        if char_ids.dim() != 3 or char_ids.shape[-1] != self.cfg.max_chars:
            raise ValueError(f"char_ids must be (B, T, {self.cfg.max_chars}), got {tuple(char_ids.shape)}")


def right_padded_lengths(mask: torch.Tensor) -> torch.Tensor:
    """``(B,)`` real lengths of a ``(B, T)`` mask that must be a prefix of every row."""
    lengths = mask.sum(dim=1)  # (B,)
    prefix = torch.arange(mask.shape[1], device=mask.device)[None, :] < lengths[:, None]  # (B, T)
    if not torch.equal(prefix, mask):
        row = int((prefix != mask).any(dim=1).nonzero()[0])
        raise ValueError(f"mask row {row} is not right-padded (real tokens first, then padding): "
                         f"{mask[row].int().tolist()}")
    return lengths


def reverse_padded(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse the first ``lengths[b]`` steps of each row of ``x (B, T, …)``; padding stays put.

    It is its own inverse, so it both feeds the backward LSTM and brings its outputs back.
    """
    T = x.shape[1]
    steps = torch.arange(T, device=x.device)[None, :]  # (1, T)
    source = lengths[:, None] - 1 - steps  # (B, T)
    source = torch.where(source >= 0, source, steps.expand_as(source))
    index = source.reshape(*source.shape, *([1] * (x.dim() - 2))).expand_as(x)  # (B, T, …)
    return x.gather(1, index)


@dataclass
class ElmoLMOutput:
    """What :class:`ElmoLanguageModel` returns.

    loss_sums / counts / correct: per direction (``fwd``, ``bwd``), the summed cross entropy of
    the scored positions, their number, and how many the argmax got right (empty without targets).
    """

    encoded: Encoded
    loss_sums: dict[str, torch.Tensor] = field(default_factory=dict)
    counts: dict[str, torch.Tensor] = field(default_factory=dict)
    correct: dict[str, torch.Tensor] = field(default_factory=dict)


class ElmoLanguageModel(nn.Module):
    """The biLM: :class:`ElmoBackbone` + one softmax ``(V, p)`` shared by both directions."""

    def __init__(self, cfg: ElmoConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.backbone = ElmoBackbone(cfg)
        self.softmax_weight = nn.Parameter(torch.empty(cfg.vocab_size, cfg.projection_dim))  # (V, p)
        self.softmax_bias = nn.Parameter(torch.zeros(cfg.vocab_size))  # (V,)
        self.output_dropout = nn.Dropout(cfg.dropout)
        init_elmo_weights(self, cfg)

    def forward(self, char_ids: torch.Tensor, mask: torch.Tensor | None = None,
                next_ids: torch.Tensor | None = None, prev_ids: torch.Tensor | None = None) -> ElmoLMOutput:
        """``char_ids (B, T, C)``, ``mask (B, T)``; targets ``(B, T)`` word ids in ``[0, V)`` or -100.

        ``next_ids[b, t]`` is the word after position ``t`` (scored on the forward top layer),
        ``prev_ids[b, t]`` the word before it (scored on the backward top layer).
        """
        states = self.backbone.states(char_ids, mask)
        out = ElmoLMOutput(states.encoded())
        for name, hidden, targets in (("fwd", states.forward[-1], next_ids), ("bwd", states.backward[-1], prev_ids)):
            if targets is not None:
                self._score(out, name, self.output_dropout(hidden), targets)
        return out

    def _score(self, out: ElmoLMOutput, name: str, hidden: torch.Tensor, targets: torch.Tensor) -> None:
        """Fused softmax cross entropy at the positions with a target: ``(M, p)`` rows."""
        keep = targets != IGNORE  # (B, T)
        y = targets[keep]  # (M,)
        if y.numel() and not 0 <= int(y.min()) <= int(y.max()) < self.cfg.vocab_size:
            bad = y[(y < 0) | (y >= self.cfg.vocab_size)][0]
            raise ValueError(f"{name} target {int(bad)} is outside the softmax of {self.cfg.vocab_size} words")
        loss, correct = linear_cross_entropy(hidden[keep], self.softmax_weight, self.softmax_bias, y)
        out.loss_sums[name], out.correct[name] = loss, correct
        out.counts[name] = torch.tensor(float(y.numel()))


def init_elmo_weights(model: ElmoLanguageModel, cfg: ElmoConfig) -> None:
    """The biLM's initialisation, after bilm-tf where it states one.

    * character embeddings ~ U(−1, 1) (the padded-token row 0 stays 0);
    * convolutions ~ U(−0.05, 0.05) (Kim et al. 2016), biases 0;
    * highway: :meth:`~muppets.nn.highway.Highway.reset_parameters` (N(0, 1/d), carry bias);
    * projection and softmax weights ~ N(0, 1/fan_in) (std ``1/sqrt(fan_in)``), biases 0;
    * LSTMs: torch's U(±1/sqrt(lstm_dim)), with the forget-gate input bias set to
      ``lstm_forget_bias`` and the recurrent biases 0 (bilm-tf's ``forget_bias=1``).
    """
    enc = model.backbone.token_encoder
    with torch.no_grad():
        nn.init.uniform_(enc.char_cnn.embed.weight, -1.0, 1.0)
        enc.char_cnn.embed.weight[0].zero_()
        for conv in enc.char_cnn.convs:
            nn.init.uniform_(conv.weight, -0.05, 0.05)
            nn.init.zeros_(conv.bias)
        enc.highway.reset_parameters()
        nn.init.normal_(enc.projection.weight, 0.0, 1.0 / math.sqrt(cfg.num_filters))
        nn.init.zeros_(enc.projection.bias)
        nn.init.normal_(model.softmax_weight, 0.0, 1.0 / math.sqrt(cfg.projection_dim))
        nn.init.zeros_(model.softmax_bias)
        for stack in (model.backbone.forward_lstm, model.backbone.backward_lstm):
            for lstm in stack.layers:
                lstm.reset_parameters()
                h = lstm.hidden_size
                lstm.bias_hh_l0.zero_()
                lstm.bias_ih_l0.zero_()
                lstm.bias_ih_l0[h:2 * h] = cfg.lstm_forget_bias  # gate order (i, f, g, o)
