"""The neural probabilistic language model (Bengio, Ducharme, Vincent & Jauvin 2003, JMLR).

Each of the n-1 previous words is looked up in one shared embedding matrix C (V x m); their
concatenation x = [C(w_{t-1}), …, C(w_{t-n+1})] feeds a tanh hidden layer, and the next-word
distribution is (eq. 1 of the paper)

    y = b + W x + U tanh(d + H x),        P(w_t | w_{t-n+1..t-1}) = softmax(y)_{w_t},

where W x are the optional *direct connections* from the embeddings to the output. Writing
z = [tanh(d + H x), x], y = b + [U W] z is a single V-way linear layer on z (on tanh(d + H x)
alone without direct connections), which is how it is computed here: one fused linear + cross
entropy (:func:`muppets.nn.linear_ce.linear_cross_entropy`) that never stores the (B, V) logits
for the backward pass. The rows of C are the model's word vectors (:meth:`NNLM.word_vectors`).

Usage::

    model = NNLM(NNLMConfig.preset("nnlm-small", vocab_size=len(vocab)))
    out = model(input_ids, labels)            # input_ids (B, n-1) oldest first, labels (B,)
    out.loss_sums["lm"] / out.counts["lm"]    # mean cross entropy; exp() of it = perplexity
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from muppets.config import from_dict, write_json_atomic
from muppets.errors import CheckpointError, ConfigError
from muppets.interop.safetensors_io import read_json_object
from muppets.nn.encoded import Encoded
from muppets.nn.linear_ce import linear_cross_entropy
from muppets.vectors import WordVectors

__all__ = ["NNLMConfig", "NNLM_PRESETS", "NNLM", "NNLMOutput"]

CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"


@dataclass
class NNLMConfig:
    """Sizes of the NNLM (Bengio et al. 2003 use n = 5 or 6, m = 30-100, h = 0-100)."""

    vocab_size: int = 0  # V, output classes = input words (set from the vocabulary)
    context_size: int = 4  # n - 1, previous words seen
    embedding_dim: int = 60  # m, dimension of the shared word features C
    hidden_size: int = 50  # h, tanh units (0 = no hidden layer: a log-bilinear model on x)
    direct: bool = True  # direct connections W x from the embeddings to the output
    dropout: float = 0.0  # dropout on the hidden layer and the embeddings (not in the paper)
    init_range: float = 0.05  # weights start U(-init_range, init_range); biases 0

    def __post_init__(self) -> None:
        checks = [("vocab_size", self.vocab_size >= 1), ("context_size", self.context_size >= 1),
                  ("embedding_dim", self.embedding_dim >= 1), ("hidden_size", self.hidden_size >= 0),
                  ("dropout", 0 <= self.dropout < 1), ("init_range", self.init_range > 0),
                  ("direct or hidden", self.direct or self.hidden_size > 0)]
        for name, ok in checks:
            if not ok:
                raise ConfigError(f"nnlm.{name}: invalid value in {self}", key=name)

    @property
    def features(self) -> int:
        """Width of z, the input of the output layer."""
        return self.hidden_size + (self.context_size * self.embedding_dim if self.direct else 0)

    @classmethod
    def preset(cls, name: str, **overrides) -> NNLMConfig:
        if name not in NNLM_PRESETS:
            raise ConfigError(f"unknown NNLM preset {name!r}; choose one of {', '.join(NNLM_PRESETS)}")
        return from_dict(cls, {"vocab_size": 1, **NNLM_PRESETS[name], **overrides})


NNLM_PRESETS: dict[str, dict] = {
    "nnlm-tiny": {"context_size": 3, "embedding_dim": 16, "hidden_size": 16},  # tests
    "nnlm-small": {"context_size": 4, "embedding_dim": 60, "hidden_size": 50},  # n=5, paper-sized
    "nnlm-base": {"context_size": 5, "embedding_dim": 100, "hidden_size": 100},  # n=6, the larger runs
}


@dataclass
class NNLMOutput:
    """``loss_sums``/``counts``/``correct`` of the ``lm`` term (summed cross entropy, targets,
    argmax hits) when labels are given; ``logits`` (B, V) otherwise."""

    encoded: Encoded
    loss_sums: dict[str, torch.Tensor]
    counts: dict[str, torch.Tensor]
    correct: dict[str, torch.Tensor]
    logits: torch.Tensor | None = None


class NNLM(nn.Module):
    """Bengio et al.'s feed-forward n-gram language model (see the module docstring)."""

    def __init__(self, cfg: NNLMConfig) -> None:
        super().__init__()
        self.cfg = cfg
        n1, m, h = cfg.context_size, cfg.embedding_dim, cfg.hidden_size
        self.embeddings = nn.Embedding(cfg.vocab_size, m)  # C
        self.hidden = nn.Linear(n1 * m, h) if h > 0 else None  # H, d
        self.output = nn.Linear(cfg.features, cfg.vocab_size)  # [U W], b
        self.dropout = nn.Dropout(cfg.dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Uniform(-r, r) weights, zero biases (the paper initialises near zero)."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.uniform_(module.weight, -self.cfg.init_range, self.cfg.init_range)
            if isinstance(module, nn.Linear):
                nn.init.zeros_(module.bias)

    def features(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, n-1) context ids -> embeddings (B, n-1, m) and z = [tanh(d + H x), x] (B, features)."""
        B = input_ids.shape[0]
        emb = self.embeddings(input_ids)  # (B, n-1, m)
        x = self.dropout(emb.reshape(B, -1))  # (B, (n-1) m)
        parts = [self.dropout(torch.tanh(self.hidden(x)))] if self.hidden is not None else []
        return emb, torch.cat(parts + ([x] if self.cfg.direct else []), dim=-1)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> NNLMOutput:
        """input_ids (B, n-1), oldest word first; labels (B,) the next word."""
        if input_ids.shape[-1] != self.cfg.context_size:
            raise ConfigError(f"expected {self.cfg.context_size} context words, got {input_ids.shape[-1]}")
        emb, z = self.features(input_ids)
        encoded = Encoded(layers=[emb], mask=torch.ones(input_ids.shape, dtype=torch.bool, device=input_ids.device))
        if labels is None:
            return NNLMOutput(encoded, {}, {}, {}, logits=self.output(z))
        loss, correct = linear_cross_entropy(z, self.output.weight, self.output.bias, labels)
        count = torch.tensor(float(labels.numel()))
        return NNLMOutput(encoded, {"lm": loss}, {"lm": count}, {"lm": correct})

    # ------------------------------------------------------------------ export and files
    def word_vectors(self, words: list[str], skip: int = 4) -> WordVectors:
        """The rows of C as :class:`WordVectors`, without the first ``skip`` ids (WordVocab's
        ``<pad> <unk> <s> </s>``)."""
        if len(words) != self.cfg.vocab_size:
            raise ConfigError(f"{len(words)} words for a model of {self.cfg.vocab_size}")
        return WordVectors(words[skip:], self.embeddings.weight.detach()[skip:].cpu().numpy().copy())

    def save(self, directory: str | Path) -> Path:
        """``config.json`` + ``model.safetensors``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        write_json_atomic(directory / CONFIG_FILE, asdict(self.cfg))
        save_file({k: v.contiguous() for k, v in self.state_dict().items()}, str(directory / WEIGHTS_FILE))
        return directory

    @classmethod
    def load(cls, directory: str | Path) -> NNLM:
        directory = Path(directory)
        for name in (CONFIG_FILE, WEIGHTS_FILE):
            if not (directory / name).is_file():
                raise CheckpointError(f"{directory}: no {name} (not a saved NNLM)")
        model = cls(from_dict(NNLMConfig, read_json_object(directory / CONFIG_FILE)))
        try:
            model.load_state_dict(load_file(str(directory / WEIGHTS_FILE)))
        except RuntimeError as err:
            raise CheckpointError(f"{directory / WEIGHTS_FILE}: does not fit the config: {err}") from err
        return model
