"""A character CNN token encoder (Kim et al. 2016, §2; ELMo: Peters et al. 2018, §3.1).

A token is a row of ``C`` character ids (:mod:`muppets.tokenizers.characters`). Each id is
embedded (``E`` dims), then for every filter bank ``(w, n)`` — ``n`` filters of width ``w`` —

    f_j = act( max_{i ≤ C − w} ( K_j ⋆ e[i : i + w] ) + b_j ),   j = 1 … n

a 1-D convolution over the character positions, max-pooled over time ("max-over-time
pooling", Kim §2.1); the banks are concatenated into one ``Σ n``-dim token vector. The
activation is applied after the max, which equals pooling the activated feature maps for the
monotone ``relu``/``tanh`` and is cheaper (bilm-tf does the same). ELMo uses 16-dim character
embeddings, 262 ids, ``C = 50`` and the banks ``[(1, 32), (2, 32), (3, 64), (4, 128), (5, 256),
(6, 512), (7, 1024)]`` (2048 filters) with ``relu``; Kim et al. use ``tanh``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from muppets.errors import ConfigError

ACTIVATIONS = {"relu": torch.relu, "tanh": torch.tanh}


class CharCNN(nn.Module):
    """``char_ids (..., C)`` -> ``(..., Σ n)``: embeddings, convolutions, max over time, activation.

    Args:
        num_chars: character ids ``0 … num_chars − 1``; id 0 (a padded token) embeds to zeros.
        char_dim: character embedding size ``E``.
        filters: ``(width, count)`` banks; every width must fit in the ``C`` characters.
        activation: ``relu`` (ELMo) or ``tanh`` (Kim et al.).
    """

    def __init__(self, num_chars: int, char_dim: int, filters: Sequence[Sequence[int]],
                 activation: str = "relu") -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ConfigError(f"char activation {activation!r} is not one of {', '.join(ACTIVATIONS)}")
        if not filters or any(len(f) != 2 or f[0] < 1 or f[1] < 1 for f in filters):
            raise ConfigError(f"filters: {list(filters)!r} must be a non-empty list of [width, count] pairs >= 1")
        self.filters = [(int(w), int(n)) for w, n in filters]
        self.act = ACTIVATIONS[activation]
        self.embed = nn.Embedding(num_chars, char_dim, padding_idx=0)
        self.convs = nn.ModuleList(nn.Conv1d(char_dim, n, kernel_size=w) for w, n in self.filters)

    @property
    def output_dim(self) -> int:
        return sum(n for _, n in self.filters)

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        """``char_ids (..., C)`` long -> ``(..., Σ n)``."""
        *lead, C = char_ids.shape
        widest = max(w for w, _ in self.filters)
        if C < widest:
            raise ValueError(f"{C} characters per token are fewer than the widest filter ({widest})")
        x = self.embed(char_ids.reshape(-1, C)).transpose(1, 2)  # (N, E, C)
        pooled = [conv(x).amax(dim=-1) for conv in self.convs]  # each (N, n)
        return self.act(torch.cat(pooled, dim=-1)).reshape(*lead, self.output_dim)  # (..., Σ n)
