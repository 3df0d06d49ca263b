"""Position-wise feed-forward network: ``W2 · act(W1 · x)``."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from muppets.nn.decode import linear


def activation(name: str):
    """Return the activation function called ``name`` (``gelu`` exact erf, ``gelu_new`` tanh, ``relu``)."""
    if name == "gelu":
        return F.gelu
    if name in ("gelu_new", "gelu_tanh", "gelu_pytorch_tanh"):
        return lambda x: F.gelu(x, approximate="tanh")
    if name == "relu":
        return F.relu
    raise ValueError(f"unknown activation {name!r}; expected gelu, gelu_new or relu")


class FeedForward(nn.Module):
    """``(B, T, H) -> (B, T, H)`` through an inner width ``I`` (usually 4H)."""

    def __init__(self, hidden_size: int, intermediate_size: int, act: str = "gelu") -> None:
        super().__init__()
        self.up = nn.Linear(hidden_size, intermediate_size)
        self.down = nn.Linear(intermediate_size, hidden_size)
        self.act = activation(act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(self.down, self.act(linear(self.up, x)))  # (B, T, I) inside
